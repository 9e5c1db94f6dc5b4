"""The provider HTTP edge: every request to a provider leaves here and its answer is read.

It turns a request into a RawResponse (status, lower-cased headers, parsed JSON
body or a body problem, or a transport failure) and never raises for anything
the network or the provider does: a failed status read is an observation, not a
crash. What it does raise is GiveUpError for an unusable credential (missing,
or not a possible header value), naming the variable or file, never the value.

Every request is bounded as a whole (invariant 11): connect, headers and body
share one wall-clock deadline of the contract's ``request_timeout_seconds``, and
bodies are read in chunks and cut at a limit while reading, so neither a slow
drip nor a huge answer can hold a worker past its lease or grow its memory
(the transport that does so is tasks.provider.transport).
"""

from __future__ import annotations

import base64
import functools
import itertools
import json
import math
import os
import re
import secrets
import socket
import ssl
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Final

import httpx

from jobwarden.config.settings import Settings
from jobwarden.models.actions import ProviderRequest, RequestPurpose
from jobwarden.models.contracts.contract import ProviderContract
from jobwarden.models.contracts.plugins import OutboundRequest, ProviderPlugin
from jobwarden.models.errors import GiveUpError, ResultStoreUnavailableError, SettingsError
from jobwarden.models.operation import Operation
from jobwarden.models.provider.outgoing import (
    ShownRequest,
    credential_header,
    outgoing_body,
    outgoing_headers,
    shown_create,
)
from jobwarden.models.provider.requests import StepContext
from jobwarden.models.provider.signals import HttpObservation, RawResponse, TransportFailure
from jobwarden.models.results.validation import Collected
from jobwarden.observability import telemetry
from jobwarden.tasks.provider.transport import (
    BodyState,
    DeadlinePassedError,
    DirectSender,
    decoded_chunks,
    read_body,
    request_deadline,
)

# Result files (the result, its failed-items file): bytes of the contract's type, bounded
# by result.max_bytes and judged by the core, never parsed here as an answer document.
DOWNLOADS = frozenset({RequestPurpose.result, RequestPurpose.failed_items})

# Takes a result download's 2xx body as it streams (headers lower-cased, the decoded
# chunks, and the state that says why they stopped early) and returns what it kept.
ResultCollector = Callable[[Mapping[str, str], Iterator[bytes], BodyState], Collected]

# Status, create, cancel and lookup answers are small JSON documents; 1 MiB is
# generous for any real provider and small enough to hold per worker.
MAX_ANSWER_BYTES = 1024 * 1024
# Deeper than any real status document, far below the interpreter's recursion limit.
MAX_JSON_DEPTH = 64
# A step may send two requests under one lease (a lookup, then the same-token create);
# tasks.steps.MAX_SENDS_PER_STEP must not exceed this.
MAX_REQUESTS_PER_LEASE = 2
# Besides its requests a step makes a few Postgres commits and Redis calls under the
# lease: milliseconds each on a healthy pair, so one second covers a slow one.
LEASE_MARGIN_SECONDS = 1.0


def traceparent(trace_id: str) -> str:
    return f"00-{trace_id}-{secrets.token_hex(8)}-01"


# -- credentials -----------------------------------------------------------------------


def _read_secret(contract: ProviderContract) -> tuple[str, str] | None:
    """(value, where it came from) or None; reads the environment or file each call."""
    auth = contract.auth
    if auth is None:
        return None
    if auth.secret_env:
        value = os.environ.get(auth.secret_env, "").strip()
        if value:
            return value, auth.secret_env
    if auth.secret_file:
        where = f"secret file {auth.secret_file}"
        try:
            data = Path(auth.secret_file).read_bytes()
        except OSError:
            return None
        try:
            value = data.decode("utf-8").strip()
        except UnicodeDecodeError:
            raise GiveUpError(
                f"provider {contract.name}: the credential in {where} is not UTF-8 text"
            ) from None
        if value:
            return value, where
    return None


# C0 controls (CR, LF, NUL ...) and DEL: either would split or break a header line.
_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f]")


def _unusable(value: str) -> str | None:
    """Why ``value`` cannot travel in a header, or None. Never quotes the value."""
    if _CONTROL.search(value):
        return "it contains a control character (CR, LF, NUL or similar)"
    if not value.isascii():
        return "it contains a non-ASCII character"
    return None


def _secret(contract: ProviderContract) -> str | None:
    """The usable credential, None without auth; GiveUpError naming the source otherwise."""
    auth = contract.auth
    if auth is None:
        return None
    found = _read_secret(contract)
    if found is None:
        source = auth.secret_env or auth.secret_file or "the configured source"
        raise GiveUpError(f"provider {contract.name}: no credential in {source}")
    value, where = found
    problem = _unusable(value)
    if problem is not None:
        # Sent as is it would split the header (CR/LF) or crash the encoder; named, not shown.
        raise GiveUpError(
            f"provider {contract.name}: the credential in {where} is unusable: {problem}"
        )
    return value


