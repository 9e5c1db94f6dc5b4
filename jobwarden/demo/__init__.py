"""What the demo runs beside production code: the sandbox provider, harness, embedded servers.

Imported by nothing on the worker, API or CLI paths except the ``jobwarden demo`` and
``jobwarden sandbox`` commands (and the tests). May import anything in ``jobwarden``.
"""
