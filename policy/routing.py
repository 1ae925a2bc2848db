"""Class-aware replica ranking for Ray Serve's request router. Pure: no ray, torch or sglang.

A request has a class: INTERACTIVE (latency: it should run where speculation is ON) or BATCH
(throughput: it should run where speculation is OFF). `classify` reads it from the request;
`rank` orders the candidate replicas for one request from the routing stats each replica
publishes (`ReplicaStats`, its mode and load) and the clock passed in:

1. Stats missing or older than `stale_after_s` on any candidate: no ranking (the router falls
   back to power of two choices over all candidates).
2. Otherwise the class's preferred mode (ON for interactive, OFF for batch) forms the first
   rank and the other mode the second; within a rank the `per_rank` least-loaded replicas
   (random among equals), of which Ray Serve's router takes the one with the shortest queue
   that has room (a full replica is skipped: the next rank gets the request).
3. Bounded imbalance: when the least-loaded preferred replica carries more than
   `max_imbalance` requests beyond the least-loaded other one, the ranks swap for this
   request, so a class never piles onto its mode while the other mode idles.
4. Prefix-cache affinity, where it does not fight the class: among the replicas of the mode
   that goes first, the least-loaded one that already served this request's longest known
   prefix (`affinity`, found by the router) gets a rank of its own ahead of the rest, unless
   it carries more than `affinity_max_gap` requests beyond that mode's least-loaded replica.

`deployments.routing.router.SpecFlipRouter` is the shell that runs this inside Ray Serve.
"""

from __future__ import annotations

import enum
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import Field, field_validator

from policy.types import Settings, SpecMode

__all__ = [
    "STATS_KEY",
    "ClassRule",
    "Ranking",
    "RankReason",
    "ReplicaStats",
    "RequestClass",
    "RoutingConfig",
    "classify",
    "rank",
]

STATS_KEY = "specflip"  # the key of a replica's routing stats dict that holds ReplicaStats


class RequestClass(enum.Enum):
    INTERACTIVE = "interactive"  # latency: prefers speculation ON
    BATCH = "batch"  # throughput: prefers speculation OFF

    @property
    def preferred_mode(self) -> SpecMode:
        return SpecMode.ON if self is RequestClass.INTERACTIVE else SpecMode.OFF


_TIERS = {"priority": RequestClass.INTERACTIVE, "flex": RequestClass.BATCH, "scale": RequestClass.BATCH}


class ClassRule(Settings):
    """How a request's class is read, first match wins:

    1. the header `class_header` (`interactive` | `batch`), where the router sees headers;
    2. OpenAI's `service_tier`: `priority` -> interactive, `flex`/`scale` -> batch;
    3. SGLang's/vLLM's `priority` (lower is more urgent): < 0 -> interactive, > 0 -> batch;
    4. `batch_min_max_tokens`: a max_tokens at least this large -> batch;
    5. `non_stream_is_batch`: a request without `stream: true` -> batch;
    6. `default_class`.

    Its fields are keys of the app config's `routing` section (deployments.routing.settings).
    """

    class_header: str = Field(
        default="x-specflip-class",
        min_length=1,
        description="HTTP header naming a request's class (interactive | batch), any case. HAProxy "
        "forwards it to the request router as Serve's session id: Ray's processes need "
        "RAY_SERVE_SESSION_ID_HEADER_KEY set to it (`specflip serve` sets it from here).",
    )
    default_class: RequestClass = Field(
        default=RequestClass.BATCH,
        description="Class of a request nothing else classifies (header, service_tier, priority, "
        "the two rules below).",
    )
    batch_min_max_tokens: int | None = Field(
        default=None,
        ge=1,
        description="Requests with max_tokens at least this large are batch; null: no such rule.",
    )
    non_stream_is_batch: bool = Field(default=False, description="Requests without stream: true are batch.")

    @field_validator("class_header")
    @classmethod
    def _lower(cls, value: str) -> str:
        return value.lower()  # HTTP header names are case-insensitive; Starlette lower-cases them


