"""Side by side: the runs of several `client_sweep` results (one host, e.g. HEAD / an older app / a
setting changed), per variant and level, as median [min-max] over the repeats and each one's median
over the first's:

    python -m loadtests.bench.sweep_compare docs/gpu/h100-2026-12-06/sweep.csv \\
        docs/gpu/h100-2026-12-06/before-sweep.csv --names HEAD,before

Each argument is a sweep.csv or a folder holding one. A metric a results file lacks (an older sweep
wrote fewer columns) shows as "-". Prints markdown; `--json` also writes the numbers.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from loadtests.bench import sweep_csv
from loadtests.markdown import table

__all__ = ["METRICS", "compare", "main", "render"]

# sweep.csv columns, in the order the tables show them
METRICS = (
    "output_tok_s", "engine_tok_s", "ttft_p50_ms", "tpot_p50_ms", "chunk_itl_p50_ms", "chunk_itl_p99_ms",
    "sampled_running", "idle_fraction", "refill_s", "front_cpu_us_per_token", "haproxy_cpu_cores",
    "client_cpu_cores", "engine_flips",
)  # fmt: skip

Key = tuple[str, int]  # (variant, concurrency)
Spread = dict[str, float]  # median, min, max, n


def _spread(values: list[float]) -> Spread | None:
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def compare(
    paths: list[Path], metrics: tuple[str, ...] = METRICS
) -> dict[Key, list[dict[str, Spread | None]]]:
    """Per (variant, concurrency) of the first results, per results file in order, per metric: the
    spread over its repeats (None where that file has no such runs or no such column)."""
    tables = [sweep_csv.read([p]) for p in paths]
    keys = list(dict.fromkeys((r["variant"], int(r["concurrency"])) for r in tables[0]))
    out: dict[Key, list[dict[str, Spread | None]]] = {}
    for variant, c in keys:
        per_file = []
        for rows in tables:
            runs = [r for r in rows if r["variant"] == variant and int(r["concurrency"]) == c]
            per_file.append(
                {m: _spread([float(r[m]) for r in runs if r.get(m) not in (None, "")]) for m in metrics}
            )
        out[(variant, c)] = per_file
    return out


def _cell(s: Spread | None) -> str:
    if s is None:
        return "-"
    if s["n"] == 1:
        return f"{s['median']:,.4g}"
    return f"{s['median']:,.4g} [{s['min']:,.4g}-{s['max']:,.4g}]"


def _ratio(s: Spread | None, first: Spread | None) -> str:
    if s is None or first is None or first["median"] == 0:
        return "-"
    return f"{s['median'] / first['median']:.2f}"


def render(result: dict[Key, list[dict[str, Spread | None]]], names: list[str]) -> str:
    """One table per variant and level: a row per metric, a column per results file (median [min-max]
    over its repeats) and, for every file after the first, its median over the first's."""
    lines: list[str] = []
    for (variant, c), per_file in result.items():
        n = max((s["n"] for f in per_file for s in f.values() if s is not None), default=0)
        lines += [f"### {variant}, c={c} (up to {n:.0f} runs each)", ""]
        header = ["metric", *names, *(f"{name} / {names[0]}" for name in names[1:])]
        rows = [
            [m, *(_cell(f[m]) for f in per_file), *(_ratio(f[m], per_file[0][m]) for f in per_file[1:])]
            for m in per_file[0]
        ]
        lines.append(table(header, rows))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m loadtests.bench.sweep_compare",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "results", nargs="+", type=Path, help="sweep.csv files or folders holding one; the first is the base"
    )
    p.add_argument("--names", help="comma list, one per results file (default: the files' folder names)")
    p.add_argument("--metrics", default=",".join(METRICS), help="sweep.csv columns to show, in order")
    p.add_argument("--json", type=Path, help="also write the numbers here")
    args = p.parse_args(argv)
    names = (
        args.names.split(",") if args.names else [(r if r.is_dir() else r.parent).name for r in args.results]
    )
    if len(names) != len(args.results):
        print(f"sweep_compare: {len(names)} names for {len(args.results)} results", file=sys.stderr)
        return 2
    missing = sweep_csv.missing(args.results)
    if missing:
        print(f"sweep_compare: no sweep.csv at {missing}", file=sys.stderr)
        return 2
    result = compare(args.results, tuple(m for m in args.metrics.split(",") if m))
    print(render(result, names))
    if args.json:
        doc = [
            {"variant": v, "concurrency": c, "results": dict(zip(names, f, strict=True))}
            for (v, c), f in result.items()
        ]
        args.json.write_text(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
