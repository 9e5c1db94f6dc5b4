"""The edge sends without httpx.Client's layers (transport.DirectSender, issue 37), and
nothing a provider sees or the edge concludes differs from what httpx.Client does.

Each case sends the same request both ways, through one transport kind, to a socket
server of the test's own that records the bytes it receives: the same bytes on the wire
(request line, every header in its order, the body), the same timeout handed to the
transport, the same answer read, and the same exception type for a refused connection,
a connection closed without an answer and a read that times out.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import httpx
import pytest

from jobwarden.tasks.provider.edge import USER_AGENT, _parsed
from jobwarden.tasks.provider.transport import DirectSender, new_client

LIMITS = httpx.Limits(max_connections=4, max_keepalive_connections=2)
ANSWER = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Request-Id: r-1\r\n"
    b"Set-Cookie: planted=1; Path=/\r\nContent-Length: 20\r\n\r\n"
    b'{"status":"running"}'
)


@dataclass
class Recorder:
    """Each connection's received bytes (one request per connection: it answers, closes)."""

    answer: Callable[[socket.socket, bytes], None]
    received: list[bytes] = field(default_factory=list)


def _read_request(conn: socket.socket) -> bytes:
    data = b""
    for _ in range(1000):  # bounded: a request here is a few hundred bytes
        if b"\r\n\r\n" in data:
            head, _, body = data.partition(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            if len(body) >= length:
                return data
        chunk = conn.recv(65536)
        if not chunk:
            return data
        data += chunk
    return data


@contextlib.contextmanager
def _serving(answer: Callable[[socket.socket, bytes], None]) -> Iterator[tuple[str, Recorder]]:
    recorder = Recorder(answer=answer)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                request = _read_request(conn)
                recorder.received.append(request)
                recorder.answer(conn, request)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}", recorder
    finally:
        stop.set()
        # Wakes the accept() waiting in the thread (close alone would not, on Linux).
        with contextlib.suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)
        listener.close()
        thread.join(timeout=5)


def _answer(conn: socket.socket, _: bytes) -> None:
    conn.sendall(ANSWER.replace(b"200 OK\r\n", b"200 OK\r\nConnection: close\r\n"))


def _both(
    method: str, url: str, headers: dict[str, str], content: bytes | None, timeout: float
) -> list[tuple[httpx.Request, httpx.Response | BaseException]]:
    """The request built and sent by httpx.Client, then by DirectSender."""
    out: list[tuple[httpx.Request, httpx.Response | BaseException]] = []
    client = new_client(LIMITS, USER_AGENT)
    direct = DirectSender(LIMITS, USER_AGENT)
    try:
        built = client.build_request(
            method, _parsed(url), headers=headers, content=content, timeout=timeout
        )
        mine = direct.build_request(
            method, _parsed(url), headers=headers, content=content, timeout=timeout
        )
        for request, send in (
            (built, lambda r: client.send(r, stream=True)),
            (mine, direct.send),
        ):
            try:
                response = send(request)
                try:
                    response.extensions["body"] = b"".join(response.iter_raw())
                finally:
                    response.close()
                out.append((request, response))
            except Exception as exc:
                out.append((request, exc))
    finally:
        client.close()
        direct.close()
    return out


HEADERS = {
    "Accept": "application/json",
    "Accept-Encoding": "gzip",
    "Authorization": "Bearer s3cret-token-value",
    "Idempotency-Key": "tok-1",
    "traceparent": "00-" + "a" * 32 + "-" + "b" * 16 + "-01",
}


@pytest.mark.parametrize(
    ("method", "path", "content"),
    [
        ("GET", "/v1/jobs/job_1", None),
        ("GET", "/v1/jobs?reference=tok%201&x=%C3%A9", None),
        ("POST", "/v1/jobs", b'{"kind":"bench"}'),
        ("POST", "/v1/jobs/job_1/cancel", None),
        ("DELETE", "/v1/jobs/job_1", None),
    ],
)
def test_the_direct_send_puts_the_same_bytes_on_the_wire_and_reads_the_same_answer(
    method: str, path: str, content: bytes | None
) -> None:
    with _serving(_answer) as (url, recorder):
        (client_req, client_answer), (direct_req, direct_answer) = _both(
            method, url + path, HEADERS, content, 7.5
        )
    assert len(recorder.received) == 2
    assert recorder.received[0] == recorder.received[1]
    assert recorder.received[0].startswith(f"{method} {path} HTTP/1.1\r\n".encode())
    assert client_req.extensions["timeout"] == direct_req.extensions["timeout"]
    assert direct_req.extensions["timeout"] == httpx.Timeout(7.5).as_dict()
    assert isinstance(client_answer, httpx.Response) and isinstance(direct_answer, httpx.Response)
    assert direct_answer.status_code == client_answer.status_code == 200
    assert direct_answer.headers.multi_items() == client_answer.headers.multi_items()
    assert direct_answer.extensions["body"] == client_answer.extensions["body"]
    assert direct_answer.request is direct_req


def _close_unanswered(conn: socket.socket, _: bytes) -> None:
    conn.shutdown(socket.SHUT_RDWR)


def _never_answer(conn: socket.socket, _: bytes) -> None:
    # Held open until the client gives up (it closes its end: recv returns b"").
    conn.settimeout(10)
    with contextlib.suppress(OSError):
        conn.recv(1)


def test_a_connection_closed_without_an_answer_raises_the_same_error_both_ways() -> None:
    with _serving(_close_unanswered) as (url, _):
        outcomes = _both("GET", url + "/v1/jobs/j", HEADERS, None, 5)
    kinds = [type(outcome) for _, outcome in outcomes]
    assert kinds[0] is kinds[1] is httpx.RemoteProtocolError


def test_a_read_that_times_out_raises_the_same_error_both_ways() -> None:
    with _serving(_never_answer) as (url, _):
        outcomes = _both("GET", url + "/v1/jobs/j", HEADERS, None, 0.2)
    kinds = [type(outcome) for _, outcome in outcomes]
    assert kinds[0] is kinds[1] is httpx.ReadTimeout


def test_a_refused_connection_raises_the_same_error_both_ways() -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    outcomes = _both("GET", f"http://127.0.0.1:{port}/v1/jobs/j", HEADERS, None, 5)
    kinds = [type(outcome) for _, outcome in outcomes]
    assert kinds[0] is kinds[1] is httpx.ConnectError


def test_the_edge_sends_through_the_direct_sender_and_keeps_no_cookie() -> None:
    # The edge's pool per provider is a DirectSender; its client's jar stays empty even
    # after an answer that sets a cookie (the client never sees the answer).
    import dataclasses
    from pathlib import Path

    from jobwarden.models.actions import ProviderRequest, RequestPurpose
    from jobwarden.models.contracts.loader import load_contract
    from jobwarden.tasks.provider.edge import ProviderClient

    shipped = Path(__file__).resolve().parents[2] / "config" / "providers" / "sandbox.toml"
    with _serving(_answer) as (url, recorder):
        contract = dataclasses.replace(
            load_contract(shipped), base_url=url, base_url_env=None, auth=None
        )
        edge = ProviderClient()
        try:
            answer = edge.send(
                contract,
                ProviderRequest(purpose=RequestPurpose.status, method="GET", url=url + "/v1/x"),
                trace_id="c" * 32,
            )
            sender = edge._client(contract)
            assert isinstance(sender, DirectSender)
            assert len(sender.client.cookies.jar) == 0
        finally:
            edge.close()
    assert answer.observation.status_code == 200
    assert answer.observation.body == {"status": "running"}
    assert answer.provider_request_id == "r-1"
    assert len(recorder.received) == 1
