"""Size a closed-loop fixed-work transition before it runs, from a host's measured steady rates: how many
prompts each low and high phase gets, and what static ON, static OFF and dynamic should take.

    python -m loadtests.bench.transition_plan --sweep docs/gpu/h200-2026-12-04-fitted/sweep.csv \\
        --config deployments/examples/h200-dummy8b-tree.yaml --low 2 --high 256

Rates: the median `output_tok_s` of the app's `on` and `off` variants at the low and the high level in
the given `loadtests.bench.client_sweep` results (same host, same lengths). Each phase's time in a static
mode is its tokens over that mode's rate at the phase's level. Dynamic runs each phase in its better
mode, except for the policy's reaction at the phase's start: at a low phase after a high one it stays
OFF until a wish to turn ON has held `on_persist_s` (up to `on_persist_max_s`, when the high phase's
waves left long dips: the range shown) plus a policy and a replica tick; at a high phase it stays ON
for about two ticks (turning OFF waits only `persist_s`). The first phase starts in its own mode (the
harness lets the app settle after its warm-up). Flip costs and the prefill spikes at a phase's start
are not modelled: the prediction is an upper bound on what dynamic gains.

Without `--low-prompts`/`--high-prompts` the phases are balanced: each high phase lasts `--min-phase-s`
in its faster mode, and the low phases get the work that makes static ON and static OFF take the same
whole time (where dynamic's gain over the better static mode is largest); both grow if a low phase
would be shorter than `--min-phase-s`. Prompts are whole waves (multiples of the level). Prints the
`--phases` argument of `loadtests.bench.client_transition`, the prediction per phase and variant, and
the ratio the run should show; `--json` writes the same.

`--workload open` plans the open loop instead (Poisson arrivals, each high phase `--min-phase-s` long, each
low one `--low-phase-s`): the low phases at the rate the low level's closed loop ran at ON, the high ones
halfway between ON's and OFF's capacity at the high level, so static OFF keeps up and static ON falls
behind (how far is printed). `loadtests.bench.transition_sim` runs such a plan in the fleet simulator.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from loadtests.bench import sweep_csv
from policy.types import PolicySettings

__all__ = ["Rates", "balanced", "lags", "main", "open_rates", "predict", "rates_from_sweeps", "summary"]


@dataclass(frozen=True)
class Rates:
    """Steady output tok/s of the app held ON and held OFF at the low and the high level."""

    on_low: float
    off_low: float
    on_high: float
    off_high: float


def rates_from_sweeps(paths: list[Path], low: int, high: int) -> Rates:
    """Medians over the sweeps' rows (each path a sweep.csv or a folder holding one); ValueError naming
    the paths without a sweep.csv, or every (variant, level) without a row."""
    if lost := sweep_csv.missing(paths):
        raise ValueError(f"no sweep.csv at {', '.join(lost)}")
    got: dict[tuple[str, int], list[float]] = {}
    for row in sweep_csv.read(paths):
        got.setdefault((row["variant"], int(row["concurrency"])), []).append(float(row["output_tok_s"]))
    need = [(v, c) for c in (low, high) for v in ("on", "off")]
    missing = [f"{v} at c={c}" for v, c in need if not got.get((v, c))]
    if missing:
        raise ValueError(f"no sweep row for {', '.join(missing)} in {', '.join(map(str, paths))}")
    on_low, off_low, on_high, off_high = (statistics.median(got[k]) for k in need)
    return Rates(on_low, off_low, on_high, off_high)


def lags(policy: PolicySettings, worst: bool) -> tuple[float, float]:
    """(seconds dynamic stays OFF into a low phase, seconds it stays ON into a high phase)."""
    on_wait = policy.on_persist_s
    if worst and on_wait > 0:
        on_wait = max(on_wait, policy.on_persist_max_s)
    return max(on_wait, policy.persist_s) + 2 * policy.tick_s, policy.persist_s + 2 * policy.tick_s


def predict(
    pattern: list[str], tokens: dict[str, float], rates: Rates, lag_on_s: float, lag_off_s: float
) -> list[dict[str, float | str]]:
    """Per phase: seconds in static ON, static OFF and dynamic (see the module's doc)."""
    out: list[dict[str, float | str]] = []
    mode = None  # the mode dynamic ended the last phase in: that phase's better one
    for i, load in enumerate(pattern):
        on_rate, off_rate = (
            (rates.on_low, rates.off_low) if load == "low" else (rates.on_high, rates.off_high)
        )
        work = tokens[load]
        on_s, off_s = work / on_rate, work / off_rate
        best, other = (on_rate, off_rate) if on_rate >= off_rate else (off_rate, on_rate)
        better = "on" if on_rate >= off_rate else "off"
        # the first phase starts in its own mode; a later one in the last phase's until the policy acts
        lag = 0.0 if mode in (None, better) else (lag_on_s if better == "on" else lag_off_s)
        mode = better
        lag = min(lag, work / other)  # the phase may end inside the lag
        dynamic_s = lag + (work - other * lag) / best
        out.append(
            {"phase": i, "load": load, "tokens": work, "on_s": on_s, "off_s": off_s, "dynamic_s": dynamic_s}
        )
    return out


def balanced(
    pattern: list[str], rates: Rates, min_phase_s: float, output_len: int, low_c: int, high_c: int
) -> tuple[int, int]:
    """(prompts per low phase, prompts per high phase), whole waves, as the module's doc says."""
    n_low, n_high = pattern.count("low"), pattern.count("high")
    if not n_low or not n_high:
        raise ValueError("a transition needs low and high phases")
    low_gain = 1 / rates.off_low - 1 / rates.on_low  # s per token ON saves at low load
    high_gain = 1 / rates.on_high - 1 / rates.off_high  # s per token OFF saves at high load
    if low_gain <= 0 or high_gain <= 0:
        raise ValueError(f"ON must win at the low level and OFF at the high one for dynamic to gain: {rates}")
    high_tokens = min_phase_s * max(rates.on_high, rates.off_high)
    low_tokens = n_high * high_tokens * high_gain / (n_low * low_gain)
    grow = max(1.0, min_phase_s * max(rates.on_low, rates.off_low) / low_tokens)

    def waves(tokens: float, c: int) -> int:
        return c * math.ceil(tokens * grow / output_len / c)

    return waves(low_tokens, low_c), waves(high_tokens, high_c)


def summary(rows: list[dict[str, float | str]]) -> dict[str, float]:
    total = {k: sum(float(r[k]) for r in rows) for k in ("on_s", "off_s", "dynamic_s")}
    return {**total, "dynamic_over_better_static": min(total["on_s"], total["off_s"]) / total["dynamic_s"]}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m loadtests.bench.transition_plan",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--sweep",
        type=Path,
        action="append",
        required=True,
        help="client_sweep's sweep.csv or its folder (repeatable)",
    )
    p.add_argument("--config", type=Path, required=True, help="specflip config: the policy's waits")
    p.add_argument("--workload", choices=["closed", "open"], default="closed", help="as client_transition's")
    p.add_argument("--low", type=int, default=2, help="concurrency of the low phases (2)")
    p.add_argument("--high", type=int, default=256, help="concurrency of the high phases (256)")
    p.add_argument("--pattern", default="low,high,low,high,low", help="the phases in order")
    p.add_argument("--min-phase-s", type=float, default=20.0, help="shortest phase, in its faster mode (20)")
    p.add_argument(
        "--low-phase-s",
        type=float,
        default=40.0,
        help="open loop: seconds of arrivals in each low phase (40; the high ones last --min-phase-s): "
        "dynamic's wait to turn ON after a high phase is a fixed cost per transition, ~4.5 s with the "
        "shipped policy, which loadtests.bench.transition_sim puts at 0.95-1.0x static ON's TPOT p50 "
        "over a 20-s low phase and 0.98-1.0x over a 40-s one",
    )
    p.add_argument("--output-len", type=int, default=128, help="tokens per request, as the sweep's (128)")
    p.add_argument(
        "--low-prompts", type=int, help="predict this design instead of balancing (with --high-prompts)"
    )
    p.add_argument("--high-prompts", type=int)
    p.add_argument("--json", type=Path, help="also write the plan and the prediction here")
    return p


