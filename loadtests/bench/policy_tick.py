"""Benchmark: how long one policy tick (`rules.decide` over the whole fleet) takes at 1000 replicas.

    python -m loadtests.bench.policy_tick                      # writes the "## policy" section of docs/benchmarks.md
    python -m loadtests.bench.policy_tick --replicas 1000 --ticks 300 --out docs/benchmarks.md --no-sim

Two measurements per rule:
1. fleet model: `ticks` consecutive ticks over a synthetic fleet whose replicas follow a
   low->high->low demand (each with its own noise), sit at the batch their mode needs for
   that demand (queueing when it cannot keep up), report the engine model's tok/s, and
   apply the previous tick's decision. decide() only is timed, wall clock and thread CPU.
2. simulator: the discrete-event simulator (`loadtests.sim`) at the same fleet size on a short
   low (8 s) -> high (4 s) -> low (8 s) trace; decide() time per tick as the simulator
   records it. Few ticks, three of them special (registration of every replica, the whole
   fleet flipping OFF, then ON), in a process that also holds the simulator's heap.
Wall time on a shared machine includes time the process waits for a core; the CPU column
and the load average say how much of that there was. Pure: no ray.
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import random
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

from loadtests.markdown import table, write_section
from loadtests.metrics import percentile
from loadtests.sim import SimConfig, SimPolicy, simulate
from loadtests.sim.model import EngineModel, default_model
from loadtests.sim.trace import low_high_low
from policy.rules import decide
from policy.state import PolicyState
from policy.types import Observation, PolicyConfig, Rule, SpecMode

__all__ = ["Timing", "bench_fleet_model", "bench_simulator", "main"]

TARGET_S = 5e-3
_LEVELS = (800.0, 6000.0, 800.0)  # output tok/s per replica in the three thirds of the run


@dataclass(frozen=True)
class Timing:
    context: str
    rule: Rule
    replicas: int
    ticks: int
    wall_s: tuple[float, ...]
    cpu_s: tuple[float, ...]
    flips: int

    def median_wall(self) -> float:
        return percentile(self.wall_s, 50) or 0.0

    def p90_wall(self) -> float:
        return percentile(self.wall_s, 90) or 0.0

    def median_cpu(self) -> float | None:
        return percentile(self.cpu_s, 50)


@functools.lru_cache(maxsize=65536)
def _batch_for(model: EngineModel, mode: SpecMode, demand_tok_s: float) -> float | None:
    """The batch at which this mode produces `demand_tok_s` (None: more than it can at max_running)."""
    if model.output_tok_s(mode, model.max_running) < demand_tok_s:
        return None
    lo, hi = 0.0, float(model.max_running)
    for _ in range(30):
        mid = (lo + hi) / 2
        if model.output_tok_s(mode, max(mid, 1e-9)) < demand_tok_s:
            lo = mid
        else:
            hi = mid
    return hi


def bench_fleet_model(rule: Rule, replicas: int, ticks: int, seed: int = 0) -> Timing:
    model = default_model()
    config = PolicyConfig(rule=rule, batch_cap=model.max_running)
    rng = random.Random(seed)
    noise = [rng.uniform(0.7, 1.3) for _ in range(replicas)]
    modes = [SpecMode.ON] * replicas
    backlog = [0.0] * replicas  # queued requests
    ids = [f"replica-{i:04d}" for i in range(replicas)]
    state = PolicyState()
    wall, cpu, flips = [], [], 0
    for tick in range(ticks):
        now = float(tick)
        level = _LEVELS[min(3 * tick // ticks, 2)]
        batch_obs = []
        for i in range(replicas):
            demand = level * noise[i] * rng.uniform(0.9, 1.1)
            b = _batch_for(model, modes[i], round(demand, -1))  # cached per 10 tok/s
            if b is None:  # cannot keep up: full batch, queue grows by the shortfall (128-token requests)
                running = model.max_running
                backlog[i] += (demand - model.output_tok_s(modes[i], running)) / 128
            else:
                running = max(0, round(b + rng.gauss(0, max(b, 1) ** 0.5)))
                backlog[i] = max(
                    0.0, backlog[i] - (model.output_tok_s(modes[i], model.max_running) - demand) / 128
                )
            tok_s = model.output_tok_s(modes[i], running) if running else None
            accept = model.accept_length if modes[i] is SpecMode.ON else None
            batch_obs.append(
                Observation(
                    ids[i], running, int(backlog[i]), modes[i], True, accept, tok_s, now, float(running)
                )
            )
        w0, c0 = time.perf_counter(), time.thread_time()
        actions, state = decide(batch_obs, state, config, now)
        cpu.append(time.thread_time() - c0)
        wall.append(time.perf_counter() - w0)
        flips += len(actions)
        modes = [SpecMode.ON if on else SpecMode.OFF for on in state.desired_on.tolist()]  # applied next tick
    return Timing("fleet model", rule, replicas, ticks, tuple(wall), tuple(cpu), flips)


def bench_simulator(rule: Rule, replicas: int, phase_s: float, seed: int = 0) -> Timing:
    policy = SimPolicy.THRESHOLD if rule is Rule.THRESHOLD else SimPolicy.GOODPUT
    shape = low_high_low(replicas, phase_s=phase_s)  # low phases twice as long: more steady ticks
    low, high, again = shape.phases
    trace = replace(
        shape, phases=(replace(low, duration_s=2 * phase_s), high, replace(again, duration_s=2 * phase_s))
    )
    res = simulate(trace, policy, config=SimConfig(replicas=replicas, seed=seed, drain_s=1.0))
    return Timing(
        "simulator", rule, replicas, len(res.decision_s), res.decision_s, res.decision_cpu_s, len(res.flips)
    )


def _ms(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 1e3:.2f}"


def _render(timings: list[Timing], load_before: str, load_after: str, cmd: str) -> str:
    header = ["context", "rule", "replicas", "ticks", "median ms", "p90 ms", "median CPU ms", "flips"]
    rows = [
        [
            t.context,
            t.rule.value,
            t.replicas,
            t.ticks,
            _ms(t.median_wall()),
            _ms(t.p90_wall()),
            _ms(t.median_cpu()),
            t.flips,
            "yes" if t.median_wall() < TARGET_S else "NO",
        ]
        for t in timings
    ]
    return (
        "## policy\n\n"
        f"`rules.decide` over the whole fleet, one call per tick (target: median < {TARGET_S * 1e3:g} ms at 1000 "
        f"replicas). Written by `{cmd}` on {time.strftime('%Y-%m-%d %H:%M')} "
        f"({platform.python_implementation()} {platform.python_version()}, {os.cpu_count()} CPUs, "
        f"load average {load_before} before / {load_after} after; other jobs share this machine). "
        "Fleet model: synthetic replicas on a low->high->low demand; simulator: `loadtests.sim` at that fleet size "
        "(few ticks). CPU = thread CPU time of the call.\n\n"
        + table([*header, f"median < {TARGET_S * 1e3:g} ms"], rows, align="llrrrrrrl")
    )


def _loadavg() -> str:
    try:
        return " ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m loadtests.bench.policy_tick", description=__doc__.splitlines()[0]
    )
    ap.add_argument("--replicas", type=int, default=1000)
    ap.add_argument("--ticks", type=int, default=300)
    ap.add_argument(
        "--sim-phase-s", type=float, default=4.0, help="high phase; the low ones are twice as long"
    )
    ap.add_argument("--no-sim", action="store_true", help="skip the (slower) simulator measurement")
    ap.add_argument("--out", type=Path, default=Path("docs/benchmarks.md"))
    args = ap.parse_args(argv)
    before = _loadavg()
    rules = (Rule.THRESHOLD, Rule.GOODPUT)  # hold never decides anything worth timing
    timings = [bench_fleet_model(rule, args.replicas, args.ticks) for rule in rules]
    if not args.no_sim:
        timings += [bench_simulator(rule, args.replicas, args.sim_phase_s) for rule in rules]
    for t in timings:
        print(
            f"{t.context:12s} {t.rule.value:10s} {t.replicas} replicas, {t.ticks} ticks: median {_ms(t.median_wall())} ms "
            f"(p90 {_ms(t.p90_wall())}, CPU {_ms(t.median_cpu())}), flips {t.flips}"
        )
    cmd = "python -m loadtests.bench.policy_tick " + " ".join(sys.argv[1:] if argv is None else argv)
    write_section(args.out, _render(timings, before, _loadavg(), cmd.strip()))
    print(f"wrote the policy section of {args.out}")
    return 0 if all(t.median_wall() < TARGET_S for t in timings if t.replicas >= 1000) else 1


if __name__ == "__main__":
    raise SystemExit(main())
