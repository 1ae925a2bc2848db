"""Every documented tooling command starts: `python -m loadtests...` (and the `specflip demo / models /
bench` subcommands, the same CLI) as README.md, loadtests/README.md, docs/*.md and docs/gpu/*.sh
write them, each run with `--help` in its own process: exit 0 and argparse's usage on stdout.

A module that moved, lost its `if __name__ == "__main__"` (exit 0 and nothing printed) or broke at
import fails here in seconds, not on the next GPU session. All run at once; no entry point needs a
GPU at import (none is skipped). Without an engine: a few seconds of imports each, in parallel.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [
    ROOT / "README.md",
    ROOT / "loadtests" / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "docs" / "gpu").glob("*.sh")),
]
# `python -m loadtests.x.y`, or the CLI (`python -m loadtests` / `specflip`) with its tooling
# subcommand words (`models shapes`), up to the first option or argument
_MODULE = re.compile(r"python3? -m (loadtests(?:\.\w+)+)")
_CLI = re.compile(r"(?:python3? -m loadtests|specflip)((?: (?:demo|models|bench)(?: [a-z]+(?=[\s`]|$))?))")


def _entry_points() -> list[tuple[str, ...]]:
    """The argument lists after `python -m`, each once."""
    found: set[tuple[str, ...]] = set()
    for source in SOURCES:
        text = source.read_text()
        found |= {(module,) for module in _MODULE.findall(text)}
        found |= {("loadtests", *words.split()) for words in _CLI.findall(text)}
    return sorted(found)


ENTRY_POINTS = _entry_points()


@pytest.fixture(scope="module")
def helps() -> dict[tuple[str, ...], subprocess.CompletedProcess[str]]:
    """`python -m <entry point> --help` for all of them, in parallel."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}

    def run(args: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", *args, "--help"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )

    with ThreadPoolExecutor(max_workers=8) as pool:
        return dict(zip(ENTRY_POINTS, pool.map(run, ENTRY_POINTS), strict=True))


def test_the_docs_name_the_tooling_entry_points() -> None:
    """The scan finds what the docs hold (a scan that found nothing would prove nothing)."""
    names = {" ".join(e) for e in ENTRY_POINTS}
    assert {"loadtests.sweep", "loadtests.bench.soak", "loadtests demo", "loadtests models shapes"} <= names


@pytest.mark.parametrize("entry_point", ENTRY_POINTS, ids=" ".join)
def test_documented_entry_point_answers_help(
    entry_point: tuple[str, ...], helps: dict[tuple[str, ...], subprocess.CompletedProcess[str]]
) -> None:
    done = helps[entry_point]
    tail = (done.stderr or done.stdout)[-2000:]
    assert done.returncode == 0, f"python -m {' '.join(entry_point)} --help exited {done.returncode}:\n{tail}"
    assert "usage:" in done.stdout, f"python -m {' '.join(entry_point)} --help printed no usage:\n{tail}"
