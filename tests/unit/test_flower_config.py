"""Flower as shipped is never unauthenticated on all interfaces: every Flower command in
the README and docs binds the loopback interface, and the compose service requires a
login and publishes its port on 127.0.0.1 only."""

from __future__ import annotations

import re

import yaml

from jobwarden.demo.harness import REPO

# Every page, the how-to guides included (issue 36 moved the command there).
DOCS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def _flower_commands() -> list[str]:
    commands = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for span in re.findall(r"`([^`]*)`", text):
            joined = " ".join(span.split())
            if re.search(r"\bcelery\b.*\bflower\b", joined):
                commands.append(joined)
    return commands


def test_every_documented_flower_command_listens_on_the_loopback_interface_only() -> None:
    commands = _flower_commands()
    assert commands, "the docs name the command that runs Flower"
    for command in commands:
        assert "--address=127.0.0.1" in command, command


def test_the_compose_flower_requires_a_login_and_publishes_on_loopback_only() -> None:
    flower = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]["flower"]
    # ${VAR:?message}: compose refuses to start without it (no empty default login).
    assert re.fullmatch(
        r"\$\{FLOWER_BASIC_AUTH:\?[^}]+\}", flower["environment"]["FLOWER_BASIC_AUTH"]
    )
    assert flower["ports"] and all(str(p).startswith("127.0.0.1:") for p in flower["ports"])
    assert not any("auth" in str(part).lower() for part in flower["entrypoint"])  # no literal
