"""One typed settings object, read once per process from JOBWARDEN_* variables."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from jobwarden.models.errors import SettingsError
from jobwarden.models.results.objects import STORE_VARIABLE, parse_store_url

DEFAULT_PROVIDERS_DIR = Path(__file__).resolve().parent / "providers"
DEFAULT_SCHEDULES_DIR = Path(__file__).resolve().parent / "schedules"


def default_result_store() -> str:
    """``file://`` + $XDG_DATA_HOME (else ~/.local/share) + /jobwarden/results.

    Under the user's own data folder so `scripts/demo` and a developer's worker, run by a
    non-root user, can write it; a service sets JOBWARDEN_RESULT_STORE (a volume, S3).
    """
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return (Path(data).absolute() / "jobwarden" / "results").as_uri()


PREFIX = "JOBWARDEN_"
FILE_SUFFIX = "_FILE"


class FileVariables(PydanticBaseSettingsSource):
    """``JOBWARDEN_<NAME>_FILE=/run/secrets/x``: the setting is that file's content.

    Docker's convention for secrets (the postgres image's POSTGRES_PASSWORD_FILE), which
    compose's ``secrets:`` mount under /run/secrets: a database URL with its password, or
    the console's session key, never rests in the environment. The content is stripped
    of surrounding whitespace (``echo > file`` adds a newline). Setting both a variable
    and its _FILE twin, or naming a file that cannot be read, is a SettingsError naming
    the variable.
    """

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # unused: __call__ reads every field at once

    def __call__(self) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for name in self.settings_cls.model_fields:
            variable = f"{PREFIX}{name.upper()}"
            path = os.environ.get(variable + FILE_SUFFIX)
            if not path:
                continue
            if os.environ.get(variable):
                raise SettingsError(
                    f"{variable} and {variable}{FILE_SUFFIX} are both set: set one, not both"
                )
            try:
                values[name] = Path(path).read_text(encoding="utf-8").strip()
            except (OSError, UnicodeDecodeError) as exc:
                reason = getattr(exc, "strerror", None) or type(exc).__name__
                raise SettingsError(
                    f"{variable}{FILE_SUFFIX}: cannot read {path} ({reason})"
                ) from None
        return values


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=PREFIX, extra="ignore", frozen=True)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The environment first, then JOBWARDEN_*_FILE (never both for one setting).
        return (
            init_settings,
            env_settings,
            FileVariables(settings_cls),
            dotenv_settings,
            file_secret_settings,
        )

    database_url: str = "postgresql+psycopg://postgres@127.0.0.1:5432/jobwarden"
    redis_url: str = "redis://127.0.0.1:6379/0"
    broker_url: str = "redis://127.0.0.1:6379/0"
    # Prefix for every Redis key jobwarden owns (leases, webhook dedup); tests isolate by it.
    key_prefix: str = "jobwarden"
    queue: str = "jobwarden"
    # A step holds the lease across up to two requests, each bounded by its contract's
    # request_timeout_seconds (tasks.provider.edge.check_request_bounds): 150 s covers the
    # longest shipped timeout (60 s) twice with room to spare.
    lease_ttl_seconds: float = Field(default=150.0, gt=0)
    # How long a person's intervention (cancel, approval, decision) waits for a step in
    # flight to let go of the lease, so its observation is not lost, before it writes
    # fenced without the lease; unset: the lease TTL (a step cannot hold it longer).
    intervention_wait_seconds: float | None = Field(default=None, gt=0)
    # Waits longer than this are parked in Postgres (next_poll_at) instead of a countdown.
    max_countdown_seconds: float = Field(default=120.0, gt=0)
    sweep_interval_seconds: float = Field(default=5.0, gt=0)
    sweep_batch_size: int = Field(default=500, gt=0)
    # Must exceed max_countdown_seconds, or Redis redelivers countdown tasks still held by a worker.
    visibility_timeout_seconds: int = Field(default=3600, gt=0)
    providers_dir: Path = DEFAULT_PROVIDERS_DIR
    # A wake-up message this overdue is presumed lost and re-sent by the sweeper.
    redispatch_after_seconds: float = Field(default=60.0, gt=0)
    # The name histories give this worker (``worker:<name>``); unset: its Celery node name
    # (celery@host, or what -n says), as Flower shows it (jobwarden.tasks.runtime).
    worker_name: str | None = None
    # How often every worker stamps each queue it consumes, in Redis (tasks/heartbeat.py).
    worker_heartbeat_seconds: float = Field(default=5.0, gt=0, le=3600)
    # No stamp on the operations' queue for this long (longer than the heartbeat, checked):
    # submission answers, /readyz and the console say no worker consumes it (issue 36).
    worker_silence_seconds: float = Field(default=30.0, gt=0)
    # Log lines: JSON objects, or readable text for a terminal; unset: JSON unless stderr
    # is a TTY (jobwarden.observability.logs).
    log_format: Literal["json", "console"] | None = None
    # The HTTP API (jobwarden api): where uvicorn listens and with how many processes.
    api_host: str = "127.0.0.1"
    api_port: int = Field(default=8080, ge=0, le=65535)
    api_workers: int = Field(default=1, ge=1)
    # Request bodies are bounded before they are parsed: size while reading, depth by a scan.
    api_max_body_bytes: int = Field(default=1024 * 1024, gt=0)
    api_max_json_depth: int = Field(default=64, gt=0)
    # A request (headers and body) must arrive whole within this many seconds of its
    # connection opening or the previous answer; a slower client is dropped (jobwarden/api/
    # server.py). uvicorn bounds only the idle time between requests.
    api_read_timeout_seconds: float = Field(default=30.0, gt=0, le=3600)
    # Seconds an API process answers a live token from memory (jobwarden/api/token_cache.py).
    # `jobwarden tokens revoke` empties every process's cache at once (a Redis epoch); this
    # bounds a revocation Redis did not hear of. 0: every request looks its token up.
    api_token_cache_seconds: float = Field(default=10.0, ge=0, le=10)
    # The MCP server for agents (jobwarden mcp): its transport, where its HTTP listens, and
    # the variable a stdio server reads its API token from (the token never rests here).
    mcp_transport: Literal["stdio", "http"] = "stdio"
    mcp_host: str = "127.0.0.1"
    mcp_port: int = Field(default=8090, ge=0, le=65535)
    mcp_token_env: str = Field(default="JOBWARDEN_MCP_TOKEN", min_length=1)
    # The operators' console (jobwarden/console): its session cookie is signed with this key;
    # unset, each process draws a random one (sessions end at a restart, and several API
    # workers must share a key). Secure cookies are off only for a loopback host.
    console_session_secret: SecretStr | None = None
    console_secure_cookie: bool = True
    # Receipts (jobwarden receipt, models/history/receipts.py) are signed with this Ed25519
    # private key (PEM, PKCS#8): set JOBWARDEN_RECEIPT_SIGNING_KEY_FILE to its secret file,
    # so the key never rests in the environment. Unset: receipts cannot be issued.
    receipt_signing_key: SecretStr | None = None
    console_session_hours: float = Field(default=8.0, gt=0)
    # Notifications (jobwarden/tasks/humans/notifications.py): the per-tenant targets file (unset:
    # no targets, every outbox row ends no_target), the relay's beat period, batch and
    # whole-request timeout, and how long before an approval window ends its reminder goes.
    notifications_file: Path | None = None
    notify_interval_seconds: float = Field(default=5.0, gt=0)
    notify_batch_size: int = Field(default=50, gt=0)
    notify_timeout_seconds: float = Field(default=10.0, gt=0)
    approval_reminder_seconds: float = Field(default=3600.0, ge=0)
    # Schedules (tasks/schedules.py): beat's tick period, how many due schedules one tick
    # claims, how old an unrecorded slot claim must be before a tick submits it again
    # (its claimer died), how many slots one process submits, and the folder
    # `jobwarden schedules check|sync` reads.
    schedule_interval_seconds: float = Field(default=5.0, gt=0)
    # /metrics (tasks/metrics_tallies.py): how often beat folds the counters' delta rows
    # into their totals; a scrape adds up what was written since.
    tally_fold_interval_seconds: float = Field(default=15.0, gt=0)
    schedule_batch_size: int = Field(default=500, gt=0)
    schedule_resubmit_after_seconds: float = Field(default=30.0, gt=0)
    # A tick submits up to this many claimed slots itself; more are spread over the
    # workers in jobwarden.schedule_submit messages of this many slots each.
    schedule_submit_chunk: int = Field(default=100, gt=0)
    schedules_dir: Path = DEFAULT_SCHEDULES_DIR
    # Where collected results are streamed (tasks/results/store.py): file:///dir or
    # s3://bucket[/prefix]; S3 credentials come from the AWS_* variables, never from here.
    result_store: str = Field(default_factory=default_result_store)
    # History (tasks/history_archive.py). Every history_interval_seconds beat creates the
    # coming months' partitions of operation_events and, only when
    # history_retention_days is set, archives each month whose operations all ended that
    # many days ago to the result store and drops its partition (unset: never archived
    # but by `jobwarden archive --retention-days N`, whose default it also is).
    history_retention_days: float | None = Field(default=None, gt=0)
    history_interval_seconds: float = Field(default=86400.0, gt=0)

    @property
    def notifications_queue(self) -> str:
        """The queue notification deliveries go to (config/celery_app.py routes them): the
        workers that poll (``-Q`` JOBWARDEN_QUEUE) never take one, so a receiver that
        answers slowly never holds a poller's seat (issue 33, finding 8)."""
        return f"{self.queue}.notifications"

    @field_validator("result_store")
    @classmethod
    def _store_url(cls, value: str) -> str:
        try:
            return parse_store_url(value).url
        except SettingsError as exc:
            raise ValueError(str(exc).removeprefix(f"{STORE_VARIABLE}: ")) from None

    @model_validator(mode="after")
    def _silence_longer_than_heartbeat(self) -> Settings:
        # Shorter, a live worker would be reported missing between two of its beats.
        if self.worker_silence_seconds <= self.worker_heartbeat_seconds:
            raise ValueError(
                "JOBWARDEN_WORKER_SILENCE_SECONDS must be longer than "
                "JOBWARDEN_WORKER_HEARTBEAT_SECONDS (a live worker would look gone between beats)"
            )
        return self

    @model_validator(mode="after")
    def _countdown_below_visibility(self) -> Settings:
        if self.max_countdown_seconds * 2 > self.visibility_timeout_seconds:
            raise ValueError(
                "JOBWARDEN_MAX_COUNTDOWN_SECONDS must be at most half of "
                "JOBWARDEN_VISIBILITY_TIMEOUT_SECONDS (Redis redelivers longer countdowns)"
            )
        return self


def load_settings() -> Settings:
    """Read the environment; raise SettingsError naming the variable on a bad value."""
    try:
        return Settings()
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = "_".join(str(p) for p in err["loc"]).upper()
            name = f"JOBWARDEN_{loc}" if loc else "JOBWARDEN_* settings"
            problems.append(f"{name}: {err['msg']}")
        raise SettingsError("invalid settings: " + "; ".join(problems)) from None


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return load_settings()
