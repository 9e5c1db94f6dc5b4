"""Refresh tests/acceptance/durations.json from a JUnit XML report of an acceptance run.

tests/conftest.py splits the acceptance files into groups of about equal seconds, one
per test process, by these figures. After adding or slowing an acceptance file:

    .venv/bin/python -m pytest tests/acceptance -n 2 --dist loadgroup --junitxml=acc.xml
    .venv/bin/python scripts/test_durations.py acc.xml

Seconds are setup, call and teardown together (pytest's default junit_duration_report),
so a module fixture that starts a server is charged to its file.
"""

from __future__ import annotations

import argparse
import json
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "tests" / "acceptance" / "durations.json"


def seconds_per_file(report: Path) -> dict[str, float]:
    per_file: Counter[str] = Counter()
    for case in ET.parse(report).iter("testcase"):
        # classname: tests.acceptance.test_x (or .TestClass under it)
        module = case.get("classname", "").split(".")[:3]
        if module[:2] == ["tests", "acceptance"] and len(module) == 3:
            per_file["/".join(module) + ".py"] += float(case.get("time", 0))
    return {name: round(seconds, 1) for name, seconds in sorted(per_file.items())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path, help="JUnit XML of an acceptance run")
    args = parser.parse_args()
    figures = seconds_per_file(args.report)
    if not figures:
        raise SystemExit(f"{args.report}: no tests/acceptance test cases in this report")
    OUT.write_text(json.dumps(figures, indent=1) + "\n")
    print(f"{OUT}: {len(figures)} files, {sum(figures.values()):.0f} s in all")


if __name__ == "__main__":
    main()
