"""A slow client cannot hold a connection: the request must arrive whole in time
(jobwarden/api/server.py), on a real uvicorn server with the protocol `jobwarden api` uses.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import uvicorn

from jobwarden.api.app import create_app
from jobwarden.api.server import BoundedReadProtocol
from tests.integration.api_helpers import make_token, tenant_name

READ_TIMEOUT = 1.0


class QuickProtocol(BoundedReadProtocol):
    read_timeout = READ_TIMEOUT


@contextmanager
def bounded_server() -> Iterator[int]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        create_app(), log_level="warning", lifespan="off", ws="none", http=QuickProtocol
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)  # polling a condition (server.started), with a deadline
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(15)
        sock.close()


def _trickle(port: int, parts: list[bytes], every: float) -> tuple[bytes, float]:
    """Send ``parts`` one per ``every`` seconds until the server closes; what it answered."""
    started = time.monotonic()
    answer = b""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.settimeout(every)
        for part in parts:
            try:
                sock.sendall(part)
            except OSError:
                break  # the server closed it
            try:
                chunk = sock.recv(4096)
            except TimeoutError:
                continue  # nothing yet: the next part (the wait is the client's slowness)
            except OSError:
                break
            if not chunk:
                break
            answer += chunk
            break
        sock.settimeout(5)
        try:
            while chunk := sock.recv(4096):
                answer += chunk
        except OSError:
            pass
    return answer, time.monotonic() - started


def test_a_client_sending_one_header_line_a_second_is_answered_408_and_dropped(
    database_url: str,
) -> None:
    lines = [b"GET /healthz HTTP/1.1\r\n"] + [b"X-Slow-%d: 1\r\n" % i for i in range(30)]
    with bounded_server() as port:
        answer, took = _trickle(port, lines, every=0.3)
    assert answer.startswith(b"HTTP/1.1 408"), answer
    assert b"connection: close" in answer.lower()
    assert took < READ_TIMEOUT + 5, took  # 30 lines at 0.3 s would take 9 s


def test_a_body_trickling_one_byte_at_a_time_is_cut_off(database_url: str) -> None:
    auth = make_token(database_url, tenant_name(), "svc", ["submit"])["Authorization"]
    head = (
        "POST /v1/operations HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Authorization: {auth}\r\nIdempotency-Key: slow\r\nContent-Length: 100\r\n\r\n"
    ).encode()
    with bounded_server() as port:
        answer, took = _trickle(port, [head] + [b" "] * 100, every=0.2)
    # The route is reading the body: the connection closes with no answer, long before
    # the 20 s the body would take.
    assert answer == b""
    assert took < READ_TIMEOUT + 5, took


def test_a_prompt_client_on_a_kept_alive_connection_is_served_every_time(
    database_url: str,
) -> None:
    with bounded_server() as port, httpx.Client(base_url=f"http://127.0.0.1:{port}") as client:
        started = time.monotonic()
        count = 0
        # Requests spaced out over more than the read timeout on one connection: each
        # request gets its own deadline, counted from the previous answer.
        while time.monotonic() - started < READ_TIMEOUT * 2.5:
            assert client.get("/healthz").status_code == 200
            count += 1
            time.sleep(0.3)  # the client's own pace between requests, not synchronisation
        assert count >= 5
