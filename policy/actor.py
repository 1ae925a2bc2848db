"""The Ray shell around the pure policy: the `SpeculationPolicy` actor and the `PolicyClient`
each replica uses to talk to it. The only module of `policy/` that imports ray.

Ticking. The actor is an async actor with a background task that runs `rules.decide`
over the latest report of every replica each `config.tick_s`. `report()` stores the
report and answers at once from the last tick's decision, so a replica's round trip
never waits for a decision and fleet limits (k flips per tick) mean one thing: one
periodic decision over the whole fleet. A replica's flip therefore lands within one
actor tick plus one replica tick. The background task starts with the first call (also
after a restart); `tick_now()` runs a tick on demand (operators, tests).

Restarts. Create it with `get_or_create_policy_actor` (named, `max_restarts=-1`, outside the
creating replica's placement group, so that replica's death does not take it along). A
restarted actor starts empty and rebuilds its view from the next reports: replicas
re-register by reporting, and `Observation.mode_age_s` (filled in by PolicyClient)
restores each replica's dwell. Operator overrides outlive a restart: each replica's
PolicyClient reports back the override the actor last answered with (`Observation.override`),
and an actor that does not know the replica takes it back from that first report
(`FleetView.report`); `status().restarted` says the view was rebuilt. `max_task_retries=0`:
a report lost with the actor is not replayed (the replica's next tick sends a fresh one).

Fallback. `PolicyClient` gives each report a short timeout. After `fail_after`
consecutive failures it decides locally with the same pure rules on the replica's own
load (fleet limits off) and reports `DecisionSource.LOCAL_FALLBACK`; it re-resolves the
named actor on every later tick and returns to `ACTOR` (`OVERRIDE` while an operator override
holds) as soon as one answers.
"""

from __future__ import annotations

import asyncio
import logging
import time
import warnings
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import ray

from policy.fleet import FleetView
from policy.metrics import PREFIX_FAMILY, REASONS_FAMILY, ROUTED_FAMILY, PolicyMetrics
from policy.rules import decide
from policy.state import PolicyState, seed_replica
from policy.types import (
    ClientDecision,
    ClientState,
    Decision,
    DecisionSource,
    FleetStatus,
    Observation,
    Override,
    PolicyConfig,
    SetSpeculation,
    SpecMode,
)

__all__ = ["PolicyClient", "SpeculationPolicy", "get_or_create_policy_actor"]

log = logging.getLogger(__name__)


