"""The README's two fresh-machine commands are the ones CI and users run."""

from __future__ import annotations

import itertools
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHECKS = [".venv/bin/ruff check .", ".venv/bin/ruff format --check .", ".venv/bin/mypy"]
MARKERS = [
    m.split(":")[0]
    for m in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["markers"]
]


def _commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## On a fresh machine", 1)[1].split("\n## ", 1)[0]
    return [b.strip() for b in re.findall(r"```bash\n(.*?)```", section, flags=re.S)]


def _ci_stages() -> list[tuple[str, str]]:
    """(name, command) of each `stage NAME COMMAND...` line of .ci/run, the `bash -c '...'`
    wrapper and the `tests` wrapper (pytest's exit 5 allowed) taken off the command."""
    stages = []
    for line in (ROOT / ".ci" / "run").read_text().splitlines():
        if line.startswith("stage "):
            name, command = line.split(" ", 2)[1:]
            if command.startswith("bash -c '"):
                command = command.removeprefix("bash -c '").removesuffix("'")
            stages.append((name, command.removeprefix("tests ")))
    return stages


def _selects(expression: str, markers: set[str]) -> bool:
    """Whether pytest's `-m expression` selects a test carrying `markers` (and, or, not, names)."""
    names = {name: name in markers for name in MARKERS}
    return bool(eval(expression, {"__builtins__": {}}, names))  # noqa: S307 - our own marker names


def test_ci_runs_the_readme_install_then_the_checks_then_the_readme_tests_in_stages() -> None:
    """CI = the README's install, then ruff (lint, format) and mypy, then the README's pytest split
    by markers into a fast stage and the engine/serve/GPU stage."""
    install, tests = _commands()[1].rsplit(" && ", 1)
    commands = [command for _, command in _ci_stages()]
    assert commands[: 1 + len(CHECKS)] == [install, *CHECKS]
    pytest_stages = commands[1 + len(CHECKS) :]
    assert [c.split(' -m "')[0] for c in pytest_stages] == [tests, tests], pytest_stages
    assert pytest_stages[0] == f'{tests} -m "not serve and not engine and not gpu"'


def test_the_ci_test_stages_run_every_test_exactly_once() -> None:
    """Each combination of the suite's markers (pyproject) is selected by exactly one stage: the
    stages together are the README's pytest, nothing skipped, nothing run twice."""
    expressions = [c.split(' -m "', 1)[1].rstrip('"') for _, c in _ci_stages() if ' -m "' in c]
    assert len(expressions) == 2, expressions
    for size in range(len(MARKERS) + 1):
        for markers in itertools.combinations(MARKERS, size):
            chosen = [e for e in expressions if _selects(e, set(markers))]
            assert len(chosen) == 1, (markers, chosen)


def test_demo_command_exists_in_the_cli() -> None:
    from deployments.cli import build_parser

    args = build_parser().parse_args(["demo"])
    assert args.command == "demo"


def test_readme_links_every_doc() -> None:
    text = (ROOT / "README.md").read_text()
    docs = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))
    missing = [d for d in [*docs, "loadtests/README.md"] if f"`{d}`" not in text]
    assert not missing, missing
