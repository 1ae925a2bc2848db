"""Load phases and request traces. Pure.

`Phase` is the one description of a stretch of load, used by the simulator, the Locust load
shapes (`loadtests.locust.shapes`) and `specflip demo`: a name, a duration, and either concurrent users
(closed loop) or an arrival rate (open loop).
`Trace`: open loop, piecewise-constant Poisson arrivals (requests come whatever the fleet does).
`ClosedLoop`: Locust-style users, each sending its next request a think time after the last
one finished, optionally pinned to a replica (session affinity) so replicas see uneven load.
`lockstep`: a benchmark client's closed loop (SGLang's bench_serving with fixed lengths): every
user starts at once and asks for the same length, so the batch runs in waves with short gaps.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

__all__ = [
    "TwoClassTrace",
    "Arrival",
    "ClosedLoop",
    "Phase",
    "Trace",
    "low_high_low",
    "poisson",
    "steps",
    "lockstep",
    "sticky_users",
]


@dataclass(frozen=True)
class Phase:
    """`duration_s` seconds of load: `users` concurrent closed-loop users, or Poisson arrivals at
    `rate_rps` requests per second (open loop; Locust paces its `users` to that rate)."""

    name: str
    duration_s: float
    users: int = 0
    rate_rps: float = 0.0


@dataclass(frozen=True)
class Arrival:
    at: float
    prompt_tokens: int
    output_tokens: int


class _Phased:
    """What both trace kinds share: named phases back to back, uniform output lengths."""

    phases: tuple[Phase, ...]
    out_min: int
    out_max: int

    @property
    def duration_s(self) -> float:
        return sum(p.duration_s for p in self.phases)

    @property
    def mean_output_tokens(self) -> float:
        return (self.out_min + self.out_max) / 2

    def bounds(self) -> list[tuple[str, float, float]]:
        """(name, start, end) per phase."""
        out, t = [], 0.0
        for p in self.phases:
            out.append((p.name, t, t + p.duration_s))
            t += p.duration_s
        return out


@dataclass(frozen=True)
class Trace(_Phased):
    """Poisson arrivals at each phase's rate; output lengths uniform in [out_min, out_max]."""

    phases: tuple[Phase, ...]  # their rate_rps
    prompt_tokens: int = 128
    out_min: int = 64
    out_max: int = 192

    def __post_init__(self) -> None:
        if not self.phases or any(p.duration_s <= 0 or p.rate_rps < 0 for p in self.phases):
            raise ValueError("Trace needs phases with duration > 0 and rate >= 0")
        if not 1 <= self.out_min <= self.out_max:
            raise ValueError("Trace needs 1 <= out_min <= out_max")

    def arrivals(self, seed: int) -> list[Arrival]:
        rng = random.Random(seed)
        out: list[Arrival] = []
        for phase, (_, start, end) in zip(self.phases, self.bounds(), strict=True):
            if phase.rate_rps == 0:
                continue
            t = start + rng.expovariate(phase.rate_rps)
            while t < end:
                out.append(Arrival(t, self.prompt_tokens, rng.randint(self.out_min, self.out_max)))
                t += rng.expovariate(phase.rate_rps)
        return out


