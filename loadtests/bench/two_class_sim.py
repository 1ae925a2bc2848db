"""Simulator: two request classes on one fleet, with and without class routing.

    python -m loadtests.bench.two_class_sim                     # writes the "## two-class simulation" section
    python -m loadtests.bench.two_class_sim --replicas 8 --duration 40 --out docs/benchmarks.md

Interactive: Poisson at a low rate, tight SLO (TTFT and TPOT). Batch: a Poisson flood at a share
of the fleet's OFF capacity (more than the fleet can do ON). Setups: always-ON, always-OFF,
dynamic without class routing (goodput rule, least-queue routing), dynamic with class routing
(`policy.routing.rank` as deployments.routing.router runs it; goodput rule, and the MIXED rule). The
engine model is the simulator's default (H200 Llama-3.1-8B shapes, accept length 3, simulated).
Metrics per class and the goodput are those of docs/routing.md, defined there before any run.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path

from loadtests.markdown import table, write_section
from loadtests.metrics import percentile
from loadtests.sim import SimConfig, SimPolicy, simulate
from loadtests.sim.model import default_model
from loadtests.sim.sources import SimRequest
from loadtests.sim.trace import Phase, Trace, TwoClassTrace
from policy.routing import RoutingConfig
from policy.types import PolicyConfig, Rule, SpecMode

__all__ = ["Outcome", "main", "run_setups"]


@dataclass(frozen=True)
class Outcome:
    setup: str
    interactive_tpot_p50_ms: float
    interactive_ttft_p50_ms: float
    interactive_attainment: float  # share of interactive requests within both SLOs
    interactive_in_slo_req_s: float
    batch_tok_s: float
    total_tok_s: float
    combined: float  # docs/routing.md: mean of the two normalized goodputs (batch vs always-OFF)


def _outcome(
    setup: str, records: tuple[SimRequest, ...], window: float, ttft_slo: float, tpot_slo: float
) -> tuple[str, dict[str, float]]:
    inter = [q for q in records if q.interactive and q.arrival < window]
    batch = [q for q in records if not q.interactive and q.arrival < window]
    done_i = [q for q in inter if q.done is not None]
    within = [q for q in done_i if (q.ttft or 0) <= ttft_slo and (q.tpot or 0) <= tpot_slo]
    tok = lambda qs: sum(q.output_tokens for q in qs if q.done is not None and q.done <= window)  # noqa: E731
    return setup, {
        "tpot": (percentile([q.tpot for q in done_i if q.tpot is not None], 50) or 0) * 1e3,
        "ttft": (percentile([q.ttft for q in done_i if q.ttft is not None], 50) or 0) * 1e3,
        "attain": len(within) / max(len(inter), 1),
        "in_slo_rps": len(within) / window,
        "batch_tok_s": tok(batch) / window,
        "total_tok_s": (tok(batch) + tok(inter)) / window,
    }


def run_setups(
    replicas: int, duration: float, batch_share: float, interactive_rps: float, seed: int = 0
) -> tuple[list[Outcome], dict[str, float]]:
    model = default_model(accept_length=3.0, max_running=64)
    mean_out = 128.0
    off_capacity_rps = replicas * model.output_tok_s(SpecMode.OFF, model.max_running) / mean_out
    batch_rps = batch_share * off_capacity_rps
    trace = TwoClassTrace(
        interactive=Trace(
            (Phase("run", duration, rate_rps=interactive_rps),), prompt_tokens=128, out_min=64, out_max=192
        ),
        batch=Trace(
            (Phase("run", duration, rate_rps=batch_rps),), prompt_tokens=128, out_min=64, out_max=192
        ),
    )
    # tight interactive SLO: TPOT only speculation at a small batch meets; TTFT 1 s
    ttft_slo, tpot_slo = 1.0, 4.0e-3
    policy = PolicyConfig(dwell_s=2.0, tick_s=0.5, high=32, low=12, min_on_replicas=0, batch_cap=64)
    routed = RoutingConfig(stale_after_s=5.0, max_imbalance=48, per_rank=2)
    setups = [
        ("always-ON", SimPolicy.ALWAYS_ON, False),
        ("always-OFF", SimPolicy.ALWAYS_OFF, False),
        ("dynamic (goodput), least queue", SimPolicy.GOODPUT, False),
        ("dynamic (goodput) + class routing", SimPolicy.GOODPUT, True),
        ("dynamic (mixed) + class routing", SimPolicy.THRESHOLD, True),
    ]
    raw = []
    for name, sim_policy, class_routing in setups:
        mixed = name.startswith("dynamic (mixed)")
        cfg = SimConfig(
            threshold_rule=Rule.MIXED if mixed else None,
            replicas=replicas,
            seed=seed,
            drain_s=10.0,
            policy=policy,
            class_routing=class_routing,
            routing=routed,
        )
        result = simulate(trace, sim_policy, model, cfg)
        raw.append(_outcome(name, result.records, duration, ttft_slo, tpot_slo))
    off = next(m for n, m in raw if n == "always-OFF")
    outcomes = [
        Outcome(
            n, m["tpot"], m["ttft"], m["attain"], m["in_slo_rps"], m["batch_tok_s"], m["total_tok_s"],
            0.5 * m["in_slo_rps"] / interactive_rps + 0.5 * m["batch_tok_s"] / max(off["batch_tok_s"], 1e-9),
        )
        for n, m in raw
    ]  # fmt: skip
    params = {
        "batch_rps": batch_rps,
        "off_capacity_rps": off_capacity_rps,
        "ttft_slo_ms": ttft_slo * 1e3,
        "tpot_slo_ms": tpot_slo * 1e3,
    }
    return outcomes, params


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--replicas", type=int, default=8)
    p.add_argument("--duration", type=float, default=40.0)
    p.add_argument(
        "--batch-share", type=float, default=0.6, help="batch rate as a share of the fleet's OFF capacity"
    )
    p.add_argument("--interactive-rps", type=float, default=10.0)
    p.add_argument("--out", default="docs/benchmarks.md")
    args = p.parse_args(argv)
    outcomes, params = run_setups(args.replicas, args.duration, args.batch_share, args.interactive_rps)
    on = next(o for o in outcomes if o.setup == "always-ON")
    off = next(o for o in outcomes if o.setup == "always-OFF")
    best_static = max(on.combined, off.combined)
    rows = [
        [
            o.setup, f"{o.interactive_tpot_p50_ms:.2f}", f"{o.interactive_tpot_p50_ms / on.interactive_tpot_p50_ms:.2f}",
            f"{o.interactive_ttft_p50_ms:.0f}", f"{100 * o.interactive_attainment:.0f}", f"{o.interactive_in_slo_req_s:.2f}",
            f"{o.batch_tok_s:.0f}", f"{o.total_tok_s:.0f}", f"{o.total_tok_s / off.total_tok_s:.2f}",
            f"{o.combined:.3f}", f"{o.combined / best_static:.2f}",
        ]
        for o in outcomes
    ]  # fmt: skip
    cmd = (
        f"python -m loadtests.bench.two_class_sim --replicas {args.replicas} --duration {args.duration:g} "
        f"--batch-share {args.batch_share:g} --interactive-rps {args.interactive_rps:g}"
    )
    body = (
        "## two-class simulation\n\n"
        f"Written by `{cmd}` on {time.strftime('%Y-%m-%d %H:%M')}. Simulator (`loadtests.sim`), {args.replicas} "
        "replicas, engine model: H200 Llama-3.1-8B shapes at accept length 3 (simulated acceptance), "
        f"max batch 64. Interactive: Poisson {args.interactive_rps:g} req/s; batch: Poisson "
        f"{params['batch_rps']:.0f} req/s ({args.batch_share:g} x the fleet's OFF capacity of "
        f"{params['off_capacity_rps']:.0f} req/s); 128-token prompts, 64-192 output tokens; "
        f"{args.duration:g} s. Interactive SLO: TTFT <= {params['ttft_slo_ms']:.0f} ms and TPOT <= "
        f"{params['tpot_slo_ms']:g} ms. Class routing: max_imbalance 48. Goodput and the combined score "
        "as defined in docs/routing.md (combined: mean of interactive in-SLO req/s / offered and batch "
        "tok/s / always-OFF's). Goals: TPOT p50 <= 1.1x always-ON, total tok/s >= 0.97x "
        "always-OFF, combined >= 1.10x the best static mode.\n\n"
        + table(
            ["setup", "inter. TPOT p50 ms", "x ON", "inter. TTFT p50 ms", "inter. in SLO %", "inter. in-SLO req/s",
             "batch tok/s", "total tok/s", "x OFF", "combined", "x best static"],
            rows,
            "lrrrrrrrrrr",
        )
    )  # fmt: skip
    write_section(Path(args.out), body)
    print(body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
