"""Markdown output of the load tests and benchmarks: tables, and the `## ` sections of docs/benchmarks.md.

Every report and benchmark writes its tables with `table` and its docs/benchmarks.md section with
`write_section` (each script owns one section and leaves the others alone).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

__all__ = ["table", "write_section"]

_RULES = {"left": "---", "right": "---:"}


def table(header: Sequence[str], rows: Sequence[Sequence[object]], align: str = "") -> str:
    """A markdown table, one line per row, ending in a newline. `align` has one letter per column,
    `l` or `r` (missing letters: left); cells are written with `str()` as given."""
    rules = [_RULES["right" if align[i : i + 1] == "r" else "left"] for i in range(len(header))]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(rules) + "|"]
    for row in rows:
        if len(row) != len(header):
            raise ValueError(f"row has {len(row)} cells for {len(header)} columns: {row!r}")
        lines.append("| " + " | ".join(str(c) for c in row) + " |")
    return "\n".join(lines) + "\n"


def write_section(path: str | Path, body: str) -> None:
    """Replace (or append) the `## ` section that `body` starts with, leaving the others alone."""
    path = Path(path)
    heading = body.lstrip().splitlines()[0].strip()
    if not heading.startswith("## "):
        raise ValueError(f"a benchmark section must start with a '## ' heading, got {heading!r}")
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.strip() == heading), None)
    if start is None:
        new = text.rstrip("\n") + "\n\n" + body.strip("\n") + "\n"
    else:
        end = next((j for j in range(start + 1, len(lines)) if lines[j].startswith("## ")), len(lines))
        tail = [""] + lines[end:] if end < len(lines) else []
        new = "\n".join(lines[:start] + body.strip("\n").splitlines() + tail) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(new)
