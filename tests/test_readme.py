"""The README's two fresh-machine commands are the ones CI and users run."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHECKS = [".venv/bin/ruff check .", ".venv/bin/ruff format --check .", ".venv/bin/mypy"]


def _commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## On a fresh machine", 1)[1].split("\n## ", 1)[0]
    return [b.strip() for b in re.findall(r"```bash\n(.*?)```", section, flags=re.S)]


def _ci_steps() -> list[str]:
    lines = [ln.strip() for ln in (ROOT / ".ci" / "run").read_text().splitlines()]
    return [ln for ln in lines if ln and not ln.startswith("#") and not ln.startswith(("set ", "cd "))]


def test_readme_has_exactly_two_setup_commands_demo_and_tests() -> None:
    commands = _commands()
    assert len(commands) == 2 and all("\n" not in c for c in commands), commands
    assert commands[0].endswith("specflip demo")
    assert commands[1].endswith("python -m pytest")


def test_ci_runs_the_readme_test_command_with_the_checks_before_the_tests() -> None:
    """CI = the README's install, then ruff (lint, format) and mypy, then the README's pytest."""
    install, tests = _commands()[1].rsplit(" && ", 1)
    assert _ci_steps() == [install, *CHECKS, tests]


def test_demo_command_exists_in_the_cli() -> None:
    from deployments.cli import build_parser

    args = build_parser().parse_args(["demo"])
    assert args.command == "demo"


def test_readme_links_every_doc() -> None:
    text = (ROOT / "README.md").read_text()
    docs = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))
    missing = [d for d in [*docs, "loadtests/README.md"] if f"`{d}`" not in text]
    assert not missing, missing
