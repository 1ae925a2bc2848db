"""PolicyClient's fallback state machine, tick by tick with an injected clock.

Uses a fake for failure injection only: `UnreachableActorClient` cannot resolve the actor
(as when the policy actor is dead). Recovery against a real restarted actor is in
test_actor.py."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("ray")

from policy.actor import PolicyClient  # noqa: E402
from policy.types import DecisionSource, PolicyConfig, SpecMode  # noqa: E402

from .helpers import obs  # noqa: E402

ON, OFF = SpecMode.ON, SpecMode.OFF
CACHED, LOCAL = DecisionSource.ACTOR_CACHED, DecisionSource.LOCAL_FALLBACK


class UnreachableActorClient(PolicyClient):
    """Failure injection: every lookup of the named actor fails."""

    def _resolve(self) -> Any:
        raise ValueError(f"Failed to look up actor with name '{self._actor_name}'")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_cached_answer_then_local_threshold_with_dwell_counted_from_the_last_flip() -> None:
    clock = Clock()
    fallback = PolicyConfig(high=32, low=12, dwell_s=10, min_on_replicas=3, max_flips_per_tick=1)
    client = UnreachableActorClient("r", "policy", fallback, fail_after=3, clock=clock)
    mode = ON
    rows = [  # (now, load, source, desired); every tick is one more consecutive failure
        (0, 100, CACHED, ON),  # never answered: keep the actual mode
        (1, 100, CACHED, ON),
        (2, 100, LOCAL, OFF),  # local threshold; min_on_replicas is a fleet rule: ignored here
        (3, 0, LOCAL, OFF),  # dwell since the local flip at t=2
        (11.9, 0, LOCAL, OFF),
        (12, 0, LOCAL, ON),
    ]
    for step, (now, load, source, desired) in enumerate(rows):
        clock.now = now
        d = client.report(obs("r", load, at=0, mode=mode))
        assert (d.source, d.desired) == (source, desired), f"t={now}"
        assert d.consecutive_failures == client.state.consecutive_failures == step + 1
        assert client.state.source is source and "Failed to look up actor" in (client.state.last_error or "")
        mode = d.desired
    assert "local fallback after 6 failed reports" in d.reason


def test_async_report_falls_back_the_same_way() -> None:
    client = UnreachableActorClient("r", "policy", PolicyConfig(dwell_s=0), fail_after=1, clock=Clock())
    d = asyncio.run(client.report_async(obs("r", 100, at=0)))
    assert (d.source, d.desired) == (LOCAL, OFF)


def test_a_report_for_another_replica_is_a_programming_error() -> None:
    client = UnreachableActorClient("r", "policy", PolicyConfig(), clock=Clock())
    with pytest.raises(ValueError, match="got a report for 'other'"):
        client.report(obs("other", 0, at=0))
