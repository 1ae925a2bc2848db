"""Load shapes as plain data: a schedule of phases, ticked by Locust's shape class.

Shapes are written as short specs (the CLI and the locustfile use the same ones):

    fixed:users=8,duration=30
    steps:users=1/2/4/8,step=20
    steps:users=1/32/128,step=25/25/65                       # a length per level
    transition:low=2,high=32,low_s=30,high_s=60,tail_s=30    # low -> high -> low
    poisson:rate=4,users=64,duration=60                      # open loop, 4 req/s

A schedule is a sequence of `Phase`s (`loadtests.sim.trace.Phase`, the one load-phase type, shared
with the simulator and `specflip demo`) run back to back. `Schedule.tick(t)` answers what
Locust's `LoadTestShape.tick()` wants at run time `t`: (users, spawn_rate), or None when the
test is over. Users are spawned at `spawn_rate` per second (Locust stops users at that rate
too); by default it is the largest phase's user count, so every change of level takes about
one second.

Poisson arrivals (open loop): Locust users are closed-loop (one request at a time
each), so a pool of `users` paces itself: each user draws its next *start time*
from an exponential distribution of rate `rate / users`, counted from its previous
scheduled start, not from when its last request finished. The superposition of
`users` such streams is a Poisson process of rate `rate`, as long as a user is
idle when its next arrival comes; if it is still busy the arrival is late (it
starts at once) and `PoissonPacer.late` counts it. Size the pool above the
expected number of requests in flight (rate x latency); the report shows the
achieved rate, and late arrivals mean the pool was too small.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from loadtests.sim.trace import Phase

__all__ = ["Phase", "PoissonPacer", "Schedule", "ShapeError", "parse_shape", "phase_bounds"]


class ShapeError(ValueError):
    """A shape spec that cannot be run."""


def phase_bounds(phases: tuple[Phase, ...]) -> tuple[tuple[Phase, float, float], ...]:
    """(phase, start, end) in run-time seconds, the phases back to back from 0."""
    out, t = [], 0.0
    for p in phases:
        out.append((p, t, t + p.duration_s))
        t += p.duration_s
    return tuple(out)


@dataclass(frozen=True)
class Schedule:
    """Consecutive phases; a `poisson` schedule's one phase carries the arrival rate (rate_rps)."""

    kind: str
    phases: tuple[Phase, ...]
    spawn_rate: float  # users started (and stopped) per second at a change of level

    def bounds(self) -> tuple[tuple[Phase, float, float], ...]:
        return phase_bounds(self.phases)

    @property
    def duration(self) -> float:
        return sum(p.duration_s for p in self.phases)

    @property
    def max_users(self) -> int:
        return max(p.users for p in self.phases)

    @property
    def rate(self) -> float | None:
        """Requests per second of Poisson arrivals (None: closed-loop users)."""
        return self.phases[0].rate_rps if self.kind == "poisson" else None

    def phase_at(self, t: float) -> Phase | None:
        for p, start, end in self.bounds():
            if start <= t < end:
                return p
        return None

    def tick(self, t: float) -> tuple[int, float] | None:
        p = self.phase_at(t)
        return None if p is None else (p.users, self.spawn_rate)

    @property
    def rate_per_user(self) -> float | None:
        return None if self.rate is None else self.rate / self.max_users


def _schedule(
    kind: str, named: list[tuple[str, float, int]], spawn_rate: float | None, rate: float = 0.0
) -> Schedule:
    # Locust uses the spawn rate for stopping users too: default to the largest phase,
    # so every change of level (up or down) completes within about one second.
    for name, dur, users in named:
        if dur <= 0:
            raise ShapeError(f"phase {name!r} needs a positive duration, got {dur}")
        if users < 1:
            raise ShapeError(f"phase {name!r} needs at least 1 user, got {users}")
    phases = tuple(Phase(name, dur, users=users, rate_rps=rate) for name, dur, users in named)
    return Schedule(kind, phases, spawn_rate or float(max(users for _, _, users in named)))


def parse_shape(spec: str) -> Schedule:
    """Parse a shape spec (see the module docstring)."""
    kind, _, rest = spec.strip().partition(":")
    args: dict[str, str] = {}
    for item in filter(None, (s.strip() for s in rest.split(","))):
        key, eq, value = item.partition("=")
        if not eq:
            raise ShapeError(f"expected key=value in shape spec {spec!r}, got {item!r}")
        args[key.strip()] = value.strip()

    def num(key: str, default: float | None = None) -> float:
        if key not in args:
            if default is None:
                raise ShapeError(f"shape {kind!r} needs {key}=... (spec {spec!r})")
            return default
        try:
            return float(args.pop(key))
        except ValueError as e:
            raise ShapeError(f"{key} must be a number in {spec!r}") from e

    spawn = num("spawn_rate", 0.0) or None
    if kind == "fixed":
        users, dur = int(num("users")), num("duration")
        sched = _schedule("fixed", [(f"c={users}", dur, users)], spawn)
    elif kind == "steps":
        try:
            levels = [int(u) for u in args.pop("users", "").split("/") if u]
        except ValueError as e:
            raise ShapeError(f"steps users must look like 1/2/4 in {spec!r}") from e
        if not levels:
            raise ShapeError(f"steps needs users=1/2/4 (spec {spec!r})")
        steps = args.pop("step", "")
        try:  # one length for every level, or one per level: step=20 or step=20/20/65
            lengths = [float(x) for x in steps.split("/") if x]
        except ValueError as e:
            raise ShapeError(f"step must be a number or a list like 20/20/65 in {spec!r}") from e
        if len(lengths) == 1:
            lengths *= len(levels)
        if len(lengths) != len(levels):
            raise ShapeError(f"steps needs step=S or one length per level (spec {spec!r})")
        sched = _schedule("steps", [(f"c={u}", d, u) for u, d in zip(levels, lengths, strict=True)], spawn)
    elif kind == "transition":
        low, high = int(num("low")), int(num("high"))
        if high <= low:
            raise ShapeError(f"transition needs high > low, got low={low} high={high}")
        low_s, high_s, tail_s = num("low_s"), num("high_s"), num("tail_s")
        sched = _schedule(
            "transition", [("low", low_s, low), ("high", high_s, high), ("low2", tail_s, low)], spawn
        )
    elif kind == "poisson":
        rate, users, dur = num("rate"), int(num("users")), num("duration")
        if rate <= 0:
            raise ShapeError(f"poisson rate must be > 0, got {rate}")
        sched = _schedule("poisson", [(f"rate={rate:g}/s", dur, users)], spawn, rate=rate)
    else:
        raise ShapeError(f"unknown shape {kind!r}: use fixed, steps, transition or poisson")
    if args:
        raise ShapeError(f"unknown keys {sorted(args)} in shape spec {spec!r}")
    return sched


class PoissonPacer:
    """Schedule-based pacing of one user: exponential gaps between *scheduled* starts."""

    def __init__(self, rate_per_user: float, rng: random.Random, now: float) -> None:
        if rate_per_user <= 0:
            raise ShapeError(f"rate per user must be > 0, got {rate_per_user}")
        self.rate = rate_per_user
        self.rng = rng
        self.next_start = now
        self.late = 0

    def wait(self, now: float) -> float:
        """Seconds to sleep before the next request (0 when the arrival is already due)."""
        self.next_start += self.rng.expovariate(self.rate)
        if self.next_start < now:
            self.late += 1
            return 0.0
        return self.next_start - now
