"""The HTTP API walk-through (docs/how-to/http-api.md, once the README's) runs as written:
db upgrade, a token, `jobwarden api`,
a submit (201 with Location), the same request again (a replay) and a fetch.

The one change made to the block: the port. 8080 may be taken where the tests run, so
the server and the curl lines use a free one.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
GUIDE = REPO / "docs" / "how-to" / "http-api.md"
BLOCKS = re.findall(r"```bash\n(.*?)```", GUIDE.read_text(encoding="utf-8"), flags=re.S)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_the_http_api_guide_has_one_shell_example() -> None:
    assert len(BLOCKS) == 1 and "jobwarden api &" in BLOCKS[0]


@pytest.mark.skipif(
    shutil.which("curl") is None or shutil.which("jq") is None, reason="needs curl and jq"
)
def test_the_readme_http_example_runs_as_written(database_url: str, tmp_path: Path) -> None:
    port = _free_port()
    script = BLOCKS[0].replace("127.0.0.1:8080", f"127.0.0.1:{port}")
    bin_dir = Path(sys.executable).parent
    out_file, err_file = tmp_path / "stdout", tmp_path / "stderr"
    # Files, not pipes: the background server keeps its copy of stdout open after the script.
    with out_file.open("w") as stdout, err_file.open("w") as stderr:
        proc = subprocess.Popen(
            ["bash", "-euo", "pipefail", "-c", script],
            env={
                **os.environ,
                "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}",
                "JOBWARDEN_DATABASE_URL": database_url,
                "JOBWARDEN_API_PORT": str(port),
                "JOBWARDEN_PROVIDERS_DIR": str(REPO / "config" / "providers"),
            },
            cwd=tmp_path,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,
        )
        try:
            proc.wait(timeout=90)
        finally:
            # `jobwarden api &` outlives the script: stop its whole process group.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=10)
    out, err = out_file.read_text(), err_file.read_text()
    assert proc.returncode == 0, err[-2000:]
    assert re.search(r"^HTTP/1\.1 201 ", out, flags=re.M), out
    location = re.search(r"^location: (/v1/operations/[0-9a-f-]{36})\r?$", out, flags=re.M | re.I)
    assert location is not None, out
    # curl prints bodies without a newline: the submit's body and the fetched one share a line.
    last, decoder, documents = out.strip().splitlines()[-1], json.JSONDecoder(), []
    while last:
        document, end = decoder.raw_decode(last)
        documents.append(document)
        last = last[end:].lstrip()
    submitted, fetched = documents[-2:]
    assert submitted["outcome"] == "created"
    assert f"/v1/operations/{fetched['operation_id']}" == location.group(1)
    assert fetched["tenant"] == "acme"
