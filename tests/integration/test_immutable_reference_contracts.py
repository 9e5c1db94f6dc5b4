"""`jobwarden providers check` refuses an immutable-reference annotation it cannot honour,
naming the file and the annotation's place in the command schema (issue 40); the doors'
refusals and the approval's view are cells of the door matrix (matrix/references.py).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from jobwarden.demo.harness import REPO
from jobwarden.models.contracts.references import IMMUTABLE_REFERENCE
from tests.integration.test_cli import _cli


def test_providers_check_names_a_bad_annotation_in_a_schema_file(tmp_path: Path) -> None:
    shutil.copy(REPO / "config" / "providers" / "sandbox.toml", tmp_path / "sandbox.toml")
    schema = {
        "type": "object",
        "properties": {
            "deploy": {
                "type": "object",
                "properties": {"replicas": {"type": "integer", IMMUTABLE_REFERENCE: "sha256"}},
            }
        },
    }
    (tmp_path / "deploy.command.schema.json").write_text(json.dumps(schema))
    text = (tmp_path / "sandbox.toml").read_text().replace('name = "sandbox"', 'name = "deploy"')
    table = '[command]\nschema_file = "deploy.command.schema.json"\n'
    (tmp_path / "deploy.toml").write_text(text.replace("[create]\n", f"{table}\n[create]\n", 1))
    done = _cli("providers", "check", env={"JOBWARDEN_PROVIDERS_DIR": str(tmp_path)})
    assert done.returncode == 1, done.stdout
    assert "ok      sandbox" in done.stdout
    assert "deploy.toml" in done.stderr, done.stderr
    assert f"properties.deploy.properties.replicas.{IMMUTABLE_REFERENCE}" in done.stderr
    assert '"type": "string"' in done.stderr and "Traceback" not in done.stderr