def _header(headers: Mapping[str, str] | None, name: str) -> str | None:
    if not headers:
        return None
    value = headers.get(name)
    if value is None:  # Starlette lower-cases names; a plain dict may not
        value = next((v for k, v in headers.items() if k.lower() == name), None)
    return value.strip().lower() if isinstance(value, str) else None


def classify(rule: ClassRule, body: Any, headers: Mapping[str, str] | None = None) -> RequestClass:
    """The class of a request: `body` is the parsed request (any object with OpenAI's field names
    as attributes, or None), `headers` the HTTP headers where known."""
    value = _header(headers, rule.class_header)
    if value in ("interactive", "batch"):
        return RequestClass(value)
    tier = getattr(body, "service_tier", None)
    if isinstance(tier, str) and tier in _TIERS:
        return _TIERS[tier]
    priority = getattr(body, "priority", None)
    if isinstance(priority, int) and not isinstance(priority, bool) and priority != 0:
        return RequestClass.INTERACTIVE if priority < 0 else RequestClass.BATCH
    if rule.batch_min_max_tokens is not None:
        limit = getattr(body, "max_tokens", None) or getattr(body, "max_completion_tokens", None)
        if isinstance(limit, int) and limit >= rule.batch_min_max_tokens:
            return RequestClass.BATCH
    if rule.non_stream_is_batch and body is not None and not getattr(body, "stream", False):
        return RequestClass.BATCH
    return rule.default_class


@dataclass(frozen=True, slots=True)
class ReplicaStats:
    """What a replica publishes as routing stats (under `STATS_KEY`) every stats period."""

    mode: SpecMode  # the mode its next decode steps run
    running: int
    waiting: int
    accept_length: float | None  # EMA of accepted tokens per verify (None: unknown)
    step_s: float | None  # mean decode step seconds over its last tick (None: no steps)
    at: float  # wall-clock seconds when measured (time.time(); compared across processes)

    @property
    def load(self) -> int:
        return self.running + self.waiting

    def to_routing_stats(self) -> dict[str, Any]:
        return {
            STATS_KEY: {
                "mode": self.mode.value,
                "running": self.running,
                "waiting": self.waiting,
                "accept_length": self.accept_length,
                "step_s": self.step_s,
                "at": self.at,
            }
        }

    @staticmethod
    def from_routing_stats(stats: Mapping[str, Any] | None) -> ReplicaStats | None:
        """None for stats that are missing or malformed (a replica not yet reporting)."""
        d = (stats or {}).get(STATS_KEY)
        if not isinstance(d, Mapping):
            return None
        try:
            return ReplicaStats(
                mode=SpecMode(d["mode"]),
                running=int(d["running"]),
                waiting=int(d["waiting"]),
                accept_length=None if d.get("accept_length") is None else float(d["accept_length"]),
                step_s=None if d.get("step_s") is None else float(d["step_s"]),
                at=float(d["at"]),
            )
        except (KeyError, TypeError, ValueError):
            return None


class RoutingConfig(Settings):
    """How `rank` orders replicas. Its fields are also keys of the app config's `routing` section
    (deployments.routing.settings)."""

    stale_after_s: float = Field(
        default=2.0,
        gt=0,
        description="Stats older than this on any replica: the router falls back to power of two.",
    )
    max_imbalance: float = Field(
        default=8.0,
        ge=0,
        description="Requests: when the least-loaded replica of a class's preferred mode carries more "
        "than this beyond the least-loaded replica of the other mode, the request goes to the other "
        "mode (no class piles onto its mode while the other idles).",
    )
    per_rank: int = Field(
        default=2,
        ge=1,
        description="Least-loaded replicas per mode handed to Serve, which probes their queues and "
        "takes the shortest with room.",
    )
    prefix_affinity: bool = Field(
        default=True,
        description="Send a request to the replica its prompt's longest known prefix went to (its "
        "prefix cache may still hold it), within the mode its class prefers and `affinity_max_gap`.",
    )
    affinity_min_match: float = Field(
        default=0.1,
        gt=0,
        le=1,
        description="Fraction of a prompt's characters the known prefix must cover to count.",
    )
    affinity_max_gap: float = Field(
        default=4.0,
        ge=0,
        description="Requests: a prefix holder carrying more than this beyond the least-loaded replica "
        "of its mode loses its priority for this request.",
    )
    affinity_chars: int = Field(
        default=1024,
        ge=1,
        le=65536,
        description="Characters of a prompt's start the router remembers and matches for affinity.",
    )


