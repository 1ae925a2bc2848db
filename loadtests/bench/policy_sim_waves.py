"""The simulator report's lockstep section: a benchmark client's waves at a steady load, the policy
with `on_persist_s` 0 (every decision acted on at once, as before it existed) against the defaults.

SGLang's bench_serving at `--max-concurrency c --random-range-ratio 1` sends c requests of one
length; they finish together and the next c come a moment later, so between two waves a replica's
load dips to ~0 for a fraction of a second. A rule that reads that dip as low load turns
speculation ON, the next wave runs ON at batch c, and only `dwell_s` later can it go OFF again.
Run by `python -m loadtests.bench.policy_sim` (its last section); tested in tests/loadtests/sim.
"""

from __future__ import annotations

from dataclasses import dataclass

from loadtests.markdown import table
from loadtests.sim import SimConfig, SimPolicy, SimResult, default_model, lockstep, simulate
from loadtests.sim.model import EngineModel
from policy.types import PolicyConfig

__all__ = ["SETTINGS", "WaveRun", "flips_after_first_per_min", "lockstep_runs", "lockstep_section"]

# (label, policy config): the defaults, and the same with ON acted on at once (main before on_persist_s)
SETTINGS: tuple[tuple[str, PolicyConfig], ...] = (
    ("on_persist_s 0 (before)", PolicyConfig(on_persist_s=0.0)),
    (f"defaults (on_persist_s {PolicyConfig().on_persist_s:g})", PolicyConfig()),
)
_DYNAMIC = (SimPolicy.THRESHOLD, SimPolicy.GOODPUT)


@dataclass(frozen=True)
class WaveRun:
    """One dynamic policy on one lockstep trace, against the better static mode on the same trace."""

    users: int
    setting: str
    policy: SimPolicy
    output_tok_s: float
    best_static_tok_s: float
    best_static: SimPolicy
    flips_after_first_per_min: float  # per replica, during the steady phase
    on_share: float

    @property
    def vs_best_static(self) -> float:
        return self.output_tok_s / self.best_static_tok_s


def flips_after_first_per_min(result: SimResult) -> float:
    """Flips during the trace's (single, steady) phase after each replica's first one, per replica
    per minute: the first flip is the policy finding the load's mode; any later one is flapping."""
    _, start, end = result.trace.bounds()[0]
    per_replica: dict[int, int] = {}
    for t, replica in result.flips:
        if start <= t < end:
            per_replica[replica] = per_replica.get(replica, 0) + 1
    later = sum(max(n - 1, 0) for n in per_replica.values())
    return later / result.replicas / ((end - start) / 60)


def _steady(result: SimResult) -> tuple[float, float]:
    """(output tok/s, mean fraction of replicas ON) over the trace's phase."""
    _, start, end = result.trace.bounds()[0]
    tokens = sum(result.tokens_per_bin[int(start / result.bin_s) : int(end / result.bin_s)])
    on = [f for t, f in result.on_fraction if start <= t < end]
    return tokens / (end - start), sum(on) / len(on)


def lockstep_runs(
    users: tuple[int, ...] = (64, 256),
    *,
    duration_s: float = 120.0,
    gap_s: float = 0.2,
    output_tokens: int = 256,
    replicas: int = 1,
    seed: int = 0,
    model: EngineModel | None = None,
    settings: tuple[tuple[str, PolicyConfig], ...] = SETTINGS,
) -> list[WaveRun]:
    """Every (users, setting, dynamic policy) on a lockstep trace; the engine runs the whole wave in
    one batch (max_running >= users), as the H200 run did."""
    model = model or default_model(max_running=max(users))
    out = []
    for c in users:
        trace = lockstep(c, duration_s=duration_s, output_tokens=output_tokens, gap_s=gap_s)
        base = SimConfig(replicas=replicas, seed=seed, drain_s=10.0)
        static = {
            p: _steady(simulate(trace, p, model, base))[0]
            for p in (SimPolicy.ALWAYS_ON, SimPolicy.ALWAYS_OFF)
        }
        best = max(static, key=lambda p: static[p])
        for label, policy_config in settings:
            config = SimConfig(replicas=replicas, seed=seed, drain_s=10.0, policy=policy_config)
            for dyn in _DYNAMIC:
                res = simulate(trace, dyn, model, config)
                tok_s, on_share = _steady(res)
                out.append(
                    WaveRun(
                        c, label, dyn, tok_s, static[best], best, flips_after_first_per_min(res), on_share
                    )
                )
    return out


def lockstep_section(runs: list[WaveRun], *, duration_s: float, gap_s: float, output_tokens: int) -> str:
    """The report's `## lockstep` section: what the trace is, the table, one line of verdict."""
    rows = [
        [
            f"c={r.users}",
            r.setting,
            r.policy.value,
            f"{r.output_tok_s:.0f}",
            f"{r.best_static_tok_s:.0f} ({r.best_static.value})",
            f"{r.vs_best_static:.3f}x",
            f"{r.flips_after_first_per_min:.2f}",
            f"{r.on_share:.0%}",
        ]
        for r in runs
    ]
    header = [
        "load",
        "policy settings",
        "rule",
        "output tok/s",
        "better static",
        "vs better static",
        "flips/min after the first",
        "ON share",
    ]
    worst = {label: min(r.vs_best_static for r in runs if r.setting == label) for label, _ in SETTINGS}
    most = {
        label: max(r.flips_after_first_per_min for r in runs if r.setting == label) for label, _ in SETTINGS
    }
    verdict = "; ".join(
        f"{label}: worst {worst[label]:.3f}x the better static mode, at most {most[label]:.2f} flips/min "
        "after the first"
        for label, _ in SETTINGS
    )
    return (
        "## lockstep closed loop: steady load in waves\n\n"
        "SGLang's benchmark client at `--max-concurrency c --random-range-ratio 1`, one replica: c users "
        f"start together, each asks for {output_tokens} output tokens, and sends again {gap_s:g} s after "
        "its answer (the client's turnaround), so the whole batch finishes at once and the replica's "
        f"load dips to 0 between waves. {duration_s:g} s at each level, the engine running the whole "
        "wave in one batch. With every wish acted on at once, a policy tick that lands in a gap sees "
        "low load and turns speculation ON, the next wave runs ON at batch c, and it can only turn OFF "
        "again `dwell_s` later (on an H200, c=256: 8 flips in 17 s, dynamic up to 17% below the static "
        "mode it should equal). With the defaults a wish to turn ON must hold `on_persist_s` over "
        "consecutive ticks, which a gap between waves never does, while turning OFF stays at once.\n\n"
        f"{verdict}.\n\n" + table(header, rows, align="lllrrrrr")
    )