def open_rates(rates: Rates, output_len: int) -> tuple[float, float]:
    """(requests/s of the low phases, of the high ones) for the open loop: low, the rate the low level's
    closed loop ran at ON; high, halfway between ON's and OFF's capacity at the high level, so OFF keeps
    up and ON falls behind."""
    if rates.on_high >= rates.off_high:
        raise ValueError(f"OFF must outrun ON at the high level for the open loop's high rate: {rates}")
    return round(rates.on_low / output_len, 2), round((rates.on_high + rates.off_high) / 2 / output_len, 2)


def _closed(args: argparse.Namespace, pattern: list[str], rates: Rates, policy: PolicySettings) -> dict:
    given = args.low_prompts is not None
    low_n, high_n = (
        (args.low_prompts, args.high_prompts)
        if given
        else balanced(pattern, rates, args.min_phase_s, args.output_len, args.low, args.high)
    )
    tokens = {"low": float(low_n * args.output_len), "high": float(high_n * args.output_len)}
    sizes = {"low": (args.low, low_n), "high": (args.high, high_n)}
    phases = ",".join(f"{ph}:{sizes[ph][0]}x{sizes[ph][1]}" for ph in pattern)
    plans = {
        case: predict(pattern, tokens, rates, *lags(policy, worst=case == "worst"))
        for case in ("best", "worst")
    }
    print(f"--phases {phases}")
    print(f"rates (tok/s): {asdict(rates)}")
    print(
        "| phase | load | prompts | static ON s | static OFF s | dynamic s (on_persist_s .. on_persist_max_s) |"
    )
    print("|---:|---|---:|---:|---:|---|")
    for b, w in zip(plans["best"], plans["worst"], strict=True):
        print(
            f"| {b['phase']} | {b['load']} | {sizes[str(b['load'])][1]} | {b['on_s']:.1f} | {b['off_s']:.1f} "
            f"| {b['dynamic_s']:.1f} .. {w['dynamic_s']:.1f} |"
        )
    best, worst = summary(plans["best"]), summary(plans["worst"])
    print(
        f"whole run: static ON {best['on_s']:.0f} s, static OFF {best['off_s']:.0f} s, dynamic "
        f"{best['dynamic_s']:.0f}-{worst['dynamic_s']:.0f} s: dynamic over the better static mode "
        f"{worst['dynamic_over_better_static']:.2f}-{best['dynamic_over_better_static']:.2f}x at most"
    )
    return {
        "phases": phases,
        "balanced": not given,
        "prediction": plans,
        "whole_run": {"best": best, "worst": worst},
    }


