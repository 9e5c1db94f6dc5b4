"""Per-process runtime: settings, contracts, Redis and HTTP clients.

Built lazily on first use in each process, so a forked Celery child never
shares its parent's sockets; nothing is parsed or constructed per poll.
"""

from __future__ import annotations

import os
import random
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from redis import Redis

from jobwarden.config.settings import Settings, get_settings
from jobwarden.models.contract import ProviderContract
from jobwarden.models.contract_loader import effective_base_url, load_contracts
from jobwarden.models.plugins import ProviderPlugin, load_plugin
from jobwarden.models.requests import StepContext
from jobwarden.tasks.provider_edge import ProviderClient, check_request_bounds
from jobwarden.tasks.result_store import ResultStore


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(slots=True)
class Runtime:
    settings: Settings
    contracts: dict[str, ProviderContract]
    redis: Redis
    http: ProviderClient
    pid: int
    contexts: dict[str, StepContext]
    # Where collected results stream (JOBWARDEN_RESULT_STORE); opened once per process.
    result_store: ResultStore

    def contract(self, provider: str) -> ProviderContract:
        return self.contracts[provider]

    def context(self, provider: str) -> StepContext:
        return self.contexts[provider]

    @property
    def actor(self) -> str:
        return f"worker:{self.settings.worker_name}"

    @staticmethod
    def jitter() -> float:
        return random.random()


_runtime: Runtime | None = None
# The API answers in a thread pool: twenty first requests at once must build one runtime,
# not twenty whose losers' Redis and HTTP clients nobody closes (a leaked socket later).
_building = threading.Lock()


def build_runtime(settings: Settings) -> Runtime:
    contracts = load_contracts(settings.providers_dir)
    # A request must never outlive the lease, or a second owner starts beside it.
    check_request_bounds(contracts, settings)
    plugins = {
        name: load_plugin(c.plugin, file=c.source_file)
        for name, c in contracts.items()
        if c.plugin is not None
    }
    contexts = step_contexts(contracts, plugins, os.environ)
    return Runtime(
        settings=settings,
        contracts=contracts,
        redis=Redis.from_url(settings.redis_url, socket_timeout=10, health_check_interval=30),
        http=ProviderClient(plugins),
        pid=os.getpid(),
        contexts=contexts,
        result_store=ResultStore.from_url(settings.result_store),
    )


def step_contexts(
    contracts: Mapping[str, ProviderContract],
    plugins: Mapping[str, ProviderPlugin],
    environ: Mapping[str, str],
) -> dict[str, StepContext]:
    """The one base-URL resolution, once per process; plugins reshape status bodies only.

    An override named by a contract (``base_url_env``) is validated here, so a bad
    one stops start-up with the variable's name rather than failing a step.
    """
    return {
        name: StepContext(
            contract=c,
            base_url=effective_base_url(c, environ),
            status_body=plugins[name].extract_status if name in plugins else _as_is,
        )
        for name, c in contracts.items()
    }


def _as_is(body: object) -> object:
    return body


def current() -> Runtime:
    global _runtime  # noqa: PLW0603 - one runtime per process, rebuilt after fork
    found = _runtime
    if found is not None and found.pid == os.getpid():
        return found
    with _building:
        if _runtime is None or _runtime.pid != os.getpid():
            _runtime = build_runtime(get_settings())
        return _runtime


def close(rt: Runtime) -> None:
    """Close what ``rt`` holds open: its provider HTTP pools and its Redis connections."""
    rt.http.close()
    rt.redis.close()


def reset() -> None:
    global _runtime  # noqa: PLW0603
    with _building:
        if _runtime is not None and _runtime.pid == os.getpid():
            close(_runtime)
        _runtime = None


# One registered script per (client, script): registering hashes the script text each time.
_scripts: dict[tuple[int, str], Any] = {}


def script(redis: Redis, text: str) -> Any:
    """``text`` registered on ``redis`` once (EVALSHA, falling back to EVAL on a miss)."""
    registered = _scripts.get((id(redis), text))
    if registered is None or registered.registered_client is not redis:
        registered = _scripts[(id(redis), text)] = redis.register_script(text)
    return registered
