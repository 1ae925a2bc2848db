"""Lines a test wants in the run's output even when it passes (pytest captures prints): what the
real-app tests measured (Schemathesis's cases, the fault tests' counts per phase). tests/conftest.py
prints them in a summary section at the end of the run."""

from __future__ import annotations

LINES: list[str] = []


def report(line: str) -> None:
    """Print `line` now (seen with -s) and keep it for the end-of-run summary."""
    print(f"\n{line}", flush=True)
    LINES.append(line)
