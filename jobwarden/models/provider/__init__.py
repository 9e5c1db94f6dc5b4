"""The provider exchange, purely: requests, bytes as they leave, origins, answers, rate limits.

Pure: imports only the standard library and ``jobwarden.models``. The wire itself:
``tasks/provider/edge.py`` and ``tasks/provider/transport.py``.
"""
