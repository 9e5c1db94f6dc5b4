"""Intake's rules: what a submission holds, its fingerprint, reserved keys, resubmits, follow-ups.

Pure: imports only the standard library and ``jobwarden.models``. Its SQL:
``models/persistence/intake_store.py``.
"""
