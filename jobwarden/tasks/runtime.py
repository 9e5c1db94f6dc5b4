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
from pathlib import Path
from typing import Any, Protocol

from celery.signals import celeryd_init
from redis import Redis

from jobwarden.config.settings import Settings, get_settings
from jobwarden.models.contracts.contract import ProviderContract
from jobwarden.models.contracts.loader import effective_base_url, load_contracts
from jobwarden.models.contracts.pins import ContractVersion, current_versions, pinned_contract
from jobwarden.models.contracts.plugins import ProviderPlugin, load_plugin
from jobwarden.models.errors import ContractError
from jobwarden.models.persistence import contract_store
from jobwarden.models.persistence.db import snapshot
from jobwarden.models.provider.requests import StepContext
from jobwarden.tasks.provider.edge import ProviderClient, check_request_bounds
from jobwarden.tasks.results.store import ResultStore


def utcnow() -> datetime:
    return datetime.now(UTC)


class Pinned(Protocol):
    """An operation as far as its contract goes: the provider and the pinned digest."""

    @property
    def provider(self) -> str: ...

    @property
    def contract_digest(self) -> str | None: ...


@dataclass(slots=True)
class Runtime:
    settings: Settings
    # The current contracts: what new operations are created under (and pin).
    contracts: dict[str, ProviderContract]
    redis: Redis
    http: ProviderClient
    pid: int
    contexts: dict[str, StepContext]
    # Where collected results stream (JOBWARDEN_RESULT_STORE); opened once per process.
    result_store: ResultStore
    # The current contracts' texts and digests, per provider (invariant 16).
    versions: dict[str, ContractVersion]
    # Every contract this process has parsed, by provider and digest (a file whose name
    # defaults to its stem may be the same text as another's): the current ones, and the
    # kept texts running operations pinned, each read from Postgres and parsed once. A
    # step under its operation's contract costs a dict lookup, never a query.
    pinned: dict[tuple[str, str], StepContext]

    def contract(self, provider: str) -> ProviderContract:
        """The provider's current contract: for new operations, never for a running one."""
        return self.contracts[provider]

    def context(self, provider: str) -> StepContext:
        """The provider's current step context: for new operations, never a running one."""
        return self.contexts[provider]

    def version(self, provider: str) -> ContractVersion:
        """The current contract's text and digest: what a new operation pins."""
        return self.versions[provider]

    def contract_for(self, op: Pinned) -> ProviderContract:
        """The contract ``op`` was created under (or moved to); see ``context_for``."""
        return self.context_for(op).contract

    def context_for(self, op: Pinned) -> StepContext:
        """The step context of the contract ``op`` pinned (invariant 16).

        An operation created before contracts were pinned (no digest) runs under the
        current contract. A digest this process has not parsed is read from
        ``provider_contracts`` and parsed once; KeyError when the provider is neither
        configured nor pinned, ContractError when its kept text is missing or no longer
        parses (the step fails and is counted: a person must look).
        """
        digest = op.contract_digest
        if digest is None:
            return self.contexts[op.provider]
        found = self.pinned.get((op.provider, digest))
        if found is None:
            # Two threads may both parse it; either result is the same contract.
            found = self._parse_pinned(op.provider, digest)
            self.pinned[op.provider, digest] = found
        return found

    def found_context(self, op: Pinned) -> StepContext | None:
        """``context_for``, or None where ``op``'s contract cannot be had here (its provider
        neither configured nor pinned, a kept text that no longer parses): for views."""
        try:
            return self.context_for(op)
        except (KeyError, ContractError):
            return None

    def _parse_pinned(self, provider: str, digest: str) -> StepContext:
        with snapshot(self.settings.database_url) as session:
            text = contract_store.text_of(session, digest)
        current = self.contracts.get(provider)
        file = (
            Path(current.source_file)
            if current is not None
            else self.settings.providers_dir / f"{provider}.toml"
        )
        if text is None:
            raise ContractError(str(file), "(digest)", f"no contract text kept as {digest}")
        contract = pinned_contract(provider, text, file)
        # A pinned contract must not outlive the lease either (checked at start-up for
        # the current ones).
        check_request_bounds({provider: contract}, self.settings)
        plugin = self.http.plugins.get(provider)
        return StepContext(
            contract=contract,
            base_url=effective_base_url(contract, os.environ),
            status_body=plugin.extract_status if plugin is not None else _as_is,
        )

    @property
    def actor(self) -> str:
        return worker_actor(self.settings.worker_name, _worker_node)

    @staticmethod
    def jitter() -> float:
        return random.random()


# This process's Celery node name once it became a worker (celeryd_init fires in the main
# process before the pool forks, so prefork children inherit it); None outside a worker.
_worker_node: str | None = None


def worker_actor(configured: str | None, node: str | None) -> str:
    """The actor of what a worker records: JOBWARDEN_WORKER_NAME if set, else its Celery
    node name, else plain ``worker`` (a process that is no Celery worker: a test, a tool)."""
    return f"worker:{configured or node or 'worker'}"


def _remember_worker_node(sender: object = None, **_: object) -> None:
    global _worker_node  # noqa: PLW0603 - one value per process, set once at worker start
    _worker_node = str(sender) if sender else None


celeryd_init.connect(_remember_worker_node, weak=False)

_runtime: Runtime | None = None
# The API answers in a thread pool: twenty first requests at once must build one runtime,
# not twenty whose losers' Redis and HTTP clients nobody closes (a leaked socket later).
_building = threading.Lock()


def build_runtime(settings: Settings) -> Runtime:
    # Parsed from the very texts digested: what a new operation pins is what ran.
    versions = current_versions(load_contracts(settings.providers_dir))
    contracts = {name: version.contract for name, version in versions.items()}
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
        versions=versions,
        pinned={(name, version.digest): contexts[name] for name, version in versions.items()},
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
