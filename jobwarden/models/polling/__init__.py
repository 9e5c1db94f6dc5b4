"""The poll's decisions: what a status answer means, backoff, hints, finish estimates, deadlines.

Pure: imports only the standard library and ``jobwarden.models``.
"""