def secret_forms(contract: ProviderContract) -> tuple[str, ...]:
    """The credential as a provider might echo it back: plain, base64, URL-encoded.

    Excerpts are scrubbed by these values (invariant 9: by value, not only by key
    name). Empty when the contract has no credential or it cannot be read. An
    unusable credential is never sent, but its forms are still returned: scrubbing
    by value costs nothing and does not depend on the edge refusing it.
    """
    try:
        found = _read_secret(contract)
    except GiveUpError:
        return ()
    if found is None:
        return ()
    # Read on every call (a rotated credential is scrubbed from the next plan on); what is
    # derived from it is kept for the value last read, one per provider, and derived again
    # when the value read differs: every poll's plan asks, and the credential rarely moves.
    secret = found[0]
    kept = _FORMS.get(contract.name)
    if kept is None or kept[0] != secret:
        kept = _FORMS[contract.name] = (secret, _forms_of(secret))
    return kept[1]


# The credential each provider's forms were last derived from, and those forms.
_FORMS: dict[str, tuple[str, tuple[str, ...]]] = {}


def _forms_of(secret: str) -> tuple[str, ...]:
    raw = secret.encode("utf-8", "surrogatepass")
    forms = {
        secret,
        base64.b64encode(raw).decode(),
        base64.urlsafe_b64encode(raw).decode(),
        base64.b64encode(raw).decode().rstrip("="),
        urllib.parse.quote(secret, safe=""),
        urllib.parse.quote_plus(secret),
    }
    # Very short values would redact ordinary words; a credential is never that short.
    return tuple(sorted((f for f in forms if len(f) >= 8), key=len, reverse=True))


def auth_headers(contract: ProviderContract) -> dict[str, str]:
    secret = _secret(contract)
    return {} if secret is None else credential_header(contract.auth, secret)


def check_request_bounds(contracts: Mapping[str, ProviderContract], settings: Settings) -> None:
    """Refuse start-up when a step's requests could outlive the lease it holds.

    A step holds the lease across up to MAX_REQUESTS_PER_LEASE requests, each
    bounded by its contract's request_timeout_seconds, plus a margin for its
    commits; if the lease could expire first, a second owner would start the same
    step while the first is still waiting for its answer. Raises SettingsError
    naming JOBWARDEN_LEASE_TTL_SECONDS and the contract.
    """
    ttl = settings.lease_ttl_seconds
    for name, contract in sorted(contracts.items()):
        timeout = contract.limits.request_timeout_seconds
        needed = MAX_REQUESTS_PER_LEASE * timeout + LEASE_MARGIN_SECONDS
        if ttl < needed:
            raise SettingsError(
                f"JOBWARDEN_LEASE_TTL_SECONDS ({ttl:g}) must be at least {needed:g} for "
                f"provider {name}: {MAX_REQUESTS_PER_LEASE} requests of "
                f"limits.request_timeout_seconds ({timeout:g}) plus "
                f"{LEASE_MARGIN_SECONDS:g} s, or a request can outlive the lease"
            )


# -- reading JSON ---------------------------------------------------------------------


_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_BRACKET_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def json_depth(text: str) -> int:
    """The deepest bracket nesting of ``text``, brackets inside strings ignored.

    A linear scan without recursion (regular expressions and C-level iteration), so
    a 10,000-deep document costs no stack: run it before json.loads, which recurses.
    """
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))
    return max(itertools.accumulate(map(_BRACKET_STEP.__getitem__, brackets)), default=0)


class _OutOfRangeError(ValueError):
    pass


def _refuse_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")  # json.loads would accept NaN and Infinity


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _OutOfRangeError(text[:40])  # 1e400 parses to inf: no longer the provider's number
    return value


def _bounded_int(text: str) -> int:
    if len(text) > 4000:
        raise _OutOfRangeError(text[:40])  # Python refuses to parse ints past 4300 digits anyway
    return int(text)


