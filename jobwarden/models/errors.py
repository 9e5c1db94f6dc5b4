"""The exception tree, grouped by what the caller must do.

One base (as procrastinate's ``exceptions.py``): an error's message is the one it is
given, else the first paragraph of its class docstring. An error that carries facts is
a dataclass of them with a ``template`` spelling its message over them, so no class
writes its own ``__init__``/``__str__`` pair. Every error pickles cleanly (it crosses
Celery) because each keeps its constructor arguments in ``args``.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, fields, is_dataclass
from typing import ClassVar


class JobwardenError(Exception):
    """Base of every error jobwarden raises on purpose."""

    # A dataclass error's message over its fields (str.format names); unused by the rest.
    template: ClassVar[str] = ""

    def __init__(self, message: str | None = None, *args: object) -> None:
        super().__init__(message or _summary(type(self)), *args)

    def __post_init__(self) -> None:
        # A dataclass error: its fields are its arguments, in order, so it pickles (and
        # Celery rebuilds it) from ``args`` as it does any other exception.
        self.args = tuple(_facts(self).values())

    def __str__(self) -> str:
        return self.template.format_map(_facts(self)) if self.template else super().__str__()


def _facts(error: JobwardenError) -> dict[str, object]:
    """A dataclass error's fields by name, in their order (none for the others)."""
    return {f.name: getattr(error, f.name) for f in fields(error)} if is_dataclass(error) else {}


def _summary(cls: type[JobwardenError]) -> str:
    """The first paragraph of the error's docstring, on one line: its default message."""
    doc = inspect.getdoc(cls) or cls.__name__
    return " ".join(doc.split("\n\n")[0].split())


class RefusedInputError(JobwardenError):
    """The caller's input is invalid; retrying the same input cannot help."""


class InvalidSubmissionError(RefusedInputError):
    """A submission (command, key, provider) failed validation."""


@dataclass(eq=False)
class InvalidCommandError(InvalidSubmissionError):
    """A command its provider's command schema refuses (models.contracts.command_schema).

    ``path`` locates the failing value from the command's root (object keys and array
    indices), ``problem`` says what is wrong with it; the message joins the shown path
    and the problem (``command.amount: 10.1 is not of type 'integer'``).
    """

    template = "{field}: {problem}"

    field: str
    problem: str
    path: tuple[str | int, ...] = ()

    @property
    def pointer(self) -> str:
        """The failing value as an RFC 6901 JSON Pointer into the submission: /command/amount."""
        tokens = (str(part).replace("~", "~0").replace("/", "~1") for part in self.path)
        return "/command" + "".join(f"/{token}" for token in tokens)


@dataclass(eq=False)
class ContractError(RefusedInputError):
    """A provider contract file is invalid; names the file and the field."""

    template = "{file}: {field}: {problem}"

    file: str
    field: str
    problem: str


@dataclass(eq=False)
class ApprovalRefusedError(RefusedInputError):
    """An approval that can no longer be kept: refused, never accepted and then failed.

    ``reason`` is machine-readable (``approval_window_closed``,
    ``business_deadline_passed``); the API answers it as a 409 problem of that kind.
    """

    template = "{reason}: {detail}"

    reason: str
    detail: str


@dataclass(eq=False)
class RequestDigestMismatchError(RefusedInputError):
    """The approver was shown another create than the one that would leave now (its
    ``request_digest`` differs): refused, so nobody approves a request they did not see.

    ``reason`` is ``request_digest_mismatch``; the API answers a 409 problem naming the
    field ``request_digest``.
    """

    template = "request_digest: {detail}"

    reason: str
    detail: str


@dataclass(eq=False)
class AnotherApproverNeededError(RefusedInputError):
    """The two-person rule refuses this approver: somebody else must approve.

    ``reason`` is machine-readable: ``self_approval_refused`` (the submitter is never one
    of the two; HTTP 403) or ``same_approver`` (this person already approved; HTTP 409).
    """

    template = "{reason}: {detail}"

    reason: str
    detail: str


@dataclass(eq=False)
class TransitionRefusedError(RefusedInputError):
    """A state change not in the transition table."""

    template = "transition {src} -> {dst} refused: {reason}"

    src: str
    dst: str
    reason: str


class LostRaceError(JobwardenError):
    """Another owner changed the row first; stop quietly, the new owner carries on."""


@dataclass(eq=False)
class StaleVersionError(LostRaceError):
    """A fenced write found a different row version than the one it read."""

    template = (
        "operation {operation_id}: version {expected_version} is stale; another owner wrote first"
    )

    operation_id: str
    expected_version: int


class LeaseNotAcquiredError(LostRaceError):
    """Another worker holds the operation's lease."""


@dataclass(eq=False)
class SubmissionInProgressError(LostRaceError):
    """A concurrent submission of the same tenant and key held the key past the claim's
    lock timeout: that one decides, and this answer is ``in_progress``.

    Raised by models/persistence/intake_store.insert, translated once from Postgres's
    lock_not_available (SQLSTATE 55P03); nothing was recorded by the claim.
    """

    template = (
        "tenant {tenant!r}: idempotency_key {idempotency_key!r} is being recorded by a "
        "concurrent submission"
    )

    tenant: str
    idempotency_key: str


class PartitionNotArchivedError(LostRaceError):
    """A history partition gained an event its archived segment lacks; it stays attached
    (the next archiving run archives that history again)."""


class RetryLaterError(JobwardenError):
    """A transient failure; the same action may succeed later."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message, retry_after)
        self.retry_after = retry_after


class ProviderTransportError(RetryLaterError):
    """The provider could not be reached or did not answer (DNS, TLS, connect, read)."""


class ResultStoreUnavailableError(RetryLaterError):
    """The result store (JOBWARDEN_RESULT_STORE) was down or refused; no object was recorded.

    The collect step counts it against its budget and tries again; an upload it cut short
    left nothing at the key (tasks/results/store.py).
    """


class RevocationNotAnnouncedError(RetryLaterError):
    """The token is revoked in Postgres, but Redis did not take the revocation epoch.

    API processes that hold the token in memory accept it until their entry expires
    (JOBWARDEN_API_TOKEN_CACHE_SECONDS at most); revoking it again announces it again.
    """


class GiveUpError(JobwardenError):
    """Non-retryable: automation must stop and a human must look."""


@dataclass(eq=False)
class ResultTooLargeError(GiveUpError):
    """A result passed its contract's size bound while streaming; nothing was stored."""

    template = "result exceeds {max_bytes} bytes"

    max_bytes: int


@dataclass(eq=False)
class ResultMissingError(GiveUpError):
    """Nothing is stored at a result's location any more (deleted, or never completed)."""

    template = "{location}: missing"

    location: str


@dataclass(eq=False)
class ResultLocationError(RefusedInputError):
    """A result location that is not a key this result store writes (another store, a
    hand-edited row, a path that would leave the store's directory)."""

    template = "{location}: {problem}"

    location: str
    problem: str


class ResultChangedError(LostRaceError):
    """The stored object changed between its check and its read (its store tag moved):
    check it again before trusting it."""


@dataclass(eq=False)
class ResultIntegrityError(GiveUpError):
    """A stored result's bytes are not the ones its row records (sha256 or size).

    Retrying cannot help: the bytes stay wrong until an operator restores them.
    """

    template = "{where}: {problem}"

    where: str
    problem: str


class SettingsError(RefusedInputError):
    """A JOBWARDEN_ setting is invalid; names the variable."""


class NotificationConfigError(RefusedInputError):
    """The notifications file (JOBWARDEN_NOTIFICATIONS_FILE) is invalid; names file and field."""
