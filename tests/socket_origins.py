"""Where each connection to the run's Redis was opened, for an unclosed-socket failure.

Sockets are finalized by the garbage collector in whichever test runs then, so a
ResourceWarning ("unclosed <socket.socket fd=34 ... raddr=('127.0.0.1', 6379)>") names
the socket but not who opened it. An audit hook (PEP 578: it observes, it changes
nothing) notes each connect to that server by file descriptor: a descriptor is not
reused while its socket is open, so the last note for the one a warning names is the
leaked socket's. tests/conftest.py adds that note to the failing test's report.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import traceback
from typing import Any

_ORIGINS: dict[int, str] = {}
_PORT: list[int] = []
_UNCLOSED = re.compile(r"unclosed <socket\.socket fd=(\d+),")


def watch(port: int) -> None:
    """Start noting connections to ``port`` (once per process)."""
    if not _PORT:
        _PORT.append(port)
        sys.addaudithook(_note)


def _note(event: str, args: tuple[Any, ...]) -> None:
    if event != "socket.connect":
        return
    sock, address = args
    if not (isinstance(address, tuple) and len(address) >= 2 and address[1] == _PORT[0]):
        return
    where = "".join(traceback.format_stack(limit=24)[:-1])
    test = os.environ.get("PYTEST_CURRENT_TEST", "(between tests)")
    thread = threading.current_thread().name
    _ORIGINS[sock.fileno()] = f"opened in {test}, thread {thread}:\n{where}"


def origins_named_in(text: str) -> list[str]:
    """The noted origin of every unclosed socket ``text`` names."""
    return [
        f"fd {fd}: {_ORIGINS.get(int(fd), 'not noted (another server, or opened elsewhere)')}"
        for fd in dict.fromkeys(_UNCLOSED.findall(text))
    ]
