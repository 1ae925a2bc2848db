"""The steady-load goals, read from `client_sweep` results: per draft shape and level, each variant's output
tok/s as median [min-max] over its repeats, and the ratios the goals are set on, medians over medians:

    python -m loadtests.bench.sweep_goals docs/gpu/h100-2026-12-06d docs/gpu/h100-2026-12-07d

- dynamic over the better static mode (max of `on`, `off`): >= 0.97x at every level;
- dynamic over SGLang's adaptive mode (`sglang_adaptive`, the chain shape): >= 1.0x;
- app ON over SGLang's EAGLE-3 server (`raw_eagle`) and app OFF over its plain server (`raw_plain`):
  >= 0.95x at every level from c=16;
- flips after the first decision per minute in each dynamic run (`flips` less one, over the run's
  minutes), judged only in runs of at least a minute: <= 1.

Every argument is a sweep.csv or a folder holding one; rows of several files pool, one table per value of
the `host` column where rows carry one (runs merged from two hosts; `--pool-hosts` pools them, e.g. two
leases of the same kind of host); files without it are taken as one host's, so give one host's files per
call: the ratios mix nothing else. A goal whose variants did not run at a level shows "-" there, and the
summary names the levels each goal was met at, fell short at, and was not measured at.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from loadtests.bench import sweep_csv
from loadtests.markdown import table

__all__ = ["GOALS", "goals", "main"]

# name -> (numerator variant, denominator variants (their best median), bound, lowest level judged)
GOALS: dict[str, tuple[str, tuple[str, ...], float, int]] = {
    "dynamic / better static": ("dynamic", ("on", "off"), 0.97, 1),
    "dynamic / sglang_adaptive": ("dynamic", ("sglang_adaptive",), 1.0, 1),
    "app ON / raw_eagle": ("on", ("raw_eagle",), 0.95, 16),
    "app OFF / raw_plain": ("off", ("raw_plain",), 0.95, 16),
}
VARIANTS = ("on", "off", "dynamic", "raw_eagle", "raw_plain", "sglang_adaptive")


def goals(rows: list[dict[str, str]]) -> dict[tuple[str, int], dict]:
    """Per (shape, concurrency): `tok_s` {variant: [values]}, `ratios` {goal: value or None}, and
    `flips_per_min` (the worst dynamic run of >= 60 s, flips after its first over its minutes)."""
    out: dict[tuple[str, int], dict] = {}
    for r in rows:
        cell = out.setdefault((r.get("shape", ""), int(r["concurrency"])), {"tok_s": {}, "long_runs": []})
        cell["tok_s"].setdefault(r["variant"], []).append(float(r["output_tok_s"]))
        duration = float(r.get("duration_s") or 0)
        if r["variant"] == "dynamic" and duration >= 60 and r.get("flips") not in (None, ""):
            cell["long_runs"].append(max(int(r["flips"]) - 1, 0) / (duration / 60))
    for (_, c), cell in out.items():
        med = {v: statistics.median(x) for v, x in cell["tok_s"].items()}
        cell["ratios"] = {}
        for name, (num, dens, _, lowest) in GOALS.items():
            have = [med[d] for d in dens if d in med]
            ok = num in med and len(have) == len(dens) and c >= lowest
            cell["ratios"][name] = med[num] / max(have) if ok else None
        cell["flips_per_min"] = max(cell["long_runs"]) if cell["long_runs"] else None
    return dict(sorted(out.items()))


def _cell(values: list[float] | None) -> str:
    if not values:
        return "-"
    m = statistics.median(values)
    return (
        f"{m:,.0f}"
        if len(values) == 1
        else f"{m:,.0f} [{min(values):,.0f}-{max(values):,.0f}] (n={len(values)})"
    )


def render(result: dict[tuple[str, int], dict]) -> str:
    header = ["shape", "c", *VARIANTS, *GOALS, "flips/min after the first (runs >= 60 s)"]
    rows = []
    for (shape, c), cell in result.items():
        ratios = [f"{x:.3f}" if x is not None else "-" for x in cell["ratios"].values()]
        fpm = cell["flips_per_min"]
        rows.append(
            [
                shape,
                c,
                *(_cell(cell["tok_s"].get(v)) for v in VARIANTS),
                *ratios,
                "-" if fpm is None else f"{fpm:.2f}",
            ]
        )
    lines = ["Output tok/s, median [min-max] over the repeats; ratios of medians.", "", table(header, rows)]
    for name, (_, _, bound, _) in GOALS.items():
        judged = [(k, cell["ratios"][name]) for k, cell in result.items() if cell["ratios"][name] is not None]
        met = [f"{s} c={c}" for (s, c), x in judged if x >= bound]
        short = [f"{s} c={c} ({x:.3f})" for (s, c), x in judged if x < bound]
        verdict = f"met at {', '.join(met) or 'none'}; short at {', '.join(short) or 'none'}"
        lines.append(f"- {name} >= {bound}: {verdict if judged else 'not measured'}")
    long = [(k, cell["flips_per_min"]) for k, cell in result.items() if cell["flips_per_min"] is not None]
    over = [f"{s} c={c} ({x:.2f})" for (s, c), x in long if x > 1]
    lines.append(
        f"- at most 1 flip per minute after the first decision: judged at {len(long)} level(s) "
        f"with dynamic runs of >= 60 s; over it at {', '.join(over) or 'none'}"
    )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m loadtests.bench.sweep_goals",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("results", nargs="+", type=Path, help="sweep.csv files or folders holding one")
    p.add_argument("--pool-hosts", action="store_true", help="one table over every host's rows")
    args = p.parse_args(argv)
    missing = sweep_csv.missing(args.results)
    if missing:
        print(f"sweep_goals: no sweep.csv at {', '.join(missing)}", file=sys.stderr)
        return 2
    rows = sweep_csv.read(args.results)
    hosts = {"": rows} if args.pool_hosts else sweep_csv.by_host(rows)
    if len(hosts) == 1:
        print(render(goals(next(iter(hosts.values())))), end="")
    else:
        print(
            "\n".join(f"### host {h or '(none named)'}\n\n{render(goals(r))}" for h, r in hosts.items()),
            end="",
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