def _open(args: argparse.Namespace, pattern: list[str], rates: Rates) -> dict:
    low_rps, high_rps = open_rates(rates, args.output_len)
    rps = {"low": low_rps, "high": high_rps}
    seconds = {"low": args.low_phase_s, "high": args.min_phase_s}
    prompts = {load: math.ceil(r * seconds[load]) for load, r in rps.items()}
    phases = ",".join(f"{ph}:{rps[ph]:g}r@{prompts[ph]}" for ph in pattern)
    capacity = {"low": (rates.on_low, rates.off_low), "high": (rates.on_high, rates.off_high)}
    print(f"--phases {phases}")
    print(f"rates (tok/s): {asdict(rates)}")
    print(
        f"| load | requests/s | prompts | offered tok/s | ON tok/s, closed loop at c={args.low} / c={args.high} | OFF tok/s, same |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    rows = []
    for load in ("low", "high"):
        offered = rps[load] * args.output_len
        on_cap, off_cap = capacity[load]
        rows.append({"load": load, "rps": rps[load], "prompts": prompts[load], "offered_tok_s": offered})
        print(
            f"| {load} | {rps[load]:g} | {prompts[load]} | {offered:,.0f} | {on_cap:,.0f} | {off_cap:,.0f} |"
        )
    behind = (high_rps * args.output_len - rates.on_high) * args.min_phase_s / args.output_len
    print(
        f"low: about {args.low} requests in flight at ON (the rate its closed loop ran at); high: held ON, a "
        f"phase ends ~{behind:.0f} requests behind, OFF keeps up"
    )
    return {"phases": phases, "open_loop": rows}


def main(argv: list[str] | None = None) -> int:
    from deployments.config import load_config

    args = build_parser().parse_args(argv)
    pattern = [x.strip() for x in args.pattern.split(",") if x.strip()]
    try:
        if set(pattern) - {"low", "high"}:
            raise ValueError(f"--pattern {args.pattern}: phases are low or high")
        if (args.low_prompts is None) != (args.high_prompts is None):
            raise ValueError("--low-prompts and --high-prompts go together")
        if args.workload == "open" and args.low_prompts is not None:
            raise ValueError("--low-prompts/--high-prompts size a closed loop only")
        rates = rates_from_sweeps(args.sweep, args.low, args.high)
        if args.workload == "closed":
            doc = _closed(args, pattern, rates, load_config(str(args.config)).policy)
        else:
            doc = _open(args, pattern, rates)
    except ValueError as e:
        print(f"transition_plan: {e}", file=sys.stderr)
        return 2
    if args.json:
        doc = {
            "workload": args.workload,
            **doc,
            "rates": asdict(rates),
            "sweeps": [str(p) for p in args.sweep],
        }
        args.json.write_text(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
