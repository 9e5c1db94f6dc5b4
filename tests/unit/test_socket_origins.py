"""tests/socket_origins.py: an unclosed-socket failure names the test that opened it."""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

from tests import socket_origins
from tests.conftest import REDIS_URL


def test_a_socket_to_the_runs_redis_is_traced_to_the_test_that_opened_it() -> None:
    parts = urlsplit(REDIS_URL)
    with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 6379)) as sock:
        fd = sock.fileno()
        warning = f"ResourceWarning: unclosed <socket.socket fd={fd}, family=2"
        (origin,) = socket_origins.origins_named_in(warning)
    assert origin.startswith(f"fd {fd}: opened in tests/unit/test_socket_origins.py::test_a_")
    assert "in create_connection" in origin


def test_a_descriptor_never_noted_is_said_to_be_unknown() -> None:
    (origin,) = socket_origins.origins_named_in("unclosed <socket.socket fd=99999, family=2")
    assert origin == "fd 99999: not noted (another server, or opened elsewhere)"