def _storable(value: object) -> bool:
    """No NUL and no lone surrogate in any string: Postgres text and JSONB hold neither."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str):
            if "\x00" in item:
                return False
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return False
    return True


def parse_json(data: bytes) -> tuple[object | None, str | None]:
    """A provider's JSON answer as (body, problem); exactly one is set unless empty.

    Problems: ``undecodable`` (not UTF-8, or text Postgres cannot store),
    ``too_deep`` (nesting beyond MAX_JSON_DEPTH), ``number_out_of_range`` (a number
    Python cannot hold as the provider wrote it), ``malformed_json``. Never raises.
    """
    if not data:
        return None, None
    try:
        text = data.decode("utf-8")  # RFC 8259 section 8.1: JSON on the wire is UTF-8
    except UnicodeDecodeError:
        return None, "undecodable"
    text = text.removeprefix("\ufeff")  # the same section lets a parser ignore a BOM
    if json_depth(text) > MAX_JSON_DEPTH:
        return None, "too_deep"
    try:
        body = json.loads(
            text,
            parse_constant=_refuse_constant,
            parse_float=_finite_float,
            parse_int=_bounded_int,
        )
    except _OutOfRangeError:
        return None, "number_out_of_range"
    except (ValueError, RecursionError):
        # The depth scan misjudges only broken JSON (an unterminated string), which fails here.
        return None, "malformed_json"
    # Text decoded as strict UTF-8 holds no lone surrogate, and json.loads refuses a raw
    # control character in a string: only a \u escape can put a NUL or a lone surrogate
    # into the body, so without one the walk over every string has nothing to find.
    if "\\u" in text and not _storable(body):
        return None, "undecodable"
    return body, None


# -- the client ------------------------------------------------------------------------


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and what it was raised from, outermost first (a cycle ends the walk)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def transport_failure(exc: Exception) -> TransportFailure:
    """What a request's exception says about the exchange, judged by type, never by text.

    httpx raises ConnectError from httpcore's, raised from the socket's own error: the
    resolver's ``socket.gaierror`` (any code, "temporary failure" included) is ``dns``,
    an ``ssl.SSLError`` (certificate or handshake) is ``tls``, anything else refused.
    """
    if isinstance(exc, httpx.ConnectTimeout):
        return TransportFailure.connect_timeout
    if isinstance(exc, httpx.ReadTimeout | httpx.WriteTimeout | httpx.PoolTimeout):
        return TransportFailure.read_timeout
    if isinstance(exc, httpx.ConnectError):
        causes = list(_causes(exc))
        if any(isinstance(cause, ssl.SSLError) for cause in causes):
            return TransportFailure.tls
        if any(isinstance(cause, socket.gaierror) for cause in causes):
            return TransportFailure.dns
        return TransportFailure.connect_refused
    if isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError | httpx.WriteError):
        return TransportFailure.connection_reset
    if isinstance(exc, ssl.SSLError):
        return TransportFailure.tls
    if isinstance(exc, ConnectionError):
        return TransportFailure.connection_reset
    # InvalidURL (a tab or newline in a provider's reference), UnsupportedProtocol, a
    # header value httpx cannot encode, a local protocol error: nothing usable was sent.
    return TransportFailure.protocol


# What a request can raise besides httpx's tree: InvalidURL and StreamError are not
# HTTPErrors, header encoding raises UnicodeEncodeError (a ValueError) or TypeError.
_REQUEST_ERRORS = (
    httpx.HTTPError,
    httpx.InvalidURL,
    httpx.StreamError,
    OSError,
    ValueError,
    TypeError,
)


def _lost(failure: TransportFailure) -> RawResponse:
    return RawResponse(
        observation=HttpObservation(
            status_code=None,
            headers={},
            body=None,
            body_problem=None,
            transport_failure=failure,
        ),
        content=b"",
        content_type=None,
        provider_request_id=None,
    )


# httpx.Client adds Host, Content-Length (0 for a bodiless POST, PUT or PATCH) and
# keep-alive itself; the edge names itself and sets Accept and Accept-Encoding per request.
USER_AGENT: Final = f"jobwarden (httpx/{httpx.__version__})"


def shown_create_request(
    ctx: StepContext, op: Operation, request: ProviderRequest | None = None
) -> ShownRequest:
    """The create ``op`` will send (``request``, when the step has built it), as an
    approval shows it: this edge's user agent, and the credential redacted by every form
    it can be echoed in. Its ``digest`` is what an approval binds."""
    return shown_create(
        ctx, op, user_agent=USER_AGENT, secrets=secret_forms(ctx.contract), request=request
    )


@functools.lru_cache(maxsize=4096)
def _parsed(url: str) -> httpx.URL:
    # A job's status URL is the same on every poll; parsing it was a tenth of a send.
    # httpx.URL is immutable, and a URL it refuses raises (never cached) every time.
    return httpx.URL(url)


class ProviderClient:
    """One pooled transport per provider, created in the worker process.

    ``answer_limit`` bounds every answer except a result download, which is bounded
    by its contract's ``result.max_bytes``.
    """

    def __init__(
        self,
        plugins: dict[str, ProviderPlugin] | None = None,
        *,
        answer_limit: int = MAX_ANSWER_BYTES,
    ) -> None:
        self._clients: dict[str, DirectSender] = {}
        self.plugins = plugins or {}
        self.answer_limit = answer_limit

    def _client(self, contract: ProviderContract) -> DirectSender:
        client = self._clients.get(contract.name)
        if client is None:
            limits = httpx.Limits(max_connections=20, max_keepalive_connections=10)
            client = self._clients[contract.name] = DirectSender(limits, USER_AGENT)
            telemetry.instrument_client(client.client)
        return client

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()

    def _limit(self, contract: ProviderContract, request: ProviderRequest) -> int:
        if request.purpose in DOWNLOADS and contract.result is not None:
            return contract.result.max_bytes
        return self.answer_limit

    def send(
        self,
        contract: ProviderContract,
        request: ProviderRequest,
        *,
        trace_id: str,
        collect: ResultCollector | None = None,
    ) -> RawResponse:
        """Send one request; every outcome, including network failure, is returned.

        ``collect`` takes a result download's 2xx body as it streams in (the result
        store and the core's judgement, tasks/results/collection.py): it is never held
        here. Raises GiveUpError only for the credential (missing or unusable):
        retrying cannot help, and the runner escalates ``authorization_denied``.

        Tracing on (jobwarden.observability.telemetry), the request is a client span (the
        httpx instrumentation's, or ours for a plugin's request) and its ``traceparent`` is
        that span's: real ids, the operation's sampling. Off, the operation's trace id
        with a fresh span id, as before.
        """
        signed = contract.name in self.plugins
        with telemetry.request_span(
            request.method, request.url, request.purpose.value, signed=signed
        ) as span:
            # Tracing on and no plugin, the httpx instrumentation replaces this header
            # with its client span's in the transport.
            parent = telemetry.header_of(span) if span is not None else traceparent(trace_id)
            answer = self._send(contract, request, parent, trace_id, collect)
            telemetry.answered(span, answer.observation.status_code)
            return answer

    def _send(
        self,
        contract: ProviderContract,
        request: ProviderRequest,
        parent: str,
        trace_id: str,
        collect: ResultCollector | None,
    ) -> RawResponse:
        method, url = request.method, request.url
        # The same two functions build what an approval shows (models/provider/outgoing.py).
        all_headers = outgoing_headers(
            contract,
            request,
            traceparent=parent,
            trace_id=trace_id,
            # Invariant 10: the credential only where the core said it may go.
            credential=auth_headers(contract) if request.with_credential else {},
        )
        content = outgoing_body(request)
        plugin = self.plugins.get(contract.name)
        if plugin is not None:
            # Signing and similar provider code sees the final request, secrets included.
            prepared = plugin.prepare_request(
                OutboundRequest(method=method, url=url, headers=all_headers, body=content)
            )
            method, url, all_headers, content = (
                prepared.method,
                prepared.url,
                dict(prepared.headers),
                prepared.body,
            )
        timeout = contract.limits.request_timeout_seconds
        client = self._client(contract)
        try:
            # httpx.URL validates and normalises (a tab or a newline in a provider's
            # reference is InvalidURL); no redirect is ever followed.
            outgoing = client.build_request(
                method, _parsed(url), headers=all_headers, content=content, timeout=timeout
            )
            with request_deadline(timeout) as deadline:
                response = client.send(outgoing)
                try:
                    status_code = response.status_code
                    lowered = dict(response.headers.items())
                    coding = lowered.get("content-encoding", "")
                    limit = self._limit(contract, request)
                    collected = None
                    if collect is not None and 200 <= status_code < 300:
                        state = BodyState()
                        body_chunks = decoded_chunks(
                            coding, response.iter_raw(), limit, deadline, state
                        )
                        collected = collect(lowered, body_chunks, state)
                        raw, problem = collected.inline or b"", state.problem
                    else:
                        # A refused download's body is an error document, not the result.
                        limit = self.answer_limit if collect is not None else limit
                        raw, problem = read_body(coding, response.iter_raw(), limit, deadline)
                finally:
                    response.close()
        except DeadlinePassedError:
            return _lost(TransportFailure.read_timeout)
        except ResultStoreUnavailableError:
            # Nothing was stored (an unfinished upload never appears): tried again later.
            return _lost(TransportFailure.result_store)
        except _REQUEST_ERRORS as exc:
            return _lost(transport_failure(exc))
        body: object | None = None
        if request.purpose not in DOWNLOADS and problem is None:
            # A result is bytes of the contract's type, judged by the core's validation.
            body, problem = parse_json(raw)
        return RawResponse(
            observation=HttpObservation(
                status_code=status_code,
                headers=lowered,
                body=body,
                body_problem=problem,
                transport_failure=None,
            ),
            content=raw,
            content_type=lowered.get("content-type"),
            provider_request_id=lowered.get("x-request-id") or lowered.get("request-id"),
            collected=collected,
        )
