"""`jobwarden receipt`: write an operation's signed receipt, or verify one offline.

``jobwarden receipt OP`` reads the operation (the database, its archived segment) and
writes one JSON file; ``jobwarden receipt verify FILE --public-key K`` needs neither a
database nor a network: only the file, the public key and the core install
(models/history/receipts.py). One command taking ``verify`` as its first word, rather
than a group, so that ``receipt OP`` stays the short form the issue asks for.
Imported by jobwarden/cli/main.py at start-up, so only typer is imported at module level.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

console = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)
VERIFY = "verify"
# Exit codes: 0 verified (or written); 1 the receipt does not verify, or cannot be issued
# (no such operation, its archived history altered); 2 a usage or settings mistake.
RECEIPT_INVALID, USAGE = 1, 2


def _say(line: str) -> None:
    err.print(line, markup=False, highlight=False, soft_wrap=True)


def receipt_command(
    target: Annotated[
        str,
        typer.Argument(
            help="An operation id to write its receipt, or `verify` to check one.",
            show_default=False,
        ),
    ],
    file: Annotated[
        Path | None,
        typer.Argument(help="With `verify`: the receipt file to check.", show_default=False),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            "-o",
            envvar="JOBWARDEN_RECEIPT_OUT",
            help="Where to write the receipt (default: receipt-<operation id>.json).",
            show_default=False,
        ),
    ] = None,
    public_key: Annotated[
        Path | None,
        typer.Option(
            "--public-key",
            envvar="JOBWARDEN_RECEIPT_PUBLIC_KEY",
            help="With `verify`: the signer's Ed25519 public key (PEM), e.g. as served at "
            "/.well-known/jobwarden-receipt-key.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Write an operation's signed receipt, or verify one offline.

    `jobwarden receipt OP [--out FILE]` writes the operation's facts and its whole
    event chain, signed with the key JOBWARDEN_RECEIPT_SIGNING_KEY_FILE names.
    `jobwarden receipt verify FILE --public-key K` checks the signature, every event
    hash and the head, and that the facts agree with the events, with no database and
    no network; exit 1 naming the first event (or fact) that does not verify.
    """
    if target == VERIFY:
        if file is None or public_key is None:
            _say("receipt verify needs a FILE and --public-key K")
            raise typer.Exit(USAGE)
        _verify(file, public_key)
        return
    if file is not None:
        _say(f"receipt {target}: unexpected argument {str(file)!r} (did you mean `verify`?)")
        raise typer.Exit(USAGE)
    _write(target, out)


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        _say(f"{what} {path}: cannot read it ({exc.strerror or type(exc).__name__})")
        raise typer.Exit(USAGE) from None


def _verify(file: Path, public_key: Path) -> None:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    from cryptography.hazmat.primitives.serialization import load_pem_public_key

    from jobwarden.models.history.receipts import verify_receipt

    try:
        key = load_pem_public_key(_read(public_key, "--public-key"))
    except (ValueError, TypeError):
        _say(f"--public-key {public_key}: not a PEM public key")
        raise typer.Exit(USAGE) from None
    if not isinstance(key, Ed25519PublicKey):
        _say(f"--public-key {public_key}: not an Ed25519 public key")
        raise typer.Exit(USAGE)
    try:
        document: Any = json.loads(_read(file, "receipt"))
    except ValueError:
        _say(f"receipt {file}: not JSON")
        raise typer.Exit(RECEIPT_INVALID) from None
    if not isinstance(document, dict):
        _say(f"receipt {file}: not a receipt (a JSON object)")
        raise typer.Exit(RECEIPT_INVALID)
    problems = verify_receipt(document, key)
    if problems:
        for p in problems:
            _say(p.line())
        raise typer.Exit(RECEIPT_INVALID)
    facts = document["facts"]
    console.print(
        f"receipt verified: operation {document['operation_id']}, "
        f"{len(document['events'])} events, state {facts.get('final_state')}",
        highlight=False,
        markup=False,
    )


def _write(target: str, out: Path | None) -> None:
    import uuid
    from datetime import UTC, datetime

    from jobwarden.config.settings import get_settings
    from jobwarden.models.errors import JobwardenError, SettingsError
    from jobwarden.tasks.receipts import receipt_of

    try:
        operation_id = uuid.UUID(target)
    except ValueError:
        _say(f"not an operation id: {target!r}")
        raise typer.Exit(USAGE) from None
    settings = get_settings()
    try:
        from jobwarden.tasks.runtime import current

        runtime = current()
    except JobwardenError:
        runtime = None  # a provider no longer configured: the create request stays null
    try:
        document = receipt_of(settings, runtime, operation_id, now=datetime.now(UTC))
    except SettingsError as exc:
        _say(str(exc))
        raise typer.Exit(USAGE) from None
    except JobwardenError as exc:
        # Its archived history is gone or altered (named), or it kept being written.
        _say(str(exc))
        raise typer.Exit(RECEIPT_INVALID) from None
    if document is None:
        _say(f"no operation {operation_id}")
        raise typer.Exit(RECEIPT_INVALID)
    path = out or Path(f"receipt-{operation_id}.json")
    text = json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False)
    try:
        path.write_text(text + "\n", encoding="utf-8")
    except OSError as exc:
        _say(f"--out {path}: cannot write it ({exc.strerror or type(exc).__name__})")
        raise typer.Exit(USAGE) from None
    console.print(f"receipt written: {path}", highlight=False, markup=False)