class RankReason(enum.Enum):
    PREFERRED = "preferred mode first"
    IMBALANCED = "preferred mode overloaded: other mode first"
    NO_PREFERRED = "no replica in the preferred mode"
    STALE = "stats missing or stale: power of two"


@dataclass(frozen=True, slots=True)
class Ranking:
    """Candidate indices per rank, best rank first (empty for STALE: the caller falls back)."""

    ranks: tuple[tuple[int, ...], ...]
    reason: RankReason
    affinity: bool = False  # the first rank is the replica holding the request's prefix


def _least_loaded(group: list[int], loads: Sequence[float], k: int, rng: random.Random) -> tuple[int, ...]:
    return tuple(sorted(group, key=lambda i: (loads[i], rng.random()))[:k])


def rank(
    request_class: RequestClass,
    stats: Sequence[ReplicaStats | None],
    now: float,
    config: RoutingConfig,
    *,
    loads: Sequence[float] | None = None,
    rng: random.Random | None = None,
    affinity: Sequence[int] = (),
) -> Ranking:
    """Order the candidates (`stats[i]` of candidate i) for one request of `request_class`.

    `loads[i]` is the freshest load known for candidate i (the router's own queue-length cache);
    by default each replica's published running + waiting. `affinity`: the candidates that hold
    the request's longest known prompt prefix (empty: none does, or affinity is off).
    """
    rng = rng or random.Random()
    if not stats or any(s is None or not now - s.at <= config.stale_after_s for s in stats):
        return Ranking((), RankReason.STALE)
    known: list[ReplicaStats] = [s for s in stats if s is not None]
    load = list(loads) if loads is not None else [float(s.load) for s in known]
    want = request_class.preferred_mode
    preferred = [i for i, s in enumerate(known) if s.mode is want]
    other = [i for i, s in enumerate(known) if s.mode is not want]
    k = config.per_rank
    if not preferred:
        ranking = Ranking((_least_loaded(other, load, k, rng),), RankReason.NO_PREFERRED)
        return _with_affinity(ranking, other, affinity, load, config)
    first = _least_loaded(preferred, load, k, rng)
    if not other:
        return _with_affinity(Ranking((first,), RankReason.PREFERRED), preferred, affinity, load, config)
    second = _least_loaded(other, load, k, rng)
    gap = load[first[0]] - load[second[0]]
    if math.isfinite(gap) and gap > config.max_imbalance:
        return _with_affinity(Ranking((second, first), RankReason.IMBALANCED), other, affinity, load, config)
    return _with_affinity(Ranking((first, second), RankReason.PREFERRED), preferred, affinity, load, config)


def _with_affinity(
    ranking: Ranking,
    lead_mode: list[int],
    affinity: Sequence[int],
    load: Sequence[float],
    config: RoutingConfig,
) -> Ranking:
    """Put the least-loaded prefix holder of the leading mode first, within `affinity_max_gap`."""
    holders = [i for i in affinity if i in lead_mode] if config.prefix_affinity else []
    if not holders:
        return ranking
    best = min(holders, key=lambda i: load[i])
    if not load[best] - min(load[i] for i in lead_mode) <= config.affinity_max_gap:
        return ranking
    rest = tuple(r for r in (tuple(i for i in rank_ if i != best) for rank_ in ranking.ranks) if r)
    return Ranking(((best,), *rest), ranking.reason, affinity=True)
