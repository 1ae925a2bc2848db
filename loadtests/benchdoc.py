"""docs/benchmarks.md is shared by every benchmark script: each one owns one `## ` section."""

from __future__ import annotations

from pathlib import Path

__all__ = ["write_section"]


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
