"""The policy actor's memory, without Ray: latest report per replica, TTL expiry, operator
overrides, and the tick that runs `rules.decide`. Every method takes `now`.

Mutable on purpose (it is the shell around the pure rules): the actor owns exactly one
`FleetView` and calls it from one event loop, so no locking.
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from dataclasses import dataclass, replace

from policy.rules import decide, load_of
from policy.state import PolicyState, with_override
from policy.types import (
    Decision,
    FleetStatus,
    Observation,
    Override,
    PolicyConfig,
    Reason,
    ReplicaStatus,
    SetSpeculation,
    TickStats,
    UnknownReplicaError,
)

__all__ = ["FleetView", "TickResult"]

_EXPLAINED = (Reason.RULE_FLIP, Reason.OVERRIDE, Reason.MIN_ON_FLIP)


@dataclass(frozen=True)
class TickResult:
    """What one tick did."""

    actions: tuple[SetSpeculation, ...]
    expired: tuple[str, ...]
    decision_s: float  # wall time spent in decide()
    decision_cpu_s: float  # thread CPU time spent in decide() (excludes waiting for a core)


class FleetView:
    def __init__(self, config: PolicyConfig, *, started_at: float = 0.0, restarted: bool = False) -> None:
        self.config = config
        self._latest: dict[str, Observation] = {}
        self._state = PolicyState()
        self._why: dict[str, str] = {}  # replica -> text of its last flip
        self._started_at = started_at
        self._restarted = restarted
        self._last_tick_at: float | None = None
        self._decision_s: deque[float] = deque(maxlen=120)
        self._flips_total = 0
        self._expired_total = 0

    def report(self, obs: Observation, now: float) -> Decision:
        """Register (first time) or refresh a replica; answer with its desired mode as of the last tick.

        The report is re-stamped with `now`: replica clocks are not comparable. A replica this view
        does not know that reports an operator override (this actor restarted, or the replica
        expired) gets it back: overrides live in the actor's memory, and the replica carries a copy.
        """
        rid = obs.replica_id
        carried = obs.override
        unknown = rid not in self._latest and rid not in self._state.overrides
        if unknown and carried is not None and carried is not Override.AUTO:
            self._state = with_override(self._state, rid, carried)
        self._latest[rid] = replace(obs, reported_at=now)
        return self.decision(obs.replica_id)

    def decision(self, replica_id: str) -> Decision:
        obs = self._latest.get(replica_id)
        if obs is None:
            raise UnknownReplicaError(self._unknown(replica_id))
        override = self._state.overrides.get(replica_id, Override.AUTO)
        rs = self._state.replica(replica_id)
        if rs is None:  # registered since the last tick: keep what it runs
            return Decision(replica_id, obs.mode, Reason.NEW.value, 0, override)
        # until the replica has applied a flip, keep telling it why (later ticks say "rule keeps the mode")
        explain = rs.reason in _EXPLAINED or obs.mode is not rs.desired
        reason = self._why.get(replica_id, rs.reason.value) if explain else rs.reason.value
        return Decision(replica_id, rs.desired, reason, self._state.tick, override)

    def set_override(self, replica_id: str, override: Override) -> None:
        """Takes effect at the next tick; AUTO clears it."""
        if replica_id not in self._latest:
            raise UnknownReplicaError(self._unknown(replica_id))
        self._state = with_override(self._state, replica_id, override)

    def tick(self, now: float) -> TickResult:
        expired = self._expire(now)
        started, started_cpu = time.perf_counter(), time.thread_time()
        actions, self._state = decide(self._latest.values(), self._state, self.config, now)
        spent, spent_cpu = time.perf_counter() - started, time.thread_time() - started_cpu
        for a in actions:
            self._why[a.replica_id] = a.reason
        self._flips_total += len(actions)
        self._decision_s.append(spent)
        self._last_tick_at = now
        return TickResult(actions, expired, spent, spent_cpu)

    def status(self, now: float) -> FleetStatus:
        replicas = []
        for rid, obs in self._latest.items():
            rs = self._state.replica(rid)
            decision = self.decision(rid)
            replicas.append(
                ReplicaStatus(
                    replica_id=rid,
                    desired=decision.desired,
                    actual=obs.mode,
                    load=load_of(obs, self.config.load_metric),
                    running=obs.running,
                    waiting=obs.waiting,
                    accept_length=obs.accept_length,
                    flips=rs.flips if rs is not None else 0,
                    last_report_age_s=now - obs.reported_at,
                    override=self._state.overrides.get(rid, Override.AUTO),
                    patched=obs.patched,
                    stale=now - obs.reported_at > self.config.stale_after_s,
                    reason=decision.reason,
                    policy_source=obs.policy_source,
                    engine=obs.engine,
                    control_timeouts=obs.control_timeouts,
                )
            )
        window = list(self._decision_s)
        ticks = TickStats(
            ticks=self._state.tick,
            last_tick_age_s=None if self._last_tick_at is None else now - self._last_tick_at,
            last_decision_s=window[-1] if window else None,
            median_decision_s=statistics.median(window) if window else None,
            flips_total=self._flips_total,
            expired_total=self._expired_total,
        )
        return FleetStatus(tuple(replicas), self.config, ticks, self._restarted, now - self._started_at)

    def _expire(self, now: float) -> tuple[str, ...]:
        cutoff = now - self.config.ttl_s
        gone = tuple(rid for rid, obs in self._latest.items() if obs.reported_at < cutoff)
        for rid in gone:  # decide() forgets their state and overrides once they are not passed in
            del self._latest[rid]
            self._why.pop(rid, None)
        self._expired_total += len(gone)
        return gone

    def _unknown(self, replica_id: str) -> str:
        known = sorted(self._latest)
        sample = ", ".join(known[:5]) + (", ..." if len(known) > 5 else "")
        return (
            f"unknown replica {replica_id!r}: the policy knows {len(known)} replica(s) [{sample}]; "
            f"a replica registers by reporting and is forgotten {self.config.ttl_s:g} s after its last report"
        )