class SpeculationPolicy:
    """The central policy: gathers reports, ticks the rules, answers, exposes status and metrics.

    A plain class: `ray.remote(SpeculationPolicy)` (or `get_or_create_policy_actor`) makes the
    actor, and tests can subclass it (e.g. to inject a slow restart).
    """

    def __init__(self, config: PolicyConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        restarted = _was_restarted()
        self._fleet = FleetView(config, started_at=clock(), restarted=restarted)
        self._metrics = PolicyMetrics(lambda: self._fleet.status(self._clock()))
        self._ticker: asyncio.Task[None] | None = None
        self._draining = False
        if restarted:
            log.warning("policy actor restarted: rebuilding the fleet view from the next reports")

    async def report(self, obs: Observation) -> Decision:
        """Register on first report; answer with the desired mode as of the last tick (and, once
        `drain` was called, that the app is draining)."""
        self._ensure_ticking()
        decision = self._fleet.report(obs, self._clock())
        return replace(decision, draining=True) if self._draining else decision

    async def drain(self) -> None:
        """The app is shutting down: every replica answers new requests 503 (with Retry-After)
        from its next report on, while its in-flight requests finish (deployments.local)."""
        self._draining = True
        log.info("draining: replicas refuse new requests from their next report")

    async def set_override(self, replica_id: str, override: Override) -> None:
        """Force a replica ON/OFF (AUTO clears). Raises UnknownReplicaError for an unknown id."""
        self._ensure_ticking()
        self._fleet.set_override(replica_id, override)
        log.info("override %s -> %s", replica_id, override.value)

    async def status(self) -> FleetStatus:
        return self._fleet.status(self._clock())

    async def configure(self, config: PolicyConfig) -> bool:
        """Take `config` (an app redeployed with new policy settings finds the actor of its name
        still running: it is detached). Whether anything changed."""
        if config == self._fleet.config:
            return False
        self._fleet.config = config
        log.info("policy config replaced: %s", config)
        return True

    async def metrics_text(self) -> str:
        """Prometheus text exposition of this actor's own registry (with the request router's
        pushed counts, `push_metrics`). The replicas' HTTP metrics are not here: Ray exports them."""
        return self._metrics.text()

    async def status_view(
        self, routing: bool = True
    ) -> tuple[FleetStatus, list[dict[tuple[str, ...], float]]]:
        """What a replica's /specflip/status needs, in one round trip: the fleet status and (with
        `routing`) the request router's totals: requests routed by (class, mode), its decisions by
        (reason,) and prefix affinity by (result,)."""
        sums: list[dict[tuple[str, ...], float]] = []
        if routing:
            sums = [
                self._metrics.router.totals(ROUTED_FAMILY, "class", "mode"),
                self._metrics.router.totals(REASONS_FAMILY, "reason"),
                self._metrics.router.totals(PREFIX_FAMILY, "result"),
            ]
        return self._fleet.status(self._clock()), sums

    async def push_metrics(self, source: str, families: list[Any]) -> None:
        """The request router's routing counts (prometheus_client `Metric`s) from process `source`
        (`router:<pid>`), replacing its last. Replicas push nothing: Ray exports their HTTP metrics."""
        self._metrics.router.push(source, families)

    async def tick_now(self) -> tuple[SetSpeculation, ...]:
        """Run one tick at once (the background task keeps its own schedule)."""
        self._ensure_ticking()
        return self._tick()

    def _tick(self) -> tuple[SetSpeculation, ...]:
        result = self._fleet.tick(self._clock())
        self._metrics.observe_tick(result.decision_s, len(result.expired))
        for a in result.actions:
            log.info("flip %s -> %s: %s", a.replica_id, "on" if a.enabled else "off", a.reason)
        if result.expired:
            log.info("expired replicas (no report for %.0f s): %s", self._fleet.config.ttl_s, result.expired)
        return result.actions

    def _ensure_ticking(self) -> None:
        if self._ticker is None or self._ticker.done():
            self._ticker = asyncio.get_running_loop().create_task(self._tick_forever())

    async def _tick_forever(self) -> None:
        while True:
            await asyncio.sleep(self._fleet.config.tick_s)
            try:
                self._tick()
            except Exception:  # a bad tick must not stop the next one
                log.exception("policy tick failed")


def _was_restarted() -> bool:
    try:
        with warnings.catch_warnings():  # Ray 2.60 warns about its own internal use of actor_id here
            warnings.simplefilter("ignore", DeprecationWarning)
            return bool(ray.get_runtime_context().was_current_actor_reconstructed)
    except Exception:  # not inside an actor (unit use of the class)
        return False


def get_or_create_policy_actor(
    name: str,
    config: PolicyConfig,
    namespace: str | None = None,
    *,
    actor_cls: type[SpeculationPolicy] = SpeculationPolicy,
    detached: bool = False,
    num_cpus: float = 0.0,
) -> Any:
    """The named policy actor, created if missing. An existing actor keeps its own config."""
    remote_cls: Any = ray.remote(actor_cls)
    return remote_cls.options(
        name=name,
        namespace=namespace,
        get_if_exists=True,
        lifetime="detached" if detached else None,
        max_restarts=-1,
        max_task_retries=0,  # a lost report is superseded by the replica's next tick
        num_cpus=num_cpus,
        # never in the creator's placement group: a replica creates the actor, and Ray LLM's
        # replica groups capture the actors created inside them; when that replica died, Serve
        # removed its group, Ray killed the actor with it and never placed its restart
        # (tests/policy/test_actor.py::test_the_actor_outlives_the_placement_group_...)
        scheduling_strategy="DEFAULT",
    ).remote(config)


class PolicyClient:
    """Used inside a replica process: one `report` per replica tick, always an answer.

    `report` (sync, for threads) and `report_async` (for the replica's event loop) never
    raise on actor trouble: they hand back the actor's answer, its last answer (first
    failures), or a local decision (`fail_after` failures in a row), and say which.
    """

    def __init__(
        self,
        replica_id: str,
        actor_name: str,
        fallback: PolicyConfig,
        namespace: str | None = None,
        fail_after: int = 3,
        *,
        timeout_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if fail_after < 1 or timeout_s <= 0:
            raise ValueError(
                f"PolicyClient: need fail_after >= 1 and timeout_s > 0, got {fail_after}, {timeout_s}"
            )
        self.replica_id = replica_id
        self._actor_name, self._namespace = actor_name, namespace
        self._fail_after, self._timeout_s, self._clock = fail_after, timeout_s, clock
        # one replica: no fleet
        self._local_config = fallback.replace(min_on_replicas=0, max_flips_per_tick=None)
        self._handle: Any = None
        self._failures = 0
        self._last_error: str | None = None
        self._source = DecisionSource.ACTOR
        self._desired: SpecMode | None = None
        self._desired_since: float | None = None
        self._mode: SpecMode | None = None
        self._mode_since: float | None = None  # when the engine last changed mode (None: not seen)
        self._local: PolicyState | None = None
        self._override = Override.AUTO  # the operator override the actor last answered with

    @property
    def state(self) -> ClientState:
        return ClientState(self._source, self._failures, self._last_error, self._desired)

    def report(self, obs: Observation) -> ClientDecision:
        obs = self._stamp(obs)
        try:
            handle = self._resolve()
            decision = ray.get(handle.report.remote(obs), timeout=self._timeout_s)
        except Exception as err:  # any failed round trip counts, whatever Ray calls it
            return self._failed(obs, err)
        return self._answered(decision)

    async def report_async(self, obs: Observation) -> ClientDecision:
        obs = self._stamp(obs)
        try:
            handle = self._handle if self._handle is not None else await asyncio.to_thread(self._resolve)
            ref = handle.report.remote(obs)
            decision = await asyncio.wait_for(asyncio.wrap_future(ref.future()), self._timeout_s)
        except Exception as err:
            return self._failed(obs, err)
        return self._answered(decision)

    def _resolve(self) -> Any:
        if self._handle is None:
            self._handle = ray.get_actor(self._actor_name, namespace=self._namespace)
        return self._handle

    def _stamp(self, obs: Observation) -> Observation:
        if obs.replica_id != self.replica_id:
            raise ValueError(f"PolicyClient for {self.replica_id!r} got a report for {obs.replica_id!r}")
        now = self._clock()
        if obs.mode is not self._mode:
            if self._mode is not None:  # a flip seen by this client (not the mode the engine started in)
                self._mode_since = now
            self._mode = obs.mode
        age = obs.mode_age_s
        if age is None and self._mode_since is not None:
            age = now - self._mode_since
        override = obs.override if obs.override is not None else self._override
        return replace(obs, reported_at=now, mode_age_s=age, override=override)

    def _answered(self, decision: Decision) -> ClientDecision:
        if self._source in (DecisionSource.ACTOR_CACHED, DecisionSource.LOCAL_FALLBACK):
            log.warning("policy actor reachable again after %d failed reports", self._failures)
        source = DecisionSource.OVERRIDE if decision.overridden else DecisionSource.ACTOR
        self._failures, self._source, self._local = 0, source, None
        self._override = decision.override
        self._set_desired(decision.desired)
        return ClientDecision(
            decision.desired, source, decision.reason, decision.overridden, 0, draining=decision.draining
        )

    def _failed(self, obs: Observation, err: BaseException) -> ClientDecision:
        self._failures += 1
        self._handle = None  # re-resolve the named actor next tick
        self._last_error = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:200]
        if self._failures < self._fail_after:
            self._source = DecisionSource.ACTOR_CACHED
            desired = self._desired if self._desired is not None else obs.mode
            self._set_desired(desired)
            why = f"policy actor unreachable ({self._last_error}); keeping its last answer"
            overridden = self._override is not Override.AUTO
            return ClientDecision(desired, DecisionSource.ACTOR_CACHED, why, overridden, self._failures)
        if self._source is not DecisionSource.LOCAL_FALLBACK:
            log.warning("policy actor unreachable for %d reports: deciding locally", self._failures)
        self._source = DecisionSource.LOCAL_FALLBACK
        return self._decide_locally(obs)

    def _decide_locally(self, obs: Observation) -> ClientDecision:
        if self._override is not Override.AUTO:  # the operator's word outlives the actor
            desired = SpecMode.ON if self._override is Override.FORCE_ON else SpecMode.OFF
            self._set_desired(desired)
            why = (
                f"local fallback after {self._failures} failed reports ({self._last_error}): "
                f"operator override {self._override.value} kept"
            )
            return ClientDecision(desired, DecisionSource.LOCAL_FALLBACK, why, True, self._failures)
        if self._local is None:  # start from what the actor last wanted, dwell included
            start = self._desired if self._desired is not None else obs.mode
            last_flip = self._desired_since if self._desired_since is not None else self._mode_since
            self._local = seed_replica(PolicyState(), self.replica_id, start, last_flip)
        actions, self._local = decide([obs], self._local, self._local_config, obs.reported_at)
        rs = self._local.replica(self.replica_id)
        assert rs is not None  # decide() keeps every replica it was given
        self._set_desired(rs.desired)
        rule = actions[0].reason if actions else rs.reason.value
        why = f"local fallback after {self._failures} failed reports ({self._last_error}): {rule}"
        return ClientDecision(rs.desired, DecisionSource.LOCAL_FALLBACK, why, False, self._failures)

    def _set_desired(self, desired: SpecMode) -> None:
        if desired is not self._desired:
            if self._desired is not None:  # a change, not the first answer
                self._desired_since = self._clock()
            self._desired = desired
