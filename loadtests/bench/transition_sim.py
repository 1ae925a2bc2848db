"""A planned open-loop transition in the fleet simulator (`loadtests.sim`), before a GPU runs it: the
same phases of Poisson arrivals for static ON, static OFF and the config's policy (its rule, waits and
priors, run as in production), on one replica whose engine is the host's measured step times:

    python -m loadtests.bench.transition_sim --plan docs/gpu/plans/h200-transition-open.json \\
        --config deployments/examples/h200-dummy8b-tree.yaml \\
        --fit docs/gpu/h200-2026-12-04-fitted/fit/results.json

The engine: `--fit`, a `loadtests.bench.step_costs` results.json: seconds per decode step at each
measured mean batch, ON and OFF, and ON's median accept length; without it, the config's goodput
priors as lines (`on_step_base_s + on_step_per_req_s x batch`, the same for OFF) at the config's
`SGLANG_SIMULATE_ACC_LEN` (or the policy's default accept length). The batch cap is the config's
`engine.max_running_requests`. Prefill and the re-enable's draft forward are the simulator's defaults.

Per phase and variant: output tok/s (tokens finished inside the phase's window), TTFT and TPOT p50,
the share of time ON, flips; then the transition goal per phase as the GPU run will judge it: dynamic
within 5% of the better static mode, TPOT p50 in low phases, output tok/s in high ones; with `--seeds N`
the same over N seeds of the arrivals, per phase the lowest, the median and how often short. A prediction
of the policy's timing (its waits, dwell and the backlog a high phase leaves), not of the engine: the
host's run is the measurement. `--json` writes the same.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from loadtests.bench.client_transition import parse_phases
from loadtests.bench.policy_sim import PhaseMetrics, phase_metrics
from loadtests.bench.transition_goals import IN_PHASE, within
from loadtests.markdown import table
from loadtests.sim import SimConfig, SimPolicy, simulate
from loadtests.sim.model import EngineModel, StepCurve
from loadtests.sim.trace import Phase, Trace

__all__ = ["engine_model", "main", "simulate_phases", "verdicts"]

VARIANTS = {"dynamic": SimPolicy.GOODPUT, "on": SimPolicy.ALWAYS_ON, "off": SimPolicy.ALWAYS_OFF}


def engine_model(config: Any, fit: Path | None) -> EngineModel:
    """The replica's engine: the fit's measured step times, else the config's priors (see the doc)."""
    cap = config.engine.max_running_requests
    if fit is not None:
        measured = json.loads(fit.read_text())["measured"]
        curves = {
            mode: StepCurve(*zip(*sorted((r["mean_batch"], r["step_s"]) for r in rows.values()), strict=True))
            for mode, rows in measured.items()
        }
        accept = statistics.median(r["accept_length"] for r in measured["on"].values())
        return EngineModel(curves["off"], curves["on"], accept, cap)
    p = config.policy
    batches = (1.0, float(cap))
    env_accept = config.replicas.env.get("SGLANG_SIMULATE_ACC_LEN")
    return EngineModel(
        StepCurve(batches, tuple(p.off_step_base_s + p.off_step_per_req_s * b for b in batches)),
        StepCurve(batches, tuple(p.on_step_base_s + p.on_step_per_req_s * b for b in batches)),
        float(env_accept) if env_accept else p.default_accept_length,
        cap,
    )


def simulate_phases(
    phases_text: str, model: EngineModel, config: Any, input_len: int, output_len: int, seed: int = 0
) -> dict[str, list[PhaseMetrics]]:
    """Per variant, per phase: the simulator's metrics for the planned open-loop phases."""
    phases = parse_phases(phases_text, "open")
    trace = Trace(
        tuple(
            Phase(f"{i} {ph.load}", ph.prompts / float(ph.rate or 1), rate_rps=float(ph.rate or 0))
            for i, ph in enumerate(phases)
        ),
        prompt_tokens=input_len,
        out_min=output_len,
        out_max=output_len,
    )
    sim = SimConfig(replicas=1, seed=seed, policy=config.policy.to_policy_config(batch_cap=model.max_running))
    return {v: phase_metrics(simulate(trace, policy, model, sim)) for v, policy in VARIANTS.items()}


