"""`jobwarden result OP [-o FILE]` as a subprocess against the run's database and store."""

from __future__ import annotations

import hashlib
from pathlib import Path

from jobwarden.models.states import OperationState as S
from tests.integration.api_helpers import insert_operation, tenant_name
from tests.integration.result_helpers import operation_with_result, pattern, run_store
from tests.integration.test_cli import _cli

DATA = pattern(200_000)


def test_a_result_is_written_to_the_file_and_nothing_else_is_left(
    database_url: str, tmp_path: Path
) -> None:
    op, _ = operation_with_result(database_url, tenant_name(), DATA)
    target = tmp_path / "out.ndjson"
    done = _cli("result", str(op), "-o", str(target))
    assert done.returncode == 0, done.stderr
    assert target.read_bytes() == DATA
    assert [p.name for p in tmp_path.iterdir()] == ["out.ndjson"]
    assert done.stdout == ""


def test_the_output_flag_has_an_environment_twin(database_url: str, tmp_path: Path) -> None:
    op, _ = operation_with_result(database_url, tenant_name(), b"inline bytes", inline=True)
    target = tmp_path / "twin.bin"
    done = _cli("result", str(op), env={"JOBWARDEN_RESULT_OUTPUT": str(target)})
    assert done.returncode == 0, done.stderr
    assert target.read_bytes() == b"inline bytes"


def test_to_stdout_only_the_bytes_are_printed_and_a_kept_invalid_result_is_noted_on_stderr(
    database_url: str,
) -> None:
    text = "\n".join(f'{{"n": {i}}}' for i in range(20_000))  # 250 kB of text, stored
    op, _ = operation_with_result(
        database_url, tenant_name(), text.encode(), state=S.result_validation_failed
    )
    done = _cli("result", str(op))
    assert done.returncode == 0, done.stderr
    assert done.stdout == text
    assert "NOT validated" in done.stderr


def test_a_tampered_object_is_refused_naming_both_digests_and_leaves_no_file(
    database_url: str, tmp_path: Path
) -> None:
    op, location = operation_with_result(database_url, tenant_name(), DATA)
    assert location is not None
    forged = bytes(reversed(DATA))  # the same size: only the digest can tell
    store = run_store()
    store.put_stream(store.url.key_of(location), [forged], max_bytes=len(forged))
    target = tmp_path / "out.ndjson"
    done = _cli("result", str(op), "-o", str(target))
    assert done.returncode == 1
    assert hashlib.sha256(DATA).hexdigest() in done.stderr
    assert hashlib.sha256(forged).hexdigest() in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_no_result_exits_1_with_one_line_naming_the_state(database_url: str) -> None:
    op = insert_operation(database_url, tenant_name(), S.observing)
    done = _cli("result", str(op))
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.strip().splitlines() == [f"operation {op} is observing: it has no result"]


def test_a_deleted_object_exits_1_naming_it(database_url: str, tmp_path: Path) -> None:
    op, location = operation_with_result(database_url, tenant_name(), DATA)
    assert location is not None
    run_store().delete(location)
    done = _cli("result", str(op), "-o", str(tmp_path / "out"))
    assert done.returncode == 1
    assert f"{location}: missing" in done.stderr
    assert list(tmp_path.iterdir()) == []