@dataclass(frozen=True)
class ClosedLoop(_Phased):
    """Closed-loop users, as Locust runs them: a user sends a request, waits for its last token,
    thinks (exponential, mean `think_s`; exactly `think_s` with `fixed_think`) and sends the next. When a phase has fewer users, the
    extra ones stop after their request in flight. `replica_weights` pins each user to one
    replica, drawn once with these weights (session affinity, e.g. a cache-aware router keeping
    a tenant's prefix on one replica); None routes every request by least queue instead."""

    phases: tuple[Phase, ...]  # users 0..users-1 are active in a phase; the first ones stay across phases
    think_s: float = 0.5
    replica_weights: tuple[float, ...] | None = None
    prompt_tokens: int = 128
    out_min: int = 64
    out_max: int = 192
    fixed_think: bool = False

    def __post_init__(self) -> None:
        if not self.phases or any(p.duration_s <= 0 or p.users < 0 for p in self.phases):
            raise ValueError("ClosedLoop needs phases with duration > 0 and users >= 0")
        if self.think_s <= 0 or not 1 <= self.out_min <= self.out_max:
            raise ValueError("ClosedLoop needs think_s > 0 and 1 <= out_min <= out_max")
        if self.replica_weights is not None and (
            not self.replica_weights or min(self.replica_weights) < 0 or sum(self.replica_weights) <= 0
        ):
            raise ValueError("replica_weights must be non-negative with a positive sum")

    def pinning(self, replicas: int, seed: int) -> list[int] | None:
        """The replica of each user (None: routed by least queue)."""
        if self.replica_weights is None:
            return None
        if len(self.replica_weights) != replicas:
            raise ValueError(
                f"replica_weights has {len(self.replica_weights)} entries for {replicas} replicas"
            )
        rng = random.Random(seed ^ 0x5EED)
        most = max(p.users for p in self.phases)
        return rng.choices(range(replicas), weights=self.replica_weights, k=most)


def sticky_users(
    replicas: int, *, low_users: int = 2, high_users: int = 40, phase_s: float = 60.0, skew: float = 1.0
) -> ClosedLoop:
    """low -> high -> low in users per replica (on average), each user pinned to a replica whose
    popularity falls off as 1/rank^skew: the hot replicas saturate while the cold ones still
    run small batches, the case a per-replica switch exists for."""
    weights = tuple(1 / (i + 1) ** skew for i in range(replicas))
    return ClosedLoop(
        (
            Phase("low", phase_s, users=replicas * low_users),
            Phase("high", phase_s, users=replicas * high_users),
            Phase("low again", phase_s, users=replicas * low_users),
        ),
        replica_weights=weights,
    )


def lockstep(
    users: int,
    *,
    duration_s: float = 120.0,
    output_tokens: int = 256,
    prompt_tokens: int = 128,
    gap_s: float = 0.2,
) -> ClosedLoop:
    """SGLang's benchmark client at `--max-concurrency users --random-range-ratio 1`: every request
    has the same lengths and all users start together, so they finish together and send again
    together, `gap_s` later (the client's turnaround: HTTP, tokenizing, scheduling). The replica's
    load is `users` with a momentary dip to 0 between waves: a steady load, not a low one."""
    return ClosedLoop(
        (Phase(f"c={users}", duration_s, users=users),),
        think_s=gap_s,
        prompt_tokens=prompt_tokens,
        out_min=output_tokens,
        out_max=output_tokens,
        fixed_think=True,
    )


def poisson(rate_rps: float, duration_s: float) -> Trace:
    return Trace((Phase("constant", duration_s, rate_rps=rate_rps),))


def steps(rates_rps: list[float], step_s: float) -> Trace:
    return Trace(tuple(Phase(f"step{i}", step_s, rate_rps=r) for i, r in enumerate(rates_rps)))


def low_high_low(
    replicas: int,
    *,
    low_tok_s: float = 800.0,
    high_tok_s: float = 6000.0,
    phase_s: float = 60.0,
    mean_output_tokens: float = 128.0,
) -> Trace:
    """Three phases; demand given as output tok/s per replica (with the default engine model the
    high demand is above what one replica serves with speculation ON, below what it serves OFF)."""

    def rate(tok_s: float) -> float:
        return replicas * tok_s / mean_output_tokens

    return Trace(
        (
            Phase("low", phase_s, rate_rps=rate(low_tok_s)),
            Phase("high", phase_s, rate_rps=rate(high_tok_s)),
            Phase("low again", phase_s, rate_rps=rate(low_tok_s)),
        )
    )


@dataclass(frozen=True)
class TwoClassTrace:
    """Two open-loop traces side by side: `interactive` (latency class) and `batch` (throughput)."""

    interactive: Trace
    batch: Trace

    @property
    def duration_s(self) -> float:
        return max(self.interactive.duration_s, self.batch.duration_s)

    def bounds(self) -> list[tuple[str, float, float]]:
        """The batch trace's phases (the flood sets the load)."""
        return self.batch.bounds()
