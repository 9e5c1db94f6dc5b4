"""The HTTP API on a real uvicorn server on a free port, for tests (no TestClient).

``serving(app)`` starts uvicorn in a thread and yields the base URL once the server
accepts connections; leaving the block stops it and waits for the thread.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn
from fastapi import FastAPI


def serving_thread(url: str) -> str:
    """The name of the thread serving ``url``: what it logs can be told from other servers'."""
    return f"uvicorn {url}"


@contextmanager
def serving(app: FastAPI, *, timeout: float = 15.0) -> Iterator[str]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="off", ws="none", access_log=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=server.run,
        kwargs={"sockets": [sock]},
        daemon=True,
        name=serving_thread(f"http://127.0.0.1:{port}"),
    )
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"uvicorn did not start on port {port}")
        time.sleep(0.01)  # polling a condition (server.started), with a deadline
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout)
        sock.close()
