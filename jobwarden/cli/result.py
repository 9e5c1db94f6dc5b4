"""`jobwarden result OP [-o FILE]`: a collected result's bytes, streamed out of the store.

Reads the database and the result store directly, as `show` and `verify` do (an
operator's command on a machine with the settings; agents and services use
GET /v1/operations/{id}/result). Only typer is imported at module level.

To FILE the bytes go to a temporary file beside it, hashed as they are written, and the
file is renamed to FILE only once their sha256 and size are the row's: a reader of FILE
never sees a partial or altered result. A mismatch removes the temporary file and exits 1
naming both digests. To stdout nothing else is printed there (notes go to stderr); a
mismatch found at the end still exits 1, but the bytes have already left, so a pipeline
must check the exit status.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Annotated

import typer
from rich.console import Console

err = Console(stderr=True, soft_wrap=True)


def _say(line: str) -> None:
    err.print(line, markup=False, highlight=False, soft_wrap=True)


def _fail(line: str) -> typer.Exit:
    _say(line)
    return typer.Exit(1)


def result_command(
    operation_id: Annotated[str, typer.Argument(help="The operation whose result to write.")],
    output: Annotated[
        Path | None,
        typer.Option(
            "-o",
            "--output",
            envvar="JOBWARDEN_RESULT_OUTPUT",
            help="Write to FILE (only once its sha256 matches); default: stdout.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Write an operation's result bytes to FILE or stdout, checked against their sha256."""
    from jobwarden.config.settings import get_settings
    from jobwarden.models.errors import JobwardenError
    from jobwarden.models.persistence import result_rows, store
    from jobwarden.models.persistence.db import snapshot
    from jobwarden.models.results.access import validated
    from jobwarden.tasks.results.store import ResultStore

    try:
        op_id = uuid.UUID(operation_id)
    except ValueError:
        raise _fail(f"not an operation id: {operation_id!r}") from None
    settings = get_settings()
    with snapshot(settings.database_url) as session:
        # The result first: written in the commit that sets its state (api/results.py).
        result = result_rows.result_of(session, op_id)
        row = store.load(session, op_id)
    if row is None:
        raise _fail(f"no operation {op_id}")
    if result is None:
        raise _fail(f"operation {op_id} is {row.state}: it has no result")
    label = validated(row.state)
    if label is not True:
        what = "accepted by a person as it is" if label == "accepted" else "NOT validated"
        _say(f"note: this result is {what} (state {row.state})")
    try:
        if result.content is not None:
            chunks: Iterator[bytes] = iter((result.content,))
        else:
            assert result.location is not None
            chunks = ResultStore.from_url(settings.result_store).read(result.location)
        if output is None:
            written = _copy(chunks, sys.stdout.buffer)
            sys.stdout.buffer.flush()
        else:
            written = _to_file(chunks, output, result.sha256, result.size_bytes)
    except JobwardenError as exc:  # the object missing, the store down, a foreign location
        raise _fail(f"result of {op_id}: {exc}") from None
    if written != (result.sha256, result.size_bytes):
        raise _fail(_mismatch(result.sha256, result.size_bytes, written, output))


def _copy(chunks: Iterator[bytes], out: IO[bytes]) -> tuple[str, int]:
    running, size = hashlib.sha256(), 0
    for chunk in chunks:
        running.update(chunk)
        size += len(chunk)
        out.write(chunk)
    return running.hexdigest(), size


def _to_file(chunks: Iterator[bytes], output: Path, sha256: str, size: int) -> tuple[str, int]:
    target = output.resolve()
    fd, temp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out:
            written = _copy(chunks, out)
            out.flush()
            os.fsync(out.fileno())  # on disk before the rename makes it visible
        if written == (sha256, size):
            os.replace(temp, target)
            return written
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    Path(temp).unlink(missing_ok=True)
    return written


def _mismatch(sha256: str, size: int, written: tuple[str, int], output: Path | None) -> str:
    where = f"{output} not written" if output is not None else "stdout already has the bytes"
    return (
        f"result digest mismatch: recorded sha256 {sha256} ({size} bytes), read "
        f"sha256 {written[0]} ({written[1]} bytes); {where}"
    )


def object_problems(location: str, sha256: str, size: int) -> list[str]:
    """What `jobwarden verify` says of a stored result object: read back, streamed; a
    deleted or replaced object is named, and a store it cannot read proves nothing."""
    from jobwarden.config.settings import get_settings
    from jobwarden.models.errors import JobwardenError
    from jobwarden.models.results.objects import StoredObject
    from jobwarden.tasks.results.store import ResultStore

    try:
        store = ResultStore.from_url(get_settings().result_store)
        problem = store.verify(StoredObject(location=location, sha256=sha256, size=size))
    except JobwardenError as exc:  # the store down, or a location outside it: unproven
        return [f"result object: cannot be read ({exc})"]
    return [f"result object {problem}"] if problem is not None else []
