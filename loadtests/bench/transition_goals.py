"""The transition goals, read from `loadtests.bench.client_transition` results (transition.csv):

    python -m loadtests.bench.transition_goals out/transition-closed --plan out/closed_plan.json

- closed loop: the whole run (its phases' durations summed) >= 1.15x faster with dynamic than with the
  better static mode (the one of `on` and `off` that took less);
- either loop, inside each phase: dynamic within 5% of that phase's better static mode, on TPOT p50 in
  low phases (<= 1.05x the lower) and on output tok/s in high phases (>= 0.95x the higher);
- goodput (requests per second meeting both SLOs) per phase beside, as the run measured it.

With `--plan` (`loadtests.bench.transition_plan --json`), the plan's predicted whole-run times beside
the measured ones. The argument is a transition.csv or a folder holding one.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path
from typing import Any

from loadtests.markdown import table

__all__ = ["main", "verdicts", "within"]

WHOLE_RUN = 1.15  # closed loop: dynamic's whole run over the better static mode's
IN_PHASE = 0.05  # either loop: dynamic within this of the better static mode inside each phase


def _read(path: Path) -> list[dict[str, str]]:
    with (path / "transition.csv" if path.is_dir() else path).open(newline="") as fh:
        return list(csv.DictReader(fh))


def within(load: str, on: float, off: float, dynamic: float) -> bool:
    """Inside one phase, dynamic within IN_PHASE of the better static mode: TPOT p50 in a low phase
    (<= 1.05x the lower), output tok/s in a high one (>= 0.95x the higher)."""
    if load == "low":
        return dynamic <= (1 + IN_PHASE) * min(on, off)
    return dynamic >= (1 - IN_PHASE) * max(on, off)


def verdicts(rows: list[dict[str, str]]) -> dict[str, Any]:
    """`whole_s` {variant: s}, `whole_x` (better static's over dynamic's, closed loop; None without the
    three variants), and per phase the three variants' numbers and `within` (None where one is missing)."""
    by = {(r["variant"], int(r["phase"])): r for r in rows}
    variants = {r["variant"] for r in rows}
    whole = {v: sum(float(r["duration_s"]) for r in rows if r["variant"] == v) for v in variants}
    have_all = {"on", "off", "dynamic"} <= variants
    closed = all(r["workload"] == "closed" for r in rows)
    phases = []
    for i in sorted({int(r["phase"]) for r in rows}):
        got = {v: by.get((v, i)) for v in ("on", "off", "dynamic")}
        load = next(r["load"] for r in got.values() if r is not None)
        within_ = None
        present = [r for r in got.values() if r is not None and r["tpot_p50_ms"] and r["output_tok_s"]]
        if len(present) == 3:
            key = "tpot_p50_ms" if load == "low" else "output_tok_s"  # latency low, throughput high
            within_ = within(load, *(float(r[key]) for r in present))  # in the order on, off, dynamic
        phases.append({"phase": i, "load": load, "runs": got, "within": within_})
    whole_x = min(whole["on"], whole["off"]) / whole["dynamic"] if have_all and closed else None
    return {"whole_s": whole, "whole_x": whole_x, "phases": phases, "closed": closed}


def _num(r: dict[str, str] | None, key: str, fmt: str = ",.1f") -> str:
    return "-" if r is None or not r.get(key) else format(float(r[key]), fmt)


def render(result: dict[str, Any], plan: dict[str, Any] | None) -> str:
    header = ["phase", "load"]
    header += [f"{v} {m}" for v in ("on", "off", "dynamic") for m in ("s", "tok/s", "TPOT p50", "goodput")]
    header.append("dynamic within 5%")
    rows = []
    for ph in result["phases"]:
        cells = [ph["phase"], ph["load"]]
        for v in ("on", "off", "dynamic"):
            r = ph["runs"][v]
            cells += [_num(r, "duration_s"), _num(r, "output_tok_s", ",.0f"), _num(r, "tpot_p50_ms", ".2f"),
                      _num(r, "goodput_rps", ".2f")]  # fmt: skip
        cells.append({True: "yes", False: "**no**", None: "-"}[ph["within"]])
        rows.append(cells)
    lines = [table(header, rows)]
    whole = ", ".join(f"{v} {s:.1f} s" for v, s in sorted(result["whole_s"].items()))
    lines.append(f"- whole run: {whole}")
    if result["whole_x"] is not None:
        met = "met" if result["whole_x"] >= WHOLE_RUN else "**short**"
        lines.append(
            f"- dynamic over the better static mode, whole run: {result['whole_x']:.3f}x ({met}: >= {WHOLE_RUN})"
        )
    if plan is not None:
        best, worst = plan["whole_run"]["best"], plan["whole_run"]["worst"]
        lines.append(
            f"- the plan predicted static ON {best['on_s']:.1f} s, static OFF {best['off_s']:.1f} s, dynamic "
            f"{best['dynamic_s']:.1f}-{worst['dynamic_s']:.1f} s "
            f"({worst['dynamic_over_better_static']:.3f}-{best['dynamic_over_better_static']:.3f}x at most)"
        )
    judged = [ph for ph in result["phases"] if ph["within"] is not None]
    short = [str(ph["phase"]) for ph in judged if not ph["within"]]
    lines.append(f"- inside each phase, dynamic within 5%: {len(judged) - len(short)}/{len(judged)} phases"
                 + (f"; short in phase {', '.join(short)}" if short else ""))  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m loadtests.bench.transition_goals",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("results", type=Path, help="client_transition's transition.csv, or its folder")
    p.add_argument("--plan", type=Path, help="transition_plan's JSON for the run: its prediction beside")
    args = p.parse_args(argv)
    try:
        rows = _read(args.results)
        plan = json.loads(args.plan.read_text()) if args.plan else None
    except OSError as e:
        print(f"transition_goals: {e}", file=sys.stderr)
        return 2
    if plan is not None and "whole_run" not in plan:
        print(f"transition_goals: {args.plan} is not a closed-loop plan (no whole_run)", file=sys.stderr)
        return 2
    print(render(verdicts(rows), plan), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
