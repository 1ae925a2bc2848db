"""Control-surface logic: bearer tokens, the override body, the status document the loadtests read."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from deployments.http.control import OverrideRequest, check_bearer, status_document
from patched_worker.state import SpeculationState, Strategy
from policy.types import (
    DecisionSource,
    FleetStatus,
    Override,
    PolicyConfig,
    ReplicaStatus,
    SpecMode,
    TickStats,
)
from tests.engine_state import speculation_state


@pytest.mark.parametrize(
    ("header", "token", "code"),
    [
        (None, None, 403),
        ("Bearer x", None, 403),
        ("Bearer x", "", 403),
        (None, "s3cret", 401),
        ("", "s3cret", 401),
        ("Bearer", "s3cret", 401),
        ("Basic s3cret", "s3cret", 401),
        ("Bearer wrong", "s3cret", 401),
        ("Bearer s3cret2", "s3cret", 401),
    ],
)
def test_refused_requests(header: str | None, token: str | None, code: int) -> None:
    problem = check_bearer(header, token)
    assert problem is not None and problem.status_code == code and problem.message


@pytest.mark.parametrize("header", ["Bearer s3cret", "bearer s3cret", "  Bearer   s3cret  "])
def test_the_right_token_passes(header: str) -> None:
    assert check_bearer(header, "s3cret") is None


def test_override_body_is_strict() -> None:
    assert OverrideRequest.model_validate({"replica_id": "*", "mode": "auto"}).mode == "auto"
    for bad in (
        {"replica_id": "r"},
        {"replica_id": "", "mode": "on"},
        {"replica_id": "r", "mode": "ON!"},
        {"replica_id": "r", "mode": "on", "extra": 1},
    ):
        with pytest.raises(ValidationError):
            OverrideRequest.model_validate(bad)


ENGINE = speculation_state(
    enabled=True,
    requested=False,  # an OFF pending: the document shows both
    strategy=Strategy.FULL_EXTEND,
    toggles=4,
    on_steps=40,
    off_steps=25,
    resyncs=2,
    strategy_configured=Strategy.WARM_KV,
    strategy_fallback="draft layout not handled by warm_kv",
    off_cuda_graphs_note="capture failed: out of memory",
    resyncs_timed=2,
    resync_ms_total=9.87654,
    last_resync_ms=4.5,
    sglang_version="0.5.17",
    generated_tokens=1234,
    slow_steps=3,
    slow_step_log=[(7, "resync", 37, 2950.5)],
)


def _replica(
    rid: str,
    stale: bool = False,
    override: Override = Override.AUTO,
    source: DecisionSource | None = DecisionSource.ACTOR,
    engine: SpeculationState | None = ENGINE,
) -> ReplicaStatus:
    return ReplicaStatus(
        replica_id=rid,
        desired=SpecMode.OFF,
        actual=SpecMode.ON,
        load=7.0,
        running=5,
        waiting=2,
        accept_length=2.9,
        flips=3,
        last_report_age_s=0.12345,
        override=override,
        patched=True,
        stale=stale,
        reason="rule flipped it",
        policy_source=source,
        engine=engine,
        control_timeouts=1,
    )


def test_status_document_has_the_fields_the_loadtests_use() -> None:
    fleet = FleetStatus(
        replicas=(
            _replica("b", stale=True, override=Override.FORCE_OFF, source=DecisionSource.OVERRIDE),
            _replica("a"),
            _replica("c", source=DecisionSource.LOCAL_FALLBACK, engine=None),
            _replica("d", source=None),
        ),
        config=PolicyConfig(high=4, low=1),
        ticks=TickStats(10, 0.1, 1e-4, 1e-4, 3, 0),
        restarted=False,
        uptime_s=12.0,
    )
    doc = status_document(fleet, enabled=True, actor_name="p", expected_replicas=3)
    assert doc["expected_replicas"] == 3  # how the launcher tells "up" from "the first replica answering"
    a, b, c, d = doc["replicas"]
    assert a == {
        "replica_id": "a",
        "mode": "on",
        "desired_mode": "off",
        "running": 5,
        "waiting": 2,
        "load": 7.0,
        "accept_length": 2.9,
        "flips": 3,
        "patched": True,
        "override": "auto",
        "policy_source": "actor",
        "stale": False,
        "last_report_age_s": 0.123,
        "reason": "rule flipped it",
        "engine": {
            "enabled": True,
            "requested": False,
            "off_cuda_graphs": False,
            "off_cuda_graphs_reason": "capture failed: out of memory",
            "off_cuda_graphs_bytes": None,
            "strategy": "full_extend",
            "strategy_configured": "warm_kv",
            "strategy_fallback": "draft layout not handled by warm_kv",
            "toggles": 4,
            "resyncs": 2,
            "resyncs_timed": 2,
            "resync_ms_total": 9.877,
            "last_resync_ms": 4.5,
            "decode_steps": {"on": 40, "off": 25},
            "generated_tokens": 1234,
            "control_timeouts": 1,
            "slow_steps": 3,
            "slow_step_log": [{"step": 7, "kind": "resync", "batch": 37, "host_ms": 2950.5}],
            "sglang_version": "0.5.17",
        },
    }
    # policy_source is what the replica reported, not inferred; a stale report gets its own marker
    assert (b["override"], b["policy_source"]) == ("off", "stale")
    assert (c["policy_source"], c["engine"]) == ("local_fallback", None)  # unpatched: no engine state
    assert d["policy_source"] is None  # no answer yet when it last reported
    assert doc["policy"]["config"]["high"] == 4.0 and doc["policy"]["config"]["rule"] == "threshold"
    assert doc["policy"]["flips_total"] == 3 and doc["policy"]["enabled"] is True
    assert "rule" not in status_document(fleet, enabled=False, actor_name="p")["policy"]["config"]


def test_rate_limiter_allows_a_burst_then_the_rate() -> None:
    from deployments.http.control import RateLimiter

    limiter = RateLimiter(rate=2.0, burst=3)
    assert [limiter.allow(0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limiter.allow(0.0) == 0.5  # the next token in half a second
    assert limiter.allow(0.5) == 0.0 and limiter.allow(0.5) > 0
    assert [limiter.allow(100.0) for _ in range(4)][:3] == [0.0, 0.0, 0.0]  # refills to the burst, no more


def test_failed_authentications_are_limited_per_client_and_only_failures_count() -> None:
    from deployments.http.control import FailedAuthLimiter

    limiter = FailedAuthLimiter(rate=1.0, burst=3)
    # a client sending wrong tokens: a burst of 401s, then 429 until its bucket refills
    assert [limiter.failed("10.0.0.9", 0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limiter.failed("10.0.0.9", 0.0) == 1.0
    # another client is untouched by that flood
    assert limiter.failed("10.0.0.1", 0.0) == 0.0
    # and the flooding client gets one try a second
    assert limiter.failed("10.0.0.9", 2.0) == 0.0


def test_the_failed_auth_table_is_bounded_dropping_the_least_recent_client() -> None:
    from deployments.http.control import FailedAuthLimiter

    limiter = FailedAuthLimiter(rate=1.0, burst=1, max_clients=2)
    limiter.failed("a", 0.0)
    limiter.failed("b", 0.0)
    limiter.failed("a", 0.0)  # a is the most recent now
    limiter.failed("c", 0.0)  # b goes
    assert len(limiter) == 2
    assert limiter.failed("b", 0.0) == 0.0  # forgotten: a fresh burst
