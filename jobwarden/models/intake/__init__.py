"""Intake's rules: what a submission may hold, its fingerprint, reserved keys, resubmission.

Pure: imports only the standard library and ``jobwarden.models``. Its SQL:
``models/persistence/intake_store.py``.
"""
