"""The `jobwarden` command for tests: in this process, or as a real process where that matters.

Starting ``python -m jobwarden.cli.main`` costs a test about two seconds of one core
(imports, settings, a runtime, engines) for a command that then works for milliseconds:
the suite ran hundreds of them. :func:`run_cli` runs the same
``main()`` inside the test process instead, given what the process would have had:

- the environment: ``os.environ`` plus ``env`` (click's test runner sets and restores it),
  the repository as working directory, an empty stdin, ``sys.argv``;
- fresh process-wide state: the settings cache (read from that environment), no runtime,
  and afterwards the engines and runtime it made are closed, as a process exit
  would, and the test process's own are back untouched;
- what reaches stderr: a warning logged with no handler configured (logging's last resort,
  which ``observability/logs.py`` formats), an unexpected exception's traceback with exit
  code 1, ``main()``'s one ``error:`` line and exit code 2 for a JobwardenError.

:func:`run_cli_process` is the real process, for the tests where the process is the point:
the entry point, settings read at startup, signals, bytes that are not UTF-8 in argv, and
a fault point armed to kill (it kills the process that reaches it: in process, the test
run). Both answer a :class:`CliResult`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
import traceback
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

REPO = Path(__file__).resolve().parents[1]
TIMEOUT = 60


@dataclass(frozen=True, slots=True)
class CliResult:
    """What a `jobwarden` run left: its exit code and its two streams (text and bytes)."""

    args: tuple[str, ...]
    returncode: int
    stdout_bytes: bytes
    stderr_bytes: bytes

    @property
    def stdout(self) -> str:
        return self.stdout_bytes.decode("utf-8", "replace")

    @property
    def stderr(self) -> str:
        return self.stderr_bytes.decode("utf-8", "replace")


Environment = Mapping[str, str | None]
"""Variables set on top of this process's environment; None removes one."""


def run_cli_process(
    *args: str, env: Environment | None = None, timeout: float = TIMEOUT
) -> CliResult:
    """``python -m jobwarden.cli.main ARGS`` as an operator runs it, in the repository."""
    environ = {**os.environ, **(env or {})}
    done = subprocess.run(
        [sys.executable, "-m", "jobwarden.cli.main", *args],
        cwd=REPO,
        env={name: value for name, value in environ.items() if value is not None},
        capture_output=True,
        timeout=timeout,
        check=False,
    )
    return CliResult(tuple(args), done.returncode, done.stdout, done.stderr)


def run_cli(*args: str, env: Environment | None = None) -> CliResult:
    """``jobwarden ARGS`` run by ``main()`` in this process, as :func:`run_cli_process` would."""
    from jobwarden.cli.main import main

    runner = CliRunner()
    with (
        _fresh_process_state(),
        runner.isolation(env=dict(env or {})) as (out, err, _),
        _last_resort_logging(),
        _argv(args),
    ):
        code = _exit_code(main)
        sys.stdout.flush()
        sys.stderr.flush()
        return CliResult(tuple(args), code, out.getvalue(), err.getvalue())


def _exit_code(main: Callable[[], None]) -> int:
    try:
        main()
    except SystemExit as exc:
        if exc.code is None:
            return 0
        if isinstance(exc.code, int):
            return exc.code
        print(exc.code, file=sys.stderr)  # sys.exit("text"), as the interpreter does
        return 1
    except Exception:  # the interpreter's answer to an uncaught exception: a traceback, 1
        traceback.print_exc(file=sys.stderr)
        return 1
    return 0


@contextlib.contextmanager
def _argv(args: tuple[str, ...]) -> Iterator[None]:
    """The command line, working directory and program name of ``python -m jobwarden.cli.main``."""
    main_module = sys.modules["__main__"]
    saved_argv, saved_hook, saved_cwd = sys.argv, sys.excepthook, os.getcwd()
    saved_package = getattr(main_module, "__package__", None)
    sys.argv = [str(REPO / "jobwarden" / "cli" / "main.py"), *args]
    # click names the program (usage lines, help) from __main__'s package and argv[0]:
    # "python -m jobwarden.cli.main", as in the real process, not pytest's own name.
    main_module.__package__ = "jobwarden.cli"
    os.chdir(REPO)
    try:
        yield
    finally:
        # typer installs its own excepthook on every call; the test process keeps its own.
        sys.argv, sys.excepthook = saved_argv, saved_hook
        main_module.__package__ = saved_package
        os.chdir(saved_cwd)


@contextlib.contextmanager
def _last_resort_logging() -> Iterator[None]:
    """A warning the command logs reaches its stderr, as in a process with no handler.

    A `jobwarden` process configures no logging handler, so logging's last resort writes
    warnings to stderr (with the formatter observability/logs.py gives it). Here pytest's
    capture handlers sit on the root logger, so one like the last resort stands in for it.
    """
    last_resort = logging.lastResort
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(logging.WARNING)
    if last_resort is not None and last_resort.formatter is not None:
        handler.setFormatter(last_resort.formatter)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield
    finally:
        root.removeHandler(handler)


@contextlib.contextmanager
def _fresh_process_state() -> Iterator[None]:
    """Settings, runtime and engines as a new process has them; the test's own kept."""
    from jobwarden.config.settings import get_settings
    from jobwarden.models.persistence import db
    from jobwarden.tasks import runtime

    caches: tuple[dict[Any, Any], ...] = (
        db._engines,
        db._step_engines,
        db._claim_engines,
        db._readers,
        db._makers,
    )
    before = [set(cache) for cache in caches]
    own_runtime = runtime._runtime
    runtime._runtime = None
    get_settings.cache_clear()
    try:
        yield
    finally:
        get_settings.cache_clear()
        made = runtime._runtime
        runtime._runtime = own_runtime
        if made is not None and made is not own_runtime:
            runtime.close(made)
        # What the command opened closes with it, as at a process exit; a test's own stay.
        for cache, known in zip(caches, before, strict=True):
            for key in set(cache) - known:
                engine = cache.pop(key)
                dispose = getattr(engine, "dispose", None)
                if callable(dispose):
                    dispose()
