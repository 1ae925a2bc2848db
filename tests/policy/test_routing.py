"""policy.routing: how a request's class is read, and how candidates are ranked for it."""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

import pytest

from policy.routing import (
    ClassRule,
    RankReason,
    ReplicaStats,
    RequestClass,
    RoutingConfig,
    classify,
    rank,
)
from policy.types import SpecMode

INT, B = RequestClass.INTERACTIVE, RequestClass.BATCH
ON, OFF = SpecMode.ON, SpecMode.OFF
NOW = 1000.0


def body(**fields: Any) -> SimpleNamespace:
    return SimpleNamespace(**fields)


@pytest.mark.parametrize(
    ("rule", "request_body", "headers", "expected"),
    [
        (ClassRule(), None, {"x-specflip-class": "interactive"}, INT),
        (ClassRule(), None, {"X-SpecFlip-Class": " Batch "}, B),  # any case, spaces trimmed
        (ClassRule(default_class=INT), None, {"x-specflip-class": "bogus"}, INT),  # unknown value: default
        (ClassRule(), body(service_tier="priority"), None, INT),
        (ClassRule(default_class=INT), body(service_tier="flex"), None, B),
        (ClassRule(), body(service_tier="auto"), None, B),  # auto says nothing: default
        (ClassRule(), body(priority=-1), None, INT),
        (ClassRule(default_class=INT), body(priority=5), None, B),
        (ClassRule(default_class=INT), body(priority=0), None, INT),
        (ClassRule(default_class=INT, batch_min_max_tokens=512), body(max_tokens=512), None, B),
        (ClassRule(default_class=INT, batch_min_max_tokens=512), body(max_tokens=511), None, INT),
        (ClassRule(default_class=INT, batch_min_max_tokens=64), body(max_completion_tokens=100), None, B),
        (ClassRule(default_class=INT, non_stream_is_batch=True), body(stream=False), None, B),
        (ClassRule(default_class=INT, non_stream_is_batch=True), body(stream=True), None, INT),
        # the header wins over the body; the body's tier over priority
        (ClassRule(), body(priority=5), {"x-specflip-class": "interactive"}, INT),
        (ClassRule(), body(service_tier="priority", priority=5), None, INT),
        (ClassRule(class_header="x-lane"), None, {"x-lane": "interactive"}, INT),
    ],
)
def test_classify(rule: ClassRule, request_body: Any, headers: Any, expected: RequestClass) -> None:
    assert classify(rule, request_body, headers) is expected


def stats(mode: SpecMode, load: int, age: float = 0.0) -> ReplicaStats:
    return ReplicaStats(mode=mode, running=load, waiting=0, accept_length=2.5, step_s=0.01, at=NOW - age)


def test_stats_round_trip_through_the_routing_stats_dict() -> None:
    s = ReplicaStats(ON, 3, 2, 2.7, 0.012, 99.5)
    assert ReplicaStats.from_routing_stats(s.to_routing_stats()) == s
    assert s.load == 5
    for junk in (None, {}, {"specflip": 1}, {"specflip": {"mode": "sideways"}}, {"other": {}}):
        assert ReplicaStats.from_routing_stats(junk) is None


CFG = RoutingConfig(stale_after_s=2.0, max_imbalance=4, per_rank=2)


@pytest.mark.parametrize(
    ("cls", "fleet", "ranks", "reason"),
    [
        # interactive: ON replicas first, least loaded first; then OFF
        (INT, [(ON, 3), (OFF, 0), (ON, 1)], ((2, 0), (1,)), RankReason.PREFERRED),
        # batch: OFF first
        (B, [(ON, 0), (OFF, 2), (OFF, 1)], ((2, 1), (0,)), RankReason.PREFERRED),
        # only per_rank (2) of a mode are handed over: the least loaded
        (INT, [(ON, 5), (ON, 1), (ON, 3), (OFF, 9)], ((1, 2), (3,)), RankReason.PREFERRED),
        # no replica in the preferred mode: the others
        (INT, [(OFF, 2), (OFF, 0)], ((1, 0),), RankReason.NO_PREFERRED),
        (B, [(ON, 1)], ((0,),), RankReason.NO_PREFERRED),
        # only the preferred mode
        (B, [(OFF, 1), (OFF, 0)], ((1, 0),), RankReason.PREFERRED),
        # bounded imbalance: preferred min load 10 > other min 5 + 4 -> the other mode first
        (INT, [(ON, 10), (OFF, 5)], ((1,), (0,)), RankReason.IMBALANCED),
        # ... but a gap of exactly max_imbalance keeps the class on its mode
        (INT, [(ON, 9), (OFF, 5)], ((0,), (1,)), RankReason.PREFERRED),
        (B, [(ON, 0), (OFF, 5)], ((0,), (1,)), RankReason.IMBALANCED),
    ],
)
def test_rank(
    cls: RequestClass,
    fleet: list[tuple[SpecMode, int]],
    ranks: tuple[tuple[int, ...], ...],
    reason: RankReason,
) -> None:
    got = rank(cls, [stats(m, load) for m, load in fleet], NOW, CFG, rng=random.Random(0))
    assert (got.ranks, got.reason) == (ranks, reason)


