"""A replica's control loop: every tick read the engine's speculation state, report it (load,
mode, the engine's switch state, the policy source it followed) to the policy, and apply the
desired mode. Also the engine probe the health check uses.

Engine calls are blocking zmq round trips to the scheduler (up to one scheduler iteration),
so they run in a thread. At most one state read is in flight: a tick and a health check
that overlap share it, and a hung scheduler never piles up threads. A control call (state
read or switch) that gets no answer within `control_timeout_s` is logged, counted
(`control_timeouts`, reported with the engine state) and retried at the next tick.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from deployments.replica.engine import ReplicaEngine
from patched_worker.errors import SpeculationRpcError
from patched_worker.state import SpeculationState
from policy.routing import ReplicaStats
from policy.types import ClientDecision, ClientState, Observation, SpecMode

__all__ = ["EngineUnhealthy", "PolicyReporter", "SpeculationLoop"]

log = logging.getLogger(__name__)


class EngineUnhealthy(RuntimeError):
    """The engine did not answer a probe; the message says how."""


class PolicyReporter(Protocol):
    """What the loop needs of `policy.actor.PolicyClient`."""

    @property
    def state(self) -> ClientState: ...

    async def report_async(self, obs: Observation) -> ClientDecision: ...


def _is_rpc_refusal(err: BaseException) -> bool:
    """The scheduler answered but refused (an engine without EAGLE): alive, not switchable."""
    return isinstance(err, SpeculationRpcError)


class SpeculationLoop:
    def __init__(
        self,
        engine: ReplicaEngine,
        reporter: PolicyReporter,
        replica_id: str,
        *,
        tick_s: float,
        probe_timeout_s: float,
        control_timeout_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._engine, self._reporter, self.replica_id = engine, reporter, replica_id
        self._tick_s, self._timeout_s, self._clock = tick_s, probe_timeout_s, clock
        self._control_timeout_s = probe_timeout_s if control_timeout_s is None else control_timeout_s
        self._pending: asyncio.Future[SpeculationState] | None = None
        self._task: asyncio.Task[None] | None = None
        self.last_state: SpeculationState | None = None
        self.last_decision: ClientDecision | None = None
        self.last_error: str | None = None
        self.applied_flips = 0
        self.control_timeouts = 0  # control calls that got no answer in time
        self.last_step_s: float | None = None  # mean decode step seconds over the last tick
        # latency-class requests in flight here (the server counts them; the MIXED rule sizes from them)
        self.interactive_in_flight: Callable[[], int] = lambda: 0

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        """Start ticking on the running event loop (idempotent)."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"specflip-tick-{self.replica_id}"
            )

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _run(self) -> None:
        while True:
            started = self._clock()
            try:
                await self.tick()
            except Exception as err:  # one bad tick must not end the loop
                self.last_error = f"tick failed: {type(err).__name__}: {err}"[:300]
                log.exception("specflip tick failed on %s", self.replica_id)
            await asyncio.sleep(max(0.0, self._tick_s - (self._clock() - started)))

    # -- engine probe ------------------------------------------------------------------------
    async def read_state(self, timeout_s: float) -> SpeculationState:
        """The engine's speculation state; raises TimeoutError, or what the engine raised."""
        if self._pending is None or self._pending.done():
            self._pending = asyncio.ensure_future(asyncio.to_thread(self._engine.get_speculation_state))
        return await asyncio.wait_for(asyncio.shield(self._pending), timeout_s)

    async def check_health(self) -> None:
        """Probe the engine for real (a scheduler round trip); raise EngineUnhealthy if it fails."""
        if self._task is not None and self._task.done() and not self._task.cancelled():
            raise EngineUnhealthy(f"control loop ended: {self._task.exception()!r}")
        try:
            await self.read_state(self._timeout_s)
        except TimeoutError:
            raise EngineUnhealthy(
                f"engine did not answer a state probe within {self._timeout_s:g} s"
            ) from None
        except Exception as err:
            if not _is_rpc_refusal(err):
                raise EngineUnhealthy(f"engine probe failed: {type(err).__name__}: {err}") from None

    # -- one tick ----------------------------------------------------------------------------
    async def tick(self) -> ClientDecision | None:
        """Read state, report, apply. Returns the policy's answer (None if the engine did not answer)."""
        try:
            state: SpeculationState | None = await self.read_state(self._control_timeout_s)
        except TimeoutError:  # the loop's wait, or the engine's own (SpecFlipControlTimeout)
            self._timed_out("get_speculation_state")
            return None
        except Exception as err:
            if not _is_rpc_refusal(err):
                self.last_error = f"state read failed: {type(err).__name__}: {err}"[:300]
                return None
            state = None  # engine without EAGLE: report load, never switch
        obs = self._observation(state)
        if state is not None and self.last_state is not None:
            steps = state.decode_steps - self.last_state.decode_steps
            if steps > 0:
                self.last_step_s = (state.decode_seconds - self.last_state.decode_seconds) / steps
        decision = await self._reporter.report_async(obs)
        self.last_state, self.last_decision, self.last_error = state, decision, None
        want_on = decision.desired is SpecMode.ON
        if state is not None and state.patched and want_on != state.requested:
            switch = asyncio.to_thread(self._engine.set_speculation, want_on)
            try:
                await asyncio.wait_for(switch, self._control_timeout_s)
            except TimeoutError:  # it may still land: the next tick reads `requested` and retries if not
                self._timed_out("set_speculation")
                return decision
            self.applied_flips += 1
            log.info(
                "%s: speculation -> %s (%s: %s)",
                self.replica_id,
                decision.desired.value,
                decision.source.value,
                decision.reason,
            )
        return decision

    def _timed_out(self, call: str) -> None:
        self.control_timeouts += 1
        self.last_error = (
            f"{call} got no answer from the engine within {self._control_timeout_s:g} s "
            f"(control timeout #{self.control_timeouts}; retried next tick)"
        )
        log.warning("replica %s: %s", self.replica_id, self.last_error)

    def _observation(self, state: SpeculationState | None) -> Observation:
        if state is None:
            in_flight = len(getattr(self._engine.tokenizer_manager, "rid_to_state", {}))
            return Observation(
                self.replica_id,
                running=in_flight,
                waiting=0,
                mode=SpecMode.OFF,
                patched=False,
                accept_length=None,
                policy_source=None if self.last_decision is None else self.last_decision.source,
            )
        # a switch lands at the next decode step: an idle engine already runs the requested mode
        # for whatever comes next, a busy one the mode in effect
        on = state.requested if state.running + state.waiting == 0 else state.enabled
        tok_s, batch = _decode_rate(self.last_state, state)
        return Observation(
            self.replica_id,
            running=state.running,
            waiting=state.waiting,
            mode=SpecMode.ON if on else SpecMode.OFF,
            patched=state.patched,
            accept_length=state.accept_length_ema,
            decode_tok_s=tok_s,
            decode_batch=batch,
            policy_source=None if self.last_decision is None else self.last_decision.source,
            engine=dataclasses.replace(state, trace=[]),  # the record itself; the step trace stays home
            control_timeouts=self.control_timeouts,
            interactive=self.interactive_in_flight(),
        )

    async def routing_stats(
        self, timeout_s: float, wall_clock: Callable[[], float] = time.time
    ) -> ReplicaStats | None:
        """What Serve's request router sees of this replica (`record_routing_stats`): a fresh state
        read (the mode just requested, not the one at the last tick), else the last tick's; None
        for an engine that cannot switch (the router then falls back to power of two)."""
        try:
            state: SpeculationState | None = await self.read_state(timeout_s)
        except Exception:
            state = self.last_state
        if state is None or not state.patched:
            return None
        # a requested switch lands at the next decode step: new requests run the requested mode
        return ReplicaStats(
            mode=SpecMode.ON if state.requested else SpecMode.OFF,
            running=state.running,
            waiting=state.waiting,
            accept_length=state.accept_length_ema,
            step_s=self.last_step_s,
            at=wall_clock(),
        )

    def describe(self) -> dict[str, Any]:
        """This replica's own view, for logs and debugging."""
        s, d = self.last_state, self.last_decision
        return {
            "replica_id": self.replica_id,
            "mode": None if s is None else ("on" if s.enabled else "off"),
            "requested_mode": None if s is None else ("on" if s.requested else "off"),
            "desired_mode": None if d is None else d.desired.value,
            "policy_source": self._reporter.state.source.value,
            "applied_flips": self.applied_flips,
            "control_timeouts": self.control_timeouts,
            "last_error": self.last_error,
        }


def _decode_rate(before: SpeculationState | None, now: SpeculationState) -> tuple[float | None, float | None]:
    """Output tok/s over decode-step time since the last tick, and the mean batch of those steps."""
    if before is None or now.decode_steps <= before.decode_steps:
        return None, None
    seconds = now.decode_seconds - before.decode_seconds
    steps = now.decode_steps - before.decode_steps
    if seconds <= 0:
        return None, None
    tokens = now.decode_tokens - before.decode_tokens
    return tokens / seconds, (now.decode_requests - before.decode_requests) / steps
