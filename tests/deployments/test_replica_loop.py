"""Failure paths of a replica's control loop and health probe, with failure-injecting engines
(the happy path runs against the real engine in test_serve_app.py). No Ray cluster: the policy
client cannot reach any actor, which is itself one of the failures."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import replace
from typing import Any

import pytest
import ray

from deployments.replica.loop import EngineUnhealthy, SpeculationLoop
from patched_worker.engine import SpeculationRpcError
from policy.actor import PolicyClient
from policy.types import DecisionSource, PolicyConfig, SpecMode
from tests.engine_state import speculation_state


@pytest.fixture(autouse=True)
def no_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    """The policy client must find no actor: keep ray.get_actor from starting a local Ray. When the
    package's shared app already runs Ray in this process, "no-such-actor" is still not found."""
    import ray._private.auto_init_hook as hook

    monkeypatch.setattr(hook, "enable_auto_connect", False)
    if ray.is_initialized():
        with pytest.raises(ValueError):
            ray.get_actor("no-such-actor")


class _TokenizerManager:
    def __init__(self, in_flight: int) -> None:
        self.rid_to_state = {f"r{i}": None for i in range(in_flight)}


class HangingEngine:
    """Failure injection: the scheduler never answers a state RPC (until released)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.calls = 0
        self.tokenizer_manager = _TokenizerManager(0)

    def get_speculation_state(self) -> Any:
        self.calls += 1
        self.release.wait(30)
        raise RuntimeError("released")

    def set_speculation(self, enabled: bool) -> None:
        raise AssertionError("never switched")


class RefusingEngine(HangingEngine):
    """Failure injection: an engine without EAGLE (the scheduler answers, but refuses)."""

    def get_speculation_state(self) -> Any:
        self.calls += 1
        raise SpeculationRpcError("speculative decoding is not enabled on this engine")


class BrokenEngine(HangingEngine):
    """Failure injection: the state RPC fails outright (e.g. a dead scheduler socket)."""

    def get_speculation_state(self) -> Any:
        self.calls += 1
        raise ConnectionError("scheduler gone")


class HangingSwitchEngine(HangingEngine):
    """Failure injection: state reads answer (a busy engine, ON), a speculation switch never does."""

    def __init__(self) -> None:
        super().__init__()
        self.switches = 0

    def get_speculation_state(self) -> Any:
        self.calls += 1
        return _state(running=9)

    def set_speculation(self, enabled: bool) -> None:
        self.switches += 1
        self.release.wait(30)


_state = speculation_state


def _loop(engine: Any, timeout_s: float = 0.3) -> SpeculationLoop:
    client = PolicyClient("r1", "no-such-actor", PolicyConfig(high=4, low=1), fail_after=2, timeout_s=0.2)
    return SpeculationLoop(engine, client, "r1", tick_s=0.05, probe_timeout_s=timeout_s)  # type: ignore[arg-type]


def test_a_hung_engine_fails_the_health_check_in_time_and_probes_never_pile_up() -> None:
    engine = HangingEngine()
    loop = _loop(engine)

    async def run() -> list[float]:
        took = []
        for _ in range(3):
            started = time.monotonic()
            with pytest.raises(EngineUnhealthy, match="did not answer a state probe within 0.3 s"):
                await loop.check_health()
            took.append(time.monotonic() - started)
        # a tick's state read times out the same way: counted, said in one line, not a hang
        assert await loop.tick() is None and loop.control_timeouts == 1
        assert "get_speculation_state got no answer from the engine within 0.3 s" in (loop.last_error or "")
        engine.release.set()
        return took

    took = asyncio.run(run())
    assert all(0.25 < t < 5.0 for t in took), took  # the timeout, not the hang (30 s)
    assert engine.calls == 1  # one RPC in flight, shared by every probe and tick while it hangs


def test_an_engine_without_eagle_is_healthy_reports_unpatched_and_is_never_switched() -> None:
    engine = RefusingEngine()
    engine.tokenizer_manager = _TokenizerManager(in_flight=9)
    loop = _loop(engine)

    async def run() -> None:
        await loop.check_health()  # the scheduler answered: alive
        for _ in range(3):  # the actor is unreachable too: cached answer, then the local rule
            decision = await loop.tick()
            assert decision is not None and decision.desired is SpecMode.OFF

    asyncio.run(run())
    assert loop.last_decision is not None and loop.last_decision.source is DecisionSource.LOCAL_FALLBACK
    assert loop.describe()["policy_source"] == "local_fallback" and loop.applied_flips == 0


def test_a_broken_engine_fails_the_health_check_with_the_reason_and_the_loop_keeps_ticking() -> None:
    engine = BrokenEngine()
    loop = _loop(engine)

    async def run() -> None:
        with pytest.raises(EngineUnhealthy, match="engine probe failed: ConnectionError: scheduler gone"):
            await loop.check_health()
        loop.start()
        deadline = time.monotonic() + 10
        while engine.calls < 3 and time.monotonic() < deadline:  # ticks go on after failed reads
            await asyncio.sleep(0.05)
        assert loop._task is not None and not loop._task.done()  # noqa: SLF001 - the loop survives
        loop.stop()

    asyncio.run(run())
    assert engine.calls >= 3 and "scheduler gone" in (loop.last_error or "")


def test_decode_rate_is_tokens_over_decode_seconds_between_two_states() -> None:
    from dataclasses import replace

    from deployments.replica.loop import _decode_rate

    before = _state(decode_tokens=100, decode_seconds=2.0, decode_steps=10, decode_requests=40)
    after = replace(before, decode_tokens=400, decode_seconds=3.5, decode_steps=40, decode_requests=160)
    assert _decode_rate(before, after) == (300 / 1.5, 4.0)
    assert _decode_rate(None, after) == (None, None)
    assert _decode_rate(after, after) == (None, None)  # no decode step in between: nothing measured


def test_a_switch_that_times_out_is_logged_counted_reported_and_retried_next_tick(
    caplog: pytest.LogCaptureFixture,
) -> None:
    engine = HangingSwitchEngine()
    loop = _loop(engine)  # control timeout 0.3 s; the policy is unreachable: local rule, high=4

    async def run() -> list[float]:
        took = []
        for _ in range(4):
            started = time.monotonic()
            await loop.tick()
            took.append(time.monotonic() - started)
        return took

    with caplog.at_level("WARNING", logger="deployments.replica.loop"):
        took = asyncio.run(run())
    engine.release.set()
    # tick 1 keeps the cached mode (ON); ticks 2-4 decide OFF locally (load 9 >= 4) and try to switch
    assert engine.switches == 3 and loop.control_timeouts == 3 and loop.applied_flips == 0
    assert max(took) < 5.0, took  # the timeout, not the hang (30 s)
    lines = [r.getMessage() for r in caplog.records if "set_speculation got no answer" in r.getMessage()]
    assert len(lines) == 3 and "within 0.3 s" in lines[0] and "\n" not in lines[0]
    report = loop._observation(_state(running=9))  # noqa: SLF001 - what the next report carries
    assert report.engine is not None and report.control_timeouts == 3
    assert report.policy_source is DecisionSource.LOCAL_FALLBACK  # the source it followed, as reported


def test_the_report_carries_the_engine_state_and_the_source_followed() -> None:
    engine = HangingSwitchEngine()
    loop = _loop(engine)
    state = _state(
        toggles=3,
        resyncs=2,
        resyncs_timed=1,
        resync_ms_total=4.5,
        last_resync_ms=4.5,
        on_steps=30,
        off_steps=12,
        off_cuda_graphs=False,
        off_cuda_graphs_note="cpu: no CUDA graphs",
        sglang_version="0.5.17",
    )
    obs = loop._observation(state)  # noqa: SLF001
    assert obs.policy_source is None  # no answer yet
    e = obs.engine
    assert e is not None
    assert (e.toggles, e.resyncs, e.resyncs_timed, e.resync_ms_total, e.last_resync_ms) == (3, 2, 1, 4.5, 4.5)
    assert (e.on_steps, e.off_steps, e.strategy, e.strategy_fallback) == (30, 12, "warm_kv", "")
    assert (e.off_cuda_graphs, e.off_cuda_graphs_note, obs.control_timeouts) == (
        False,
        "cpu: no CUDA graphs",
        0,
    )
    assert e == replace(state, trace=[])  # the scheduler's own record, its step trace left home
