"""Structured logs: one event name per line, operation id and trace id bound.

JSON lines in production (a log shipper parses them), a readable line in a terminal;
``JOBWARDEN_LOG_FORMAT=json|console`` chooses, and without it a process whose stderr is
not a TTY writes JSON. jobwarden's own code logs through structlog
(``log.info("step_done", operation_id=..., to=...)``); everything else that logs
through the standard library (Celery, uvicorn, httpx) goes through the same formatter,
so every line of a worker's or the API's log is one JSON object.

Celery installs its handlers itself; ``install_formatter`` then gives them this
formatter (config/celery_app.py connects it to Celery's after_setup_logger signals).
The API's uvicorn takes ``uvicorn_log_config()``, which builds the same formatter in
each of its worker processes.

The format is the caller's (each process passes its settings' ``log_format``); where none
is passed (a script that never set up logging) this module reads the one variable itself,
as telemetry reads OTEL_*: observability sits below ``jobwarden.config`` and never imports it.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from typing import Any, Literal

import structlog
from structlog.typing import Processor

LogFormat = Literal["json", "console"]
# The setting jobwarden.config validates as Settings.log_format (a bad value is one line
# from the CLI); read here only when no caller passed a format.
FORMAT_VARIABLE = "JOBWARDEN_LOG_FORMAT"
_FORMATS: dict[str, LogFormat] = {"json": "json", "console": "console"}

# Added to every line, structlog's and the standard library's alike.
_SHARED: list[Processor] = [
    structlog.contextvars.merge_contextvars,
    structlog.stdlib.add_log_level,
    structlog.stdlib.add_logger_name,
    structlog.processors.TimeStamper(fmt="iso", utc=True),
]


def chosen_format(
    value: LogFormat | None = None, environ: Mapping[str, str] = os.environ
) -> LogFormat:
    """``value``, else JOBWARDEN_LOG_FORMAT; unset (or not a format): console on a TTY,
    else JSON."""
    if value is not None:
        return value
    named = _FORMATS.get(environ.get(FORMAT_VARIABLE, ""))
    if named is not None:
        return named
    return "console" if sys.stderr.isatty() else "json"


_FIRST = ("timestamp", "level", "event", "logger")


def _ordered(_: Any, __: str, event_dict: MutableMapping[str, Any]) -> Mapping[str, Any]:
    # The event name near the start of every line, where a reader's eye (and grep) looks.
    first = {k: event_dict.pop(k) for k in _FIRST if k in event_dict}
    return {**first, **event_dict}


def formatter(fmt: LogFormat | None = None) -> structlog.stdlib.ProcessorFormatter:
    """The logging.Formatter of every jobwarden process; configures structlog once too."""
    resolved = fmt or chosen_format()
    configure_structlog()
    renderer: Processor = (
        structlog.processors.JSONRenderer(sort_keys=False)
        if resolved == "json"
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    tail: list[Processor] = [structlog.stdlib.ProcessorFormatter.remove_processors_meta]
    if resolved == "json":
        # A traceback becomes one string field: the line stays one JSON object.
        tail += [structlog.processors.format_exc_info, _ordered]
    return structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=_SHARED, processors=[*tail, renderer]
    )


_configured: list[bool] = []


def configure_structlog() -> None:
    """Route structlog through the standard library, so one handler writes every line."""
    if _configured:
        return
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *_SHARED,
            structlog.stdlib.PositionalArgumentsFormatter(),
            structlog.processors.StackInfoRenderer(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    _configured.append(True)
    # A process that never set up logging (a script calling submit_operation) still gets
    # one readable line per warning, not the repr of an event dict: logging's last-resort
    # handler, used only when no handler is configured anywhere, takes the formatter too.
    if logging.lastResort is not None:
        logging.lastResort.setFormatter(formatter())


def install_formatter(logger: logging.Logger | None = None, fmt: LogFormat | None = None) -> None:
    """Give every handler of ``logger`` (default: the root logger) the structured formatter."""
    target = logger or logging.getLogger()
    chosen = formatter(fmt)
    # Python's warnings go to stderr as bare text otherwise: as records, they are JSON too.
    logging.captureWarnings(True)
    for handler in target.handlers:
        handler.setFormatter(chosen)


def uvicorn_log_config(level: str = "INFO", fmt: LogFormat | None = None) -> dict[str, Any]:
    """A logging dictConfig for uvicorn: its loggers and the root through one formatter
    (``fmt``: the process's log_format setting; None: ``chosen_format``)."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"structured": {"()": "jobwarden.observability.logs.formatter", "fmt": fmt}},
        "handlers": {
            "default": {
                "class": "logging.StreamHandler",
                "formatter": "structured",
                "stream": "ext://sys.stderr",
            }
        },
        "root": {"handlers": ["default"], "level": level},
        "loggers": {
            "uvicorn": {"level": level, "handlers": [], "propagate": True},
            "uvicorn.error": {"level": level, "handlers": [], "propagate": True},
            "uvicorn.access": {"level": level, "handlers": [], "propagate": True},
        },
    }


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    configure_structlog()
    logger: structlog.stdlib.BoundLogger = structlog.stdlib.get_logger(name)
    return logger


@contextmanager
def bound(**values: Any) -> Iterator[None]:
    """Bind ``values`` to every line logged inside the block (contextvars: per task)."""
    tokens = structlog.contextvars.bind_contextvars(**values)
    try:
        yield
    finally:
        structlog.contextvars.reset_contextvars(**tokens)


def bind(**values: Any) -> Mapping[str, Any]:
    """Bind more inside a ``bound`` block (the trace id, once the row is loaded)."""
    return structlog.contextvars.bind_contextvars(**values)
