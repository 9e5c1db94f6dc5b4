"""The provider edge: the one place a request leaves for a provider (httpx) and an answer is read.

``edge`` bounds and records every exchange, ``transport`` holds the pooled clients,
``rate_limits`` the shared token bucket in Redis, ``webhooks`` the inbound deliveries.
"""