@pytest.mark.parametrize(
    "fleet",
    [
        [stats(ON, 0), None],  # a replica publishing nothing yet
        [stats(ON, 0), stats(OFF, 0, age=2.5)],  # older than stale_after_s
        [],
    ],
)
def test_missing_or_stale_stats_fall_back(fleet: list[ReplicaStats | None]) -> None:
    got = rank(INT, fleet, NOW, CFG)
    assert got.reason is RankReason.STALE and got.ranks == ()


def test_loads_given_by_the_router_override_the_published_ones() -> None:
    fleet = [stats(ON, 0), stats(ON, 5)]  # published: replica 0 idle
    got = rank(INT, fleet, NOW, CFG, loads=[7.0, 1.0])  # Serve's own queue counts say otherwise
    assert got.ranks == ((1, 0),)


def test_ties_are_broken_at_random_so_no_replica_of_a_mode_starves() -> None:
    fleet = [stats(ON, 1) for _ in range(6)] + [stats(OFF, 0)]
    firsts = {rank(INT, fleet, NOW, CFG, rng=random.Random(seed)).ranks[0][0] for seed in range(200)}
    assert firsts == set(range(6))


def test_config_checks() -> None:
    with pytest.raises(ValueError, match="per_rank"):
        RoutingConfig(per_rank=0)
    with pytest.raises(ValueError):
        RoutingConfig(stale_after_s=0)
    with pytest.raises(ValueError, match="affinity_min_match"):
        RoutingConfig(affinity_min_match=0)
    with pytest.raises(ValueError, match="affinity_max_gap"):
        RoutingConfig(affinity_max_gap=-1)


AFF = RoutingConfig(stale_after_s=2.0, max_imbalance=4, per_rank=2, affinity_max_gap=2)


@pytest.mark.parametrize(
    ("cls", "fleet", "holders", "ranks", "affinity"),
    [
        # interactive: the ON prefix holder (load 2, 1 above the least-loaded ON) gets its own rank
        (INT, [(ON, 1), (ON, 2), (OFF, 0)], [1], ((1,), (0,), (2,)), True),
        # the least-loaded of several holders of the leading mode
        (INT, [(ON, 3), (ON, 2), (ON, 0), (OFF, 0)], [0, 1], ((1,), (2,), (3,)), True),
        # a holder in the other mode does not pull the request away from its class's mode
        (INT, [(ON, 1), (OFF, 0)], [1], ((0,), (1,)), False),
        (B, [(ON, 0), (OFF, 3), (OFF, 1)], [0], ((2, 1), (0,)), False),
        # a holder more than affinity_max_gap (2) above its mode's least loaded: plain ranking
        (INT, [(ON, 0), (ON, 3), (OFF, 0)], [1], ((0, 1), (2,)), False),
        # imbalanced (the other mode leads): affinity applies within the mode that leads
        (INT, [(ON, 10), (OFF, 5), (OFF, 6)], [2, 0], ((2,), (1,), (0,)), True),
        # no holder: unchanged
        (INT, [(ON, 1), (OFF, 0)], [], ((0,), (1,)), False),
    ],
)
def test_prefix_affinity_keeps_the_class(
    cls: RequestClass,
    fleet: list[tuple[SpecMode, int]],
    holders: list[int],
    ranks: tuple[tuple[int, ...], ...],
    affinity: bool,
) -> None:
    got = rank(cls, [stats(m, load) for m, load in fleet], NOW, AFF, rng=random.Random(0), affinity=holders)
    assert (got.ranks, got.affinity) == (ranks, affinity)


def test_prefix_affinity_can_be_switched_off() -> None:
    off = RoutingConfig(prefix_affinity=False)
    got = rank(INT, [stats(ON, 0), stats(ON, 1)], NOW, off, rng=random.Random(0), affinity=[1])
    assert got.ranks == ((0, 1),) and not got.affinity
