"""kombu's Redis transport, with one Redis client object per channel instead of one per call.

kombu's channel builds a fresh ``redis.Redis`` around its connection pool for every
publish, ack and queue lookup (``Channel._create_client``). The connections are pooled
either way; the object is not, and building one copies redis-py's table of 170 response
callbacks: about a quarter of a publish's CPU, paid on every wake-up (issue 12). A client
object holds no socket of its own, so one per channel and pool is safe to share; when
kombu replaces the pool (a reconnect), a new client is built around the new one.

Used for ``redis://`` brokers only (``make_celery``); ``rediss://`` and sentinel URLs keep
kombu's own transport and its TLS and failover handling.
"""

from __future__ import annotations

from typing import Any

from kombu.transport import redis as kombu_redis


class Channel(kombu_redis.Channel):
    _jobwarden_client: tuple[Any, Any] | None = None

    def _create_client(self, asynchronous: bool = False) -> Any:
        if asynchronous:  # the consumer's own client: built once by kombu already
            return super()._create_client(asynchronous=True)  # type: ignore[no-untyped-call]
        pool = self.pool
        cached = self._jobwarden_client
        if cached is None or cached[0] is not pool:
            cached = (pool, super()._create_client())  # type: ignore[no-untyped-call]
            self._jobwarden_client = cached
        return cached[1]


class Transport(kombu_redis.Transport):
    Channel = Channel


def transport_for(broker_url: str) -> str | None:
    """The transport class for ``broker_url``, or None for kombu's choice by scheme."""
    return f"{__name__}:Transport" if broker_url.startswith("redis://") else None
