"""Per-process runtime: settings, contracts, Redis and HTTP clients.

Built lazily on first use in each process, so a forked Celery child never
shares its parent's sockets; nothing is parsed or constructed per poll.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from datetime import UTC, datetime

from redis import Redis

from jobwarden.config.settings import Settings, get_settings
from jobwarden.models.contract import ProviderContract
from jobwarden.models.contract_loader import load_contracts
from jobwarden.models.plugins import load_plugin
from jobwarden.tasks.provider_edge import ProviderClient


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(slots=True)
class Runtime:
    settings: Settings
    contracts: dict[str, ProviderContract]
    redis: Redis
    http: ProviderClient
    pid: int

    def contract(self, provider: str) -> ProviderContract:
        return self.contracts[provider]

    @staticmethod
    def jitter() -> float:
        return random.random()


_runtime: Runtime | None = None


def build_runtime(settings: Settings) -> Runtime:
    contracts = load_contracts(settings.providers_dir)
    plugins = {
        name: load_plugin(c.plugin, file=c.source_file)
        for name, c in contracts.items()
        if c.plugin is not None
    }
    return Runtime(
        settings=settings,
        contracts=contracts,
        redis=Redis.from_url(settings.redis_url, socket_timeout=10, health_check_interval=30),
        http=ProviderClient(plugins),
        pid=os.getpid(),
    )


def current() -> Runtime:
    global _runtime  # noqa: PLW0603 - one runtime per process, rebuilt after fork
    if _runtime is None or _runtime.pid != os.getpid():
        _runtime = build_runtime(get_settings())
    return _runtime


def reset() -> None:
    global _runtime  # noqa: PLW0603
    if _runtime is not None:
        _runtime.http.close()
    _runtime = None
