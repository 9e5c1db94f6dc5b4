"""The exception tree, grouped by what the caller must do.

Every error pickles cleanly (it crosses Celery) because each keeps its
constructor arguments in ``args``.
"""

from __future__ import annotations


class JobwardenError(Exception):
    """Base of every error jobwarden raises on purpose."""


class RefusedInputError(JobwardenError):
    """The caller's input is invalid; retrying the same input cannot help."""


class InvalidSubmissionError(RefusedInputError):
    """A submission (command, key, provider) failed validation."""


class InvalidCommandError(InvalidSubmissionError):
    """A command its provider's command schema refuses (models.contracts.command_schema).

    ``path`` locates the failing value from the command's root (object keys and array
    indices), ``problem`` says what is wrong with it; the message joins the shown path
    and the problem (``command.amount: 10.1 is not of type 'integer'``).
    """

    def __init__(self, field: str, problem: str, path: tuple[str | int, ...] = ()) -> None:
        super().__init__(field, problem, path)
        self.field = field
        self.problem = problem
        self.path = path

    def __str__(self) -> str:
        return f"{self.field}: {self.problem}"

    @property
    def pointer(self) -> str:
        """The failing value as an RFC 6901 JSON Pointer into the submission: /command/amount."""
        tokens = (str(part).replace("~", "~0").replace("/", "~1") for part in self.path)
        return "/command" + "".join(f"/{token}" for token in tokens)


class ContractError(RefusedInputError):
    """A provider contract file is invalid; names the file and the field."""

    def __init__(self, file: str, field: str, problem: str) -> None:
        super().__init__(file, field, problem)
        self.file = file
        self.field = field
        self.problem = problem

    def __str__(self) -> str:
        return f"{self.file}: {self.field}: {self.problem}"


class ApprovalRefusedError(RefusedInputError):
    """An approval that can no longer be kept: refused, never accepted and then failed.

    ``reason`` is machine-readable (``approval_window_closed``,
    ``business_deadline_passed``); the API answers it as a 409 problem of that kind.
    """

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(reason, detail)
        self.reason = reason
        self.detail = detail

    def __str__(self) -> str:
        return f"{self.reason}: {self.detail}"


class RequestDigestMismatchError(RefusedInputError):
    """The approver was shown another create than the one that would leave now (its
    ``request_digest`` differs): refused, so nobody approves a request they did not see.

    ``reason`` is ``request_digest_mismatch``; the API answers a 409 problem naming the
    field ``request_digest``.
    """

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(reason, detail)
        self.reason = reason
        self.detail = detail

    def __str__(self) -> str:
        return f"request_digest: {self.detail}"


class AnotherApproverNeededError(RefusedInputError):
    """The two-person rule refuses this approver: somebody else must approve.

    ``reason`` is machine-readable: ``self_approval_refused`` (the submitter is never one
    of the two; HTTP 403) or ``same_approver`` (this person already approved; HTTP 409).
    """

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(reason, detail)
        self.reason = reason
        self.detail = detail

    def __str__(self) -> str:
        return f"{self.reason}: {self.detail}"


class TransitionRefusedError(RefusedInputError):
    """A state change not in the transition table."""

    def __init__(self, src: str, dst: str, reason: str) -> None:
        super().__init__(src, dst, reason)
        self.src = src
        self.dst = dst
        self.reason = reason

    def __str__(self) -> str:
        return f"transition {self.src} -> {self.dst} refused: {self.reason}"


class LostRaceError(JobwardenError):
    """Another owner changed the row first; stop quietly, the new owner carries on."""


class StaleVersionError(LostRaceError):
    """A fenced write found a different row version than the one it read."""

    def __init__(self, operation_id: str, expected_version: int) -> None:
        super().__init__(operation_id, expected_version)
        self.operation_id = operation_id
        self.expected_version = expected_version

    def __str__(self) -> str:
        return (
            f"operation {self.operation_id}: version {self.expected_version} is stale; "
            "another owner wrote first"
        )


class LeaseNotAcquiredError(LostRaceError):
    """Another worker holds the operation's lease."""


class SubmissionInProgressError(LostRaceError):
    """A concurrent submission of the same tenant and key held the key past the claim's
    lock timeout: that one decides, and this answer is ``in_progress``.

    Raised by models/persistence/intake_store.insert, translated once from Postgres's
    lock_not_available (SQLSTATE 55P03); nothing was recorded by the claim.
    """

    def __init__(self, tenant: str, idempotency_key: str) -> None:
        super().__init__(tenant, idempotency_key)
        self.tenant = tenant
        self.idempotency_key = idempotency_key

    def __str__(self) -> str:
        return (
            f"tenant {self.tenant!r}: idempotency_key {self.idempotency_key!r} is being "
            "recorded by a concurrent submission"
        )


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


class GiveUpError(JobwardenError):
    """Non-retryable: automation must stop and a human must look."""


class ResultTooLargeError(GiveUpError):
    """A result passed its contract's size bound while streaming; nothing was stored."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__(max_bytes)
        self.max_bytes = max_bytes

    def __str__(self) -> str:
        return f"result exceeds {self.max_bytes} bytes"


class ResultMissingError(GiveUpError):
    """Nothing is stored at a result's location any more (deleted, or never completed)."""

    def __init__(self, location: str) -> None:
        super().__init__(location)
        self.location = location

    def __str__(self) -> str:
        return f"{self.location}: missing"


class ResultLocationError(RefusedInputError):
    """A result location that is not a key this result store writes (another store, a
    hand-edited row, a path that would leave the store's directory)."""

    def __init__(self, location: str, problem: str) -> None:
        super().__init__(location, problem)
        self.location = location
        self.problem = problem

    def __str__(self) -> str:
        return f"{self.location}: {self.problem}"


class ResultChangedError(LostRaceError):
    """The stored object changed between its check and its read (its store tag moved):
    check it again before trusting it."""


class ResultIntegrityError(GiveUpError):
    """A stored result's bytes are not the ones its row records (sha256 or size).

    Retrying cannot help: the bytes stay wrong until an operator restores them.
    """

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(where, problem)
        self.where = where
        self.problem = problem

    def __str__(self) -> str:
        return f"{self.where}: {self.problem}"


class SettingsError(RefusedInputError):
    """A JOBWARDEN_ setting is invalid; names the variable."""


class NotificationConfigError(RefusedInputError):
    """The notifications file (JOBWARDEN_NOTIFICATIONS_FILE) is invalid; names file and field."""
