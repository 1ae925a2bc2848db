"""Request arrival traces for the simulator: piecewise-constant Poisson phases. Pure."""

from __future__ import annotations

import random
from dataclasses import dataclass

__all__ = ["Arrival", "Phase", "Trace", "low_high_low", "poisson", "steps"]


@dataclass(frozen=True)
class Phase:
    name: str
    duration_s: float
    rate_rps: float  # fleet-wide request arrivals per second


@dataclass(frozen=True)
class Arrival:
    at: float
    prompt_tokens: int
    output_tokens: int


@dataclass(frozen=True)
class Trace:
    """Poisson arrivals at each phase's rate; output lengths uniform in [out_min, out_max]."""

    phases: tuple[Phase, ...]
    prompt_tokens: int = 128
    out_min: int = 64
    out_max: int = 192

    def __post_init__(self) -> None:
        if not self.phases or any(p.duration_s <= 0 or p.rate_rps < 0 for p in self.phases):
            raise ValueError("Trace needs phases with duration > 0 and rate >= 0")
        if not 1 <= self.out_min <= self.out_max:
            raise ValueError("Trace needs 1 <= out_min <= out_max")

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


def poisson(rate_rps: float, duration_s: float) -> Trace:
    return Trace((Phase("constant", duration_s, rate_rps),))


def steps(rates_rps: list[float], step_s: float) -> Trace:
    return Trace(tuple(Phase(f"step{i}", step_s, r) for i, r in enumerate(rates_rps)))


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
            Phase("low", phase_s, rate(low_tok_s)),
            Phase("high", phase_s, rate(high_tok_s)),
            Phase("low again", phase_s, rate(low_tok_s)),
        )
    )
