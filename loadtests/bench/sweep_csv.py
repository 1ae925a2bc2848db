"""Reading `loadtests.bench.client_sweep`'s sweep.csv, for the scripts that read it back (sweep_compare,
sweep_goals, transition_plan): each argument is a sweep.csv or a folder holding one, and a missing one
is named before anything is read."""

from __future__ import annotations

import csv
from pathlib import Path

__all__ = ["by_host", "csv_path", "missing", "read"]


def csv_path(path: Path) -> Path:
    """A results argument's sweep.csv: the file itself, or the one in the folder."""
    return path / "sweep.csv" if path.is_dir() else path


def missing(paths: list[Path]) -> list[str]:
    """The arguments with no sweep.csv behind them."""
    return [str(p) for p in paths if not csv_path(p).is_file()]


def read(paths: list[Path]) -> list[dict[str, str]]:
    """Every row of every file, in order."""
    rows: list[dict[str, str]] = []
    for p in paths:
        with csv_path(p).open(newline="") as fh:
            rows += list(csv.DictReader(fh))
    return rows


def by_host(rows: list[dict[str, str]]) -> dict[str, list[dict[str, str]]]:
    """The rows split by their `host` column (runs merged from several hosts carry one), in the order
    the hosts first appear; rows without one are all under ""."""
    out: dict[str, list[dict[str, str]]] = {}
    for r in rows:
        out.setdefault(r.get("host") or "", []).append(r)
    return out
