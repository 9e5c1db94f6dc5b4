"""An S3-compatible server for the result store's tests: moto's standalone server.

Why moto: no real S3-compatible server (MinIO, SeaweedFS, Garage) installs from the
package registries this project reaches (PyPI, npm, Debian; Debian has only Ceph's
radosgw, npm only the unmaintained ``s3rver``). moto is a library's mock server, said
plainly; but it is run here as a separate process (``python -m moto.server``) spoken to
over real HTTP by obstore's real S3 client, with real multipart uploads, so a test can
kill it mid-upload. What it cannot show: moto keeps everything in memory, so a restarted
server is empty whatever the client did; the abort of an upload is witnessed instead by
listing the bucket's pending multipart uploads while the server still runs.

``S3Server.start`` waits until the server answers HTTP (a bounded poll of a real
condition, never a fixed sleep); ``stop`` ends only the process it started.
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

START_TIMEOUT = 30.0
ACCESS_KEY = "jobwarden-test"
SECRET_KEY = "jobwarden-test-secret"


class S3ServerError(RuntimeError):
    """The test S3 server could not be started (the tests fail with it, never skip)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _request(method: str, url: str) -> bytes:
    request = urllib.request.Request(url, method=method)
    with urllib.request.urlopen(request, timeout=5) as answer:
        body: bytes = answer.read()
        return body


@dataclass
class S3Server:
    """One moto server process on 127.0.0.1, owned by whoever started it."""

    port: int
    log: Path
    process: subprocess.Popen[bytes] = field(repr=False)

    @classmethod
    def start(cls, log_dir: Path, port: int | None = None) -> S3Server:
        port = port or free_port()
        log = log_dir / f"moto-{port}.log"
        with log.open("ab") as out:
            process = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        server = cls(port=port, log=log, process=process)
        try:
            server._wait_ready()
        except BaseException:
            server.stop()
            raise
        return server

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def environ(self) -> dict[str, str]:
        """The AWS_* variables a ResultStore reads to reach this server."""
        return {
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ALLOW_HTTP": "true",
        }

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if self.process.poll() is not None:
                raise S3ServerError(
                    f"moto server exited with {self.process.returncode}; see {self.log}"
                )
            try:
                _request("GET", f"{self.endpoint}/moto-api/")
                return
            except (OSError, urllib.error.URLError):
                pass
            if time.monotonic() > deadline:
                raise S3ServerError(f"moto server on {self.endpoint} not answering in time")
            time.sleep(0.05)

    def create_bucket(self, name: str) -> None:
        _request("PUT", f"{self.endpoint}/{name}")

    def pending_uploads(self, bucket: str) -> list[str]:
        """Keys of multipart uploads started and neither completed nor aborted."""
        body = _request("GET", f"{self.endpoint}/{bucket}?uploads").decode()
        return re.findall(r"<Upload>.*?<Key>(.*?)</Key>", body, flags=re.S)

    def kill(self) -> None:
        """Kill the server at once (no graceful shutdown) and reap it."""
        self.process.kill()
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
