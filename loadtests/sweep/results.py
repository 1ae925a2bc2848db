"""Sweep results as typed rows, written to and read back from CSV/JSON.

`results.csv`: one row per (variant, concurrency). `transition.csv`: the mode
timeline, one row per (variant, poll, replica). `results.json`: everything,
including the run settings, per-phase transition summaries and tok/s over time,
so the report and plots can be rebuilt from it (`python -m loadtests.sweep.report DIR`).
"""

from __future__ import annotations

import csv
import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from loadtests.metrics import Summary
from loadtests.sweep.control import ReplicaSample

__all__ = [
    "PhaseResult",
    "RatioRow",
    "ResultRow",
    "SweepResults",
    "TransitionResult",
    "ratios",
    "read_results_csv",
    "write_results_csv",
    "write_transition_csv",
]

STATIC = ("on", "off")


@dataclass(frozen=True, kw_only=True)
class ResultRow(Summary):
    """One point of the concurrency sweep: a window's summary, with the variant and concurrency it
    was measured at and what the policy did meanwhile."""

    variant: str
    concurrency: int
    mean_accept_length: float | None
    spec_on_fraction: float | None
    client_load: float | None = None  # chunks_s over the generator's calibrated ceiling (None: uncalibrated)

    @classmethod
    def from_summary(
        cls,
        variant: str,
        concurrency: int,
        s: Summary,
        accept: float | None,
        on_fraction: float | None,
        ceiling_chunks_s: float | None = None,
    ) -> ResultRow:
        return cls(
            **asdict(s),
            variant=variant,
            concurrency=concurrency,
            mean_accept_length=accept,
            spec_on_fraction=on_fraction,
            client_load=s.chunks_s / ceiling_chunks_s if ceiling_chunks_s else None,
        )


_KEYS = ("variant", "concurrency")
CSV_COLUMNS = [*_KEYS, *(f.name for f in fields(ResultRow) if f.name not in _KEYS)]


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def write_results_csv(rows: list[ResultRow], path: Path) -> None:
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(CSV_COLUMNS)
        for r in rows:
            w.writerow([_cell(getattr(r, c)) for c in CSV_COLUMNS])


def read_results_csv(path: Path) -> list[ResultRow]:
    types = {f.name: f.type for f in fields(ResultRow)}
    out = []
    with path.open(newline="") as fh:
        for raw in csv.DictReader(fh):
            d: dict[str, Any] = {}
            for k, v in raw.items():
                t = str(types[k])
                if t == "str":
                    d[k] = v
                elif v == "":
                    d[k] = None
                else:
                    d[k] = int(v) if t == "int" else float(v)
            out.append(ResultRow.from_dict(d))
    return out


@dataclass(frozen=True)
class RatioRow:
    """Output tok/s of dynamic and adaptive relative to the best static mode at one concurrency."""

    concurrency: int
    best_static: str
    best_static_tok_s: float
    dynamic_ratio: float | None
    adaptive_ratio: float | None
    client_bound: bool = False  # a variant's load generator ran above its limit: not reported


def ratios(rows: list[ResultRow], max_client_load: float | None = None) -> list[RatioRow]:
    """dynamic / max(on, off) and adaptive / max(on, off), where both static modes were measured.
    A level where any variant's client load exceeded `max_client_load` is marked client-bound."""
    by = {(r.variant, r.concurrency): r for r in rows}
    out = []
    for c in sorted({r.concurrency for r in rows}):
        statics = [by[(v, c)] for v in STATIC if (v, c) in by]
        if len(statics) < 2:
            continue
        loads = [r.client_load for r in rows if r.concurrency == c and r.client_load is not None]
        if max_client_load is not None and loads and max(loads) > max_client_load:
            best = max(statics, key=lambda r: r.output_tok_s)
            out.append(RatioRow(c, best.variant, best.output_tok_s, None, None, client_bound=True))
            continue
        best = max(statics, key=lambda r: r.output_tok_s)

        def ratio(v: str, c: int = c, best: ResultRow = best) -> float | None:
            r = by.get((v, c))
            return None if r is None or best.output_tok_s <= 0 else r.output_tok_s / best.output_tok_s

        out.append(RatioRow(c, best.variant, best.output_tok_s, ratio("dynamic"), ratio("adaptive")))
    return out


@dataclass(frozen=True)
class PhaseResult:
    """One phase of the transition shape (low, high, low2)."""

    name: str
    start_s: float
    end_s: float
    users: int
    summary: Summary


@dataclass
class TransitionResult:
    """The low->high->low run of one variant. Times relative to the load start `t0`."""

    variant: str
    t0: float
    phases: list[PhaseResult]
    samples: list[ReplicaSample]
    tok_s: list[float]
    bin_s: float = 1.0
    status_available: bool = True

    def flips(self) -> dict[str, int]:
        """Mode changes seen per replica during the run (from consecutive polls)."""
        last: dict[str, str] = {}
        count: dict[str, int] = {}
        for s in self.samples:
            count.setdefault(s.replica_id, 0)
            if s.replica_id in last and last[s.replica_id] != s.mode:
                count[s.replica_id] += 1
            last[s.replica_id] = s.mode
        return count


def write_transition_csv(transitions: list[TransitionResult], path: Path) -> None:
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(
            [
                "variant",
                "t_s",
                "phase",
                "replica_id",
                "mode",
                "desired_mode",
                "running",
                "waiting",
                "accept_length",
                "override",
            ]
        )
        for tr in transitions:
            for s in tr.samples:
                t = s.t - tr.t0
                phase = next((p.name for p in tr.phases if p.start_s <= t < p.end_s), "")
                w.writerow(
                    [
                        tr.variant,
                        f"{t:.3f}",
                        phase,
                        s.replica_id,
                        s.mode,
                        s.desired_mode,
                        s.running,
                        s.waiting,
                        _cell(s.accept_length),
                        s.override,
                    ]
                )


@dataclass
class SweepResults:
    """Everything a sweep produced; `results.json` is its JSON form."""

    settings: dict[str, Any]
    rows: list[ResultRow] = field(default_factory=list)
    transitions: list[TransitionResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)  # variants that could not be measured

    def to_json(self) -> str:
        return json.dumps(
            {
                "settings": self.settings,
                "rows": [asdict(r) for r in self.rows],
                "ratios": [asdict(r) for r in ratios(self.rows)],
                "transitions": [asdict(t) for t in self.transitions],
                "notes": self.notes,
                "failed": self.failed,
            },
            indent=1,
        )

    @classmethod
    def from_json(cls, text: str) -> SweepResults:
        d = json.loads(text)
        trs = []
        for t in d.get("transitions", []):
            phases = [
                PhaseResult(p["name"], p["start_s"], p["end_s"], p["users"], Summary.from_dict(p["summary"]))
                for p in t["phases"]
            ]
            samples = [ReplicaSample(**s) for s in t["samples"]]
            trs.append(
                TransitionResult(
                    t["variant"],
                    t["t0"],
                    phases,
                    samples,
                    t["tok_s"],
                    t["bin_s"],
                    t.get("status_available", True),
                )
            )
        return cls(
            d["settings"],
            [ResultRow.from_dict(r) for r in d["rows"]],
            trs,
            d.get("notes", []),
            d.get("failed", []),
        )
