"""The fleet simulator's report (`loadtests.sim`): per-phase metrics, the markdown table, the plots, the CLI:

    python -m loadtests.bench.policy_sim --out docs/                 # the three scenarios, 8 replicas
    python -m loadtests.bench.policy_sim --out docs/ --calibration measured.csv

Writes policy_sim.md and a PNG per scenario: policy_sim.png (open-loop low->high->low, least
queue), policy_sim_steps.png (staircase through the crossover), policy_sim_sticky.png
(closed-loop users pinned to replicas, low->high->low).
matplotlib is imported only when plotting.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from loadtests.markdown import table
from loadtests.metrics import percentile
from loadtests.sim import SimConfig, SimPolicy, SimResult, simulate
from loadtests.sim.model import EngineModel, default_model, load_calibration
from loadtests.sim.trace import ClosedLoop, Phase, Trace, low_high_low, sticky_users
from policy.types import SpecMode

__all__ = ["PhaseMetrics", "main", "markdown_table", "phase_metrics", "plot", "run_all", "staircase"]


@dataclass(frozen=True)
class PhaseMetrics:
    policy: SimPolicy
    phase: str
    offered_tok_s: float
    output_tok_s: float
    ttft_p50_s: float
    ttft_p99_s: float
    tpot_p50_s: float
    tpot_p99_s: float
    flips_per_replica_min: float
    on_share: float  # mean fraction of replicas ON at the phase's ticks
    unfinished: int  # requests of the phase with no last token by the end of the run


def _pct(values: list[float], q: float) -> float:
    value = percentile(values, q)
    return float("nan") if value is None else value


def phase_metrics(result: SimResult) -> list[PhaseMetrics]:
    out = []
    for name, start, end in result.trace.bounds():
        span = end - start
        first, last = int(start / result.bin_s), int(end / result.bin_s)
        reqs = [r for r in result.records if start <= r.arrival < end]
        # a request still waiting at the end counts with the time it has waited so far (a lower bound)
        ttft = [r.ttft if r.ttft is not None else result.end_s - r.arrival for r in reqs]
        tpot = [t for t in (r.tpot for r in reqs) if t is not None]
        flips = sum(1 for t, _ in result.flips if start <= t < end)
        on = [f for t, f in result.on_fraction if start <= t < end]
        offered = sum(r.output_tokens for r in reqs) / span
        out.append(
            PhaseMetrics(
                result.policy,
                name,
                offered,
                sum(result.tokens_per_bin[first:last]) / span,
                _pct(ttft, 50),
                _pct(ttft, 99),
                _pct(tpot, 50),
                _pct(tpot, 99),
                flips / result.replicas / (span / 60),
                statistics.fmean(on) if on else float("nan"),
                sum(1 for r in reqs if r.done is None),
            )
        )
    return out


def markdown_table(metrics: list[PhaseMetrics]) -> str:
    header = [
        "phase",
        "policy",
        "offered tok/s",
        "output tok/s",
        "TTFT p50 ms",
        "TTFT p99 ms",
        "TPOT p50 ms",
        "TPOT p99 ms",
        "flips/replica/min",
        "replicas ON",
        "unfinished",
    ]
    ordered = sorted(metrics, key=lambda m: (_phase_order(metrics, m.phase), list(SimPolicy).index(m.policy)))
    rows = [
        [
            m.phase,
            m.policy.value,
            f"{m.offered_tok_s:.0f}",
            f"{m.output_tok_s:.0f}",
            f"{m.ttft_p50_s * 1e3:.0f}",
            f"{m.ttft_p99_s * 1e3:.0f}",
            f"{m.tpot_p50_s * 1e3:.2f}",
            f"{m.tpot_p99_s * 1e3:.2f}",
            f"{m.flips_per_replica_min:.2f}",
            f"{m.on_share:.0%}",
            str(m.unfinished),
        ]
        for m in ordered
    ]
    return table(header, rows, align="llrrrrrrrrr")


def _phase_order(metrics: list[PhaseMetrics], phase: str) -> int:
    return [m.phase for m in metrics].index(phase)


def run_all(trace: Trace | ClosedLoop, model: EngineModel, config: SimConfig) -> dict[SimPolicy, SimResult]:
    return {p: simulate(trace, p, model, config) for p in SimPolicy}


def staircase(replicas: int, step_s: float = 30.0) -> Trace:
    """Demand climbing and falling through the crossover (output tok/s per replica)."""
    levels = (800, 2500, 4000, 5000, 6000, 5000, 4000, 3000, 2500, 800)
    return Trace(
        tuple(
            Phase(f"{lv} tok/s/replica #{i}", step_s, rate_rps=replicas * lv / 128)
            for i, lv in enumerate(levels)
        )
    )


_STYLE: dict[SimPolicy, dict] = {
    SimPolicy.ALWAYS_ON: {"color": "tab:blue", "lw": 1.5},
    SimPolicy.ALWAYS_OFF: {"color": "tab:orange", "lw": 1.5},
    SimPolicy.THRESHOLD: {"color": "tab:green", "lw": 2.2, "ls": "--"},
    SimPolicy.GOODPUT: {"color": "tab:red", "lw": 1.6, "ls": ":"},
}


def plot(results: dict[SimPolicy, SimResult], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 1, figsize=(11, 10), sharex=True)
    any_result = next(iter(results.values()))
    window = 5.0  # seconds per point
    # closed-loop users ask as fast as they are served: an offered line only for open-loop traces
    if isinstance(any_result.trace, Trace):
        offered_t, offered = [], []
        for _, start, end in any_result.trace.bounds():
            tok = sum(r.output_tokens for r in any_result.records if start <= r.arrival < end) / (end - start)
            offered_t += [start, end]
            offered += [tok, tok]
        axes[0].plot(offered_t, offered, color="grey", lw=1, ls="-", alpha=0.6, label="offered")
    for policy, res in results.items():
        style = _STYLE[policy]
        per = max(int(window / res.bin_s), 1)
        bins = np.array(res.tokens_per_bin)
        n = len(bins) // per
        t = (np.arange(n) + 0.5) * per * res.bin_s
        axes[0].plot(
            t, bins[: n * per].reshape(n, per).sum(axis=1) / (per * res.bin_s), label=policy.value, **style
        )
        by_window: dict[int, list[float]] = {}
        for r in res.records:
            if r.done is not None and r.tpot is not None:
                by_window.setdefault(int(r.done / window), []).append(r.tpot)
        ks = sorted(by_window)
        axes[1].plot([(k + 0.5) * window for k in ks], [_pct(by_window[k], 50) * 1e3 for k in ks], **style)
        on_t, on_f = zip(*res.on_fraction, strict=True)
        axes[2].step(on_t, on_f, where="post", label=policy.value, **style)
    for _, start, _ in any_result.trace.bounds()[1:]:
        for ax in axes:
            ax.axvline(start, color="grey", lw=0.6, ls=":")
    axes[0].set_ylabel("output tok/s (fleet)")
    axes[1].set_ylabel("TPOT p50 ms (by finish)")
    axes[2].set_ylabel("replicas ON")
    axes[2].set_xlabel("seconds")
    axes[0].set_title(title)
    axes[0].legend(loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


_EVEN = (
    "Dynamic policies against the static modes (each static mode loses in one regime; with demand "
    "spread evenly a dynamic fleet is all-OFF under high load, so it can only match always-off there):"
)
_STICKY = (
    "Dynamic policies against the static modes: under high load the hot replicas run OFF and the "
    "cold ones stay ON, so the fleet serves more than either static mode; at low load every replica "
    "is below the crossover and the fleet runs like always-on:"
)


def _verdict(metrics: list[PhaseMetrics], preface: str = _EVEN) -> str:
    """One paragraph: the highest-demand phase on output tok/s, the lowest-demand phases on TPOT."""
    by = {(m.phase, m.policy): m for m in metrics}
    offered = {m.phase: m.offered_tok_s for m in metrics}
    top = max(offered, key=lambda p: offered[p])
    bottom = [p for p in offered if offered[p] <= 1.2 * min(offered.values())]
    lines = []
    for dyn in (SimPolicy.THRESHOLD, SimPolicy.GOODPUT):
        d, on, off = (by[(top, p)] for p in (dyn, SimPolicy.ALWAYS_ON, SimPolicy.ALWAYS_OFF))
        tpot = "; ".join(
            f"{p}: TPOT p50 {by[(p, dyn)].tpot_p50_s * 1e3:.2f} ms vs {by[(p, SimPolicy.ALWAYS_ON)].tpot_p50_s * 1e3:.2f} "
            f"(always-on) / {by[(p, SimPolicy.ALWAYS_OFF)].tpot_p50_s * 1e3:.2f} (always-off)"
            for p in bottom
        )
        lines.append(
            f"- **{dyn.value}**: at the highest demand ({top}) {d.output_tok_s:.0f} output tok/s vs "
            f"{on.output_tok_s:.0f} always-on ({d.output_tok_s / on.output_tok_s:.2f}x) and {off.output_tok_s:.0f} "
            f"always-off ({d.output_tok_s / off.output_tok_s:.3f}x); at the lowest ({tpot})."
        )
    return preface + "\n\n" + "\n".join(lines) + "\n\n"


def _summary(metrics: list[PhaseMetrics]) -> str:
    by = {(m.phase, m.policy): m for m in metrics}
    phases = list(dict.fromkeys(m.phase for m in metrics))
    lines = []
    for phase in phases:
        on, off = by[(phase, SimPolicy.ALWAYS_ON)], by[(phase, SimPolicy.ALWAYS_OFF)]
        for dyn in (SimPolicy.THRESHOLD, SimPolicy.GOODPUT):
            d = by[(phase, dyn)]
            lines.append(
                f"- {phase}, {dyn.value}: output tok/s {d.output_tok_s / on.output_tok_s:.2f}x always-on, "
                f"{d.output_tok_s / off.output_tok_s:.3f}x always-off; TPOT p50 {d.tpot_p50_s / on.tpot_p50_s:.2f}x "
                f"always-on, {d.tpot_p50_s / off.tpot_p50_s:.2f}x always-off"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m loadtests.bench.policy_sim", description=__doc__.splitlines()[0]
    )
    ap.add_argument("--out", type=Path, default=Path("docs"))
    ap.add_argument("--replicas", type=int, default=8)
    ap.add_argument("--phase-s", type=float, default=60.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--calibration", type=Path, help="CSV/JSON of measured (mode, batch, tok_s)")
    args = ap.parse_args(argv)
    model = load_calibration(args.calibration) if args.calibration else default_model()
    config = SimConfig(replicas=args.replicas, seed=args.seed)
    args.out.mkdir(parents=True, exist_ok=True)

    sections = []
    sticky = sticky_users(args.replicas, phase_s=args.phase_s)
    for slug, trace, title, intro, preface in (
        ("", low_high_low(args.replicas, phase_s=args.phase_s), "low -> high -> low", "", _EVEN),
        (
            "_steps",
            staircase(args.replicas, step_s=args.phase_s / 2),
            "staircase through the crossover",
            "",
            _EVEN,
        ),
        ("_sticky", sticky, "sticky users, low -> high -> low", _sticky_intro(sticky, args), _STICKY),
    ):
        started = time.perf_counter()
        results = run_all(trace, model, config)
        metrics = [m for r in results.values() for m in phase_metrics(r)]
        png = args.out / f"policy_sim{slug}.png"
        plot(results, png, f"{args.replicas} replicas, {title}")
        decisions = [d for r in results.values() for d in r.decision_s]
        sections.append(
            f"## {title}\n\n{intro}![{title}]({png.name})\n\n{_verdict(metrics, preface)}{markdown_table(metrics)}\n"
            f"{_summary(metrics)}\n\nSimulated in {time.perf_counter() - started:.1f} s; decide() median "
            f"{_pct(decisions, 50) * 1e3:.3f} ms per tick at {args.replicas} replicas.\n"
        )
        print(f"{title}: wrote {png}")
    doc = args.out / "policy_sim.md"
    doc.write_text(_header(model, config, args) + "\n" + "\n".join(sections))
    print(f"wrote {doc}")
    return 0


def _sticky_intro(trace: ClosedLoop, args: argparse.Namespace) -> str:
    pins = trace.pinning(args.replicas, args.seed) or []
    counts = {
        p.name: [sum(1 for u in range(p.users) if pins[u] == r) for r in range(args.replicas)]
        for p in trace.phases
    }
    shown = "; ".join(f"{name}: {c}" for name, c in counts.items())
    return (
        "Closed loop, as Locust runs users: each user sends a request, waits for its last token, "
        f"thinks {trace.think_s:g} s on average and sends the next, so output tok/s is what the fleet "
        "manages to serve, not a fixed demand. Each user is pinned to one replica (session affinity, e.g. "
        "a cache-aware router keeping a tenant's prefix on one replica), replica popularity falling as "
        f"1/rank: users per replica {shown}. The open-loop scenarios above spread demand evenly, where "
        "a fleet-wide static mode is already the best one can do at a given load; per-replica flips pay "
        "off when replicas sit on both sides of the crossover at once.\n\n"
    )


def _header(model: EngineModel, config: SimConfig, args: argparse.Namespace) -> str:
    src = (
        f"measured curves from `{args.calibration}`"
        if args.calibration
        else "defaults (loadtests/sim/model.py)"
    )
    p = config.policy
    return (
        "# Policy simulator: static vs dynamic speculation\n\n"
        f"Generated by `python -m loadtests.bench.policy_sim --out {args.out}` (seed {config.seed}). Engine model: {src}; "
        f"accept length {model.accept_length:g}, max running {model.max_running}, "
        f"ON/OFF decode tok/s at batch 1: {model.output_tok_s(SpecMode.ON, 1) / model.output_tok_s(SpecMode.OFF, 1):.2f}x, "
        f"at batch {model.max_running}: {model.output_tok_s(SpecMode.ON, model.max_running) / model.output_tok_s(SpecMode.OFF, model.max_running):.2f}x. "
        f"Policy: tick {p.tick_s:g} s, threshold high {p.high:g} / low {p.low:g} (running+waiting), "
        f"goodput margin {p.goodput_margin:.0%}, dwell {p.dwell_s:g} s; routing by least queue. "
        "Every replica reports each tick and applies the previous tick's decision (as with the actor).\n\n"
        "Output tok/s is what the fleet produced during the phase (a static mode that falls behind "
        "produces its backlog later); TTFT counts requests still queued at the end by their wait so far.\n"
    )


if __name__ == "__main__":
    raise SystemExit(main())
