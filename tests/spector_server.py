"""Microsoft's TypeSpec scenario mocks (``tsp-spector serve``) on a free port, for tests.

``SpectorServer`` runs ``node tests/spector/node_modules/.bin/tsp-spector serve <specs>
--port 0 --coverageFile <workdir>/spec-coverage.json`` with the specs of
``@azure-tools/azure-http-specs`` (pinned in ``tests/spector/package-lock.json``, installed by
``scripts/install_spector``; nothing is fetched at test time). What spector does, read from
``@typespec/spector/dist/src`` and ``@typespec/spec-api/dist`` at the pinned versions:

- It serves every scenario of the package, not a chosen folder: a path argument must be a
  ``specs`` folder whose sibling ``dist`` holds the compiled ``mockapi.js`` files
  (``scenarios-resolver.js``: ``join(scenariosPath, "../dist/**/*.js")``). It runs
  ``git rev-parse HEAD`` in that folder for its coverage metadata (``utils/misc-utils.js``),
  so the install must sit inside a git work tree, as ``tests/spector`` does.
- ``app.listen(port)`` binds every interface and has no host option (``server/server.js``);
  a six-line preload (``_LOOPBACK_ONLY``) gives that call the host 127.0.0.1.
  ``--port 0`` lets the kernel choose; spector logs ``Started server on <port>``.
- Judging (``coverage/coverage-tracker.js``): every answer a scenario's handler returns is
  recorded under the scenario and the endpoint's ``uri``, the method not included;
  ``GET /.coverage`` (``app/app.js``) computes ``{name: "pass" | "fail" |
  "not-implemented"}`` from those records, and a SIGTERM (``cli/cli.js`` exits,
  ``process.on("exit")`` saves) writes the same to the coverage file. For
  ``passOnSuccess`` a scenario passes when every listed ``uri`` has a record and the
  last one is 2xx, so two polls listed on one uri need one poll, and a PUT and a GET on
  one uri need either (``passOnCode`` wants the given status instead of 2xx).
  ``not-implemented`` means some uri has no record. Express routes a method and uri to
  the first entry registered for it, so one handler answers both listed polls. There is no
  reset: records and the mocks' own counters (``generationPollCount`` and the like) live
  as long as the process, so a scenario is judged once per server, one run at a time.
- Rejection (``app/request-processor.js``): a failed ``req.expect…`` throws a
  ``ValidationError``; spector logs ``Request validation failed: <message>`` with the
  expected and actual values, answers 400 with ``{"message", "expected", "actual"}`` and
  records nothing, so a rejected request never makes a scenario fail — it only does not
  count. A handler that throws anything else is logged as ``Unexpected request error``
  and answered 500, also unrecorded. ``rejections()`` reads both from the log.
- Requests: morgan's ``dev`` format logs ``<method> <url> <status> <ms> ms - <length>``
  for every request, routed or not (a path no mock serves gets express's 404), once the
  response is sent. ``request_log()`` returns them in that order.

A server that cannot start raises ``ServerStartError`` with the end of its log.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from types import TracebackType
from typing import IO, Self
from urllib.parse import quote

import httpx

from jobwarden.demo.embedded import ServerStartError

SPECTOR_DIR = Path(__file__).resolve().parent / "spector"
# scripts/install_spector touches this after npm ci; older than the lock file means stale.
_STAMP = "node_modules/.jobwarden-installed"
_CLI = "node_modules/.bin/tsp-spector"
_SPECS = "node_modules/@azure-tools/azure-http-specs/specs"
# Spector's express app calls listen(port, callback); give such a call the loopback host.
_LOOPBACK_ONLY = """import { Server } from "node:net";
const listen = Server.prototype.listen;
Server.prototype.listen = function (port, ...rest) {
  return typeof port === "number" && typeof rest[0] !== "string"
    ? listen.call(this, port, "127.0.0.1", ...rest)
    : listen.call(this, port, ...rest);
};"""
_STARTED = re.compile(r"^info Started server on (\d+)$")
_REQUEST = re.compile(r"^info ([A-Z]+) (\S+) (\d{3}|-) \S+ ms - \S*$")
_VALIDATION_FAILED = "warn Request validation failed: "
_HANDLER_ERROR = "error Unexpected request error"
_LEVELS = ("debug ", "info ", "warn ", "error ")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_BARRIER = "/.jobwarden-log-barrier/"
# The helper's own coverage reads, tagged so request_log() can leave them out.
_OWN_COVERAGE = "/.coverage?from=jobwarden-spector-helper"


class ScenarioStatus(StrEnum):
    """What ``GET /.coverage`` says of a scenario (``coverage-tracker.js``)."""

    PASS = "pass"  # every listed uri answered, the last answer on each as the scenario wants
    FAIL = "fail"  # every uri answered, a last answer not as wanted
    NOT_IMPLEMENTED = "not-implemented"  # some uri has no recorded answer


@dataclass(frozen=True, slots=True, kw_only=True)
class LoggedRequest:
    """One request as spector logged it once answered."""

    method: str
    path: str  # the request target as sent: path and query string
    status: int | None  # None when spector logged "-" (no response was sent)
    logged_at: float  # time.monotonic() when the helper read the line; compare entries only
    rejection: str | None = None  # spector's reason when a mock refused the request


class SpectorServer:
    """``tsp-spector serve`` of the azure-http-specs scenarios on 127.0.0.1, a free port.

    ``start()`` returns once ``GET /.coverage`` answers; ``stop()`` sends SIGTERM (spector
    then writes its coverage file), SIGKILL after ``stop_timeout``. As a context manager
    it starts and stops, and removes its folder when it made one; pass ``workdir`` (a
    pytest ``tmp_path``) to keep ``spector.log`` and ``spec-coverage.json``.
    """

    def __init__(
        self,
        *,
        workdir: Path | None = None,
        install_dir: Path = SPECTOR_DIR,
        startup_timeout: float = 60.0,
        stop_timeout: float = 10.0,
    ) -> None:
        self.install_dir = install_dir
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self._own_workdir = workdir is None
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="jobwarden-spector-"))
        self.log_path = self.workdir / "spector.log"
        self.coverage_path = self.workdir / "spec-coverage.json"
        self._proc: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None
        self._lines: list[tuple[float, str]] = []
        self._changed = threading.Condition()
        self._port: int | None = None

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the spector server is not started")
        return self._port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Self:
        node = shutil.which("node")
        cli, specs = self.install_dir / _CLI, self.install_dir / _SPECS
        stamp, lock = self.install_dir / _STAMP, self.install_dir / "package-lock.json"
        if not cli.exists() or not specs.is_dir() or not stamp.exists():
            raise ServerStartError(
                f"the spector mocks are not installed in {self.install_dir}; "
                "run scripts/install_spector"
            )
        if lock.stat().st_mtime > stamp.stat().st_mtime:
            raise ServerStartError(
                f"the spector install in {self.install_dir} is older than its package-lock.json; "
                "run scripts/install_spector"
            )
        if node is None:
            raise ServerStartError("node is not on PATH; install Node.js 20 or later")
        preload = "--import=data:text/javascript," + quote(_LOOPBACK_ONLY)
        command = [node, preload, str(cli), "serve", str(specs), "--port", "0"]
        command += ["--coverageFile", str(self.coverage_path)]
        # NO_COLOR: morgan's dev format and picocolors then write plain text.
        env = {**os.environ, "NO_COLOR": "1", "FORCE_COLOR": "0"}
        self._proc = subprocess.Popen(
            command,
            cwd=self.workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            encoding="utf-8",
            errors="replace",
        )
        assert self._proc.stdout is not None
        log = self.log_path.open("a", encoding="utf-8")
        self._reader = threading.Thread(
            target=self._read, args=(self._proc.stdout, log), name="spector-log", daemon=True
        )
        self._reader.start()
        try:
            self._await_ready(time.monotonic() + self.startup_timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _read(self, stream: IO[str], log: IO[str]) -> None:
        with stream, log:
            for raw in stream:
                log.write(raw)
                log.flush()
                line = _ANSI.sub("", raw.rstrip("\n"))
                with self._changed:
                    self._lines.append((time.monotonic(), line))
                    started = _STARTED.match(line)
                    if started and self._port is None:
                        self._port = int(started.group(1))
                    self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()  # the process is gone: wake anyone waiting

    def _await_ready(self, deadline: float) -> None:
        with self._changed:
            self._changed.wait_for(
                lambda: self._port is not None or not self._running(), deadline - time.monotonic()
            )
        if self._port is None:
            raise ServerStartError(f"tsp-spector serve did not start:\n{self._log_tail()}")
        with httpx.Client(timeout=2.0) as client:
            while True:
                with contextlib.suppress(httpx.TransportError):
                    if client.get(f"{self.url}{_OWN_COVERAGE}").status_code == 200:
                        return
                if not self._running() or time.monotonic() > deadline:
                    raise ServerStartError(f"tsp-spector serve did not answer:\n{self._log_tail()}")
                time.sleep(0.05)  # polling a condition (an answer), with a deadline

    def _running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def _log_tail(self) -> str:
        return "\n".join(self.log_lines()[-40:])

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after ``stop_timeout``; idempotent."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(self.stop_timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(self.stop_timeout)
        if self._reader is not None:
            self._reader.join(self.stop_timeout)

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.__exit__(None, None, None)
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def scenario_results(self) -> dict[str, ScenarioStatus]:
        """Spector's verdict per scenario: ``GET /.coverage`` while it runs, else the
        coverage file it wrote on exit. Raises ``ServerStartError`` when neither exists."""
        if self._running():
            with httpx.Client(timeout=10.0) as client:
                response = client.get(f"{self.url}{_OWN_COVERAGE}")
                response.raise_for_status()
                reports = response.json()
        elif self.coverage_path.exists():
            reports = json.loads(self.coverage_path.read_text(encoding="utf-8"))
        else:
            raise ServerStartError(f"spector is not running and wrote no {self.coverage_path}")
        return {
            name: ScenarioStatus(status)
            for report in reports
            for name, status in report["results"].items()
        }

    def log_lines(self) -> list[str]:
        """Every line spector wrote so far, colour codes removed."""
        with self._changed:
            return [line for _, line in self._lines]

    def request_log(self) -> list[LoggedRequest]:
        """Every request spector answered so far, in the order it logged them, each with
        the reason when a mock refused it; the helper's own requests are left out. While
        the server runs, a marker request is sent and awaited first, so every request
        answered before this call is included."""
        if self._running():
            self._await_barrier()
        with self._changed:
            lines = list(self._lines)
        return [
            request
            for request in _parse_log(lines)
            if not request.path.startswith(_BARRIER) and request.path != _OWN_COVERAGE
        ]

    def rejections(self) -> list[LoggedRequest]:
        """The requests a mock refused (400 from a failed expectation, 500 from a handler
        error); empty means every routed request was accepted. A path no mock serves is
        answered 404 by express with no reason logged: it shows in ``request_log()``."""
        return [request for request in self.request_log() if request.rejection is not None]

    def _await_barrier(self) -> None:
        marker = f"{_BARRIER}{uuid.uuid4().hex}"
        with self._changed:
            seen = len(self._lines)
        with httpx.Client(timeout=5.0) as client:
            client.get(f"{self.url}{marker}")
        with self._changed:
            if not self._changed.wait_for(
                lambda: any(marker in line for _, line in self._lines[seen:]), 5.0
            ):
                raise ServerStartError(f"spector did not log the marker request {marker}")


def _parse_log(lines: list[tuple[float, str]]) -> list[LoggedRequest]:
    """The request lines of spector's log, each refusal paired with the next request line
    of its status (spector logs the reason before it answers, morgan once it has)."""
    logged: list[LoggedRequest] = []
    refusals: list[tuple[str, list[str]]] = []  # (status, reason lines) awaiting their request
    reading: list[str] | None = None  # the refusal whose continuation lines are being read
    for at, line in lines:
        if reading is not None and not line.startswith(_LEVELS):
            if line.strip():
                reading.append(line.strip())  # the expected/actual values, a stack trace
            continue
        reading = None
        if line.startswith(_VALIDATION_FAILED):
            reading = [line.removeprefix(_VALIDATION_FAILED)]
            refusals.append(("400", reading))
        elif line.startswith(_HANDLER_ERROR):
            reading = [line.removeprefix("error ")]
            refusals.append(("500", reading))
        elif match := _REQUEST.match(line):
            method, path, status = match.groups()
            rejection = None
            if refusals and refusals[0][0] == status:
                rejection = "\n".join(refusals.pop(0)[1])
            logged.append(
                LoggedRequest(
                    method=method,
                    path=path,
                    status=None if status == "-" else int(status),
                    logged_at=at,
                    rejection=rejection,
                )
            )
    return logged