def verdicts(result: dict[str, list[PhaseMetrics]]) -> list[dict[str, Any]]:
    """Per phase: the goal's metric, dynamic over the better static mode on it (TPOT p50 as the better's
    over dynamic's: higher is better either way), and whether transition_goals would call it within."""
    out = []
    for i, dyn in enumerate(result["dynamic"]):
        on, off = result["on"][i], result["off"][i]
        load = dyn.phase.split()[-1]
        if load == "low":  # TPOT p50: lower is better
            metric, values = "tpot_p50_ms", (on.tpot_p50_s, off.tpot_p50_s, dyn.tpot_p50_s)
            ratio = min(values[:2]) / values[2]
        else:
            metric, values = "output_tok_s", (on.output_tok_s, off.output_tok_s, dyn.output_tok_s)
            ratio = values[2] / max(values[:2])
        out.append(
            {
                "phase": dyn.phase,
                "metric": metric,
                "dynamic_vs_better_static": ratio,
                "met": within(load, *values),
            }
        )
    return out


def render(result: dict[str, list[PhaseMetrics]], judged: list[dict[str, Any]]) -> str:
    header = [
        "phase",
        "variant",
        "output tok/s",
        "TTFT p50 ms",
        "TPOT p50 ms",
        "ON share",
        "flips/min",
        "unfinished",
    ]
    rows = [
        [m.phase, v, f"{m.output_tok_s:,.0f}", f"{m.ttft_p50_s * 1e3:,.0f}", f"{m.tpot_p50_s * 1e3:.2f}",
         f"{m.on_share:.0%}", f"{m.flips_per_replica_min:.1f}", str(m.unfinished)]
        for i in range(len(result["dynamic"]))
        for v, ms in result.items()
        for m in [ms[i]]
    ]  # fmt: skip
    lines = [table(header, rows), ""]
    for v in judged:
        what = "TPOT p50" if v["metric"] == "tpot_p50_ms" else "output tok/s"
        lines.append(
            f"- phase {v['phase']}: dynamic {v['dynamic_vs_better_static']:.3f}x the better static mode's "
            f"{what}: {'met' if v['met'] else 'SHORT'} (within {IN_PHASE:.0%})"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m loadtests.bench.transition_sim",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--plan", type=Path, help="transition_plan's --json of an open-loop plan")
    where.add_argument("--phases", help="open-loop phases as client_transition takes them (low:Rr@N,...)")
    p.add_argument("--config", type=Path, required=True, help="specflip config: the policy and the batch cap")
    p.add_argument(
        "--fit", type=Path, help="loadtests.bench.step_costs results.json: the engine's step times"
    )
    p.add_argument("--input-len", type=int, default=64)
    p.add_argument("--output-len", type=int, default=128)
    p.add_argument("--seed", type=int, default=0, help="the arrivals' seed (the first, with --seeds)")
    p.add_argument(
        "--seeds", type=int, default=1, help="runs with seeds --seed.. --seed+N-1: per phase the spread"
    )
    p.add_argument("--json", type=Path, help="also write the numbers here")
    args = p.parse_args(argv)
    from deployments.config import load_config

    try:
        phases = json.loads(args.plan.read_text())["phases"] if args.plan else args.phases
        config = load_config(str(args.config))
        model = engine_model(config, args.fit)
        seeds = range(args.seed, args.seed + max(args.seeds, 1))
        runs = [simulate_phases(phases, model, config, args.input_len, args.output_len, k) for k in seeds]
    except (OSError, KeyError, ValueError) as e:
        print(f"transition_sim: {e}", file=sys.stderr)
        return 2
    result = runs[0]
    print(f"phases {phases}; engine: accept {model.accept_length:.2f}, batch cap {model.max_running}")
    print(f"seed {args.seed}:")
    per_seed = [verdicts(r) for r in runs]
    print(render(result, per_seed[0]), end="")
    if len(runs) > 1:
        print(f"\nover seeds {seeds.start}-{seeds.stop - 1}, dynamic over the better static mode per phase:")
        for i, first in enumerate(per_seed[0]):
            x = [v[i]["dynamic_vs_better_static"] for v in per_seed]
            short = sum(not v[i]["met"] for v in per_seed)
            print(
                f"- phase {first['phase']} ({first['metric']}): min {min(x):.4f}, median "
                f"{statistics.median(x):.4f}, short of the goal in {short} of {len(x)}"
            )
    if args.json:
        doc = {
            "phases": phases,
            "fit": str(args.fit) if args.fit else None,
            "accept_length": model.accept_length,
            "variants": {
                v: [m.__dict__ | {"policy": m.policy.value} for m in ms] for v, ms in result.items()
            },
            "verdicts": per_seed[0],
            "seeds": {str(k): v for k, v in zip(seeds, per_seed, strict=True)},
        }
        args.json.write_text(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
