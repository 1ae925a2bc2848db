"""The control surface's plain logic: bearer-token check, the override body, the status document.

No Ray here: the control routes fetch `FleetStatus` from the policy actor and hands it to
`status_document`; tests call these directly.
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import hmac
from typing import Any, Literal

from fastapi.security.utils import get_authorization_scheme_param
from pydantic import BaseModel, ConfigDict, Field

from patched_worker.state import SpeculationState
from policy.types import STALE_SOURCE, FleetStatus, Override, ReplicaStatus

__all__ = [
    "OVERRIDES",
    "AuthProblem",
    "FailedAuthLimiter",
    "OverrideRequest",
    "RateLimiter",
    "check_bearer",
    "engine_document",
    "replica_document",
    "status_document",
]

OVERRIDES = {"on": Override.FORCE_ON, "off": Override.FORCE_OFF, "auto": Override.AUTO}


class OverrideRequest(BaseModel):
    """Body of `POST /specflip/override`."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    replica_id: str = Field(
        ..., min_length=1, max_length=200, description="A replica id from /specflip/status, or '*' for all."
    )
    mode: Literal["on", "off", "auto"] = Field(
        ..., description="Force speculation on/off, or auto (the rule)."
    )


class RateLimiter:
    """A token bucket: `rate` calls per second on average, bursts of up to `burst`."""

    def __init__(self, rate: float, burst: int) -> None:
        self.rate, self.burst = rate, burst
        self._tokens: float = float(burst)
        self._at: float | None = None

    def allow(self, now: float) -> float:
        """0 if a call may go now (and take a token); else the seconds until one may."""
        if self._at is not None:
            self._tokens = min(float(self.burst), self._tokens + (now - self._at) * self.rate)
        self._at = now
        if self._tokens >= 1:
            self._tokens -= 1
            return 0.0
        return (1 - self._tokens) / self.rate


class FailedAuthLimiter:
    """Failed control authentications, limited per client (its address): a client sending wrong
    tokens gets 429 once it used up `burst` failures, then `rate` more a second; every other
    client is unaffected. Only failures are counted, and only after the token was checked: the
    right token always passes, from any client (a flood of wrong tokens never locks the operator
    out). At most `max_clients` addresses are kept, the least recently failed dropped first."""

    def __init__(self, rate: float, burst: int, max_clients: int = 4096) -> None:
        self.rate, self.burst, self.max_clients = rate, burst, max_clients
        self._buckets: collections.OrderedDict[str, RateLimiter] = collections.OrderedDict()

    def failed(self, client: str, now: float) -> float:
        """Count a failed authentication of `client`: 0 if it may still be told 401, else the
        seconds until it may (answer 429 meanwhile)."""
        bucket = self._buckets.pop(client, None) or RateLimiter(self.rate, self.burst)
        self._buckets[client] = bucket  # most recent last
        while len(self._buckets) > self.max_clients:
            self._buckets.popitem(last=False)
        return bucket.allow(now)

    def __len__(self) -> int:
        return len(self._buckets)


@dataclasses.dataclass(frozen=True)
class AuthProblem:
    status_code: int
    message: str


def check_bearer(authorization: str | None, token: str | None) -> AuthProblem | None:
    """None if `Authorization: Bearer <token>` matches the configured token."""
    if not token:
        return AuthProblem(
            403,
            "control endpoints are disabled: no control token is configured "
            "(set serve.control_token or SPECFLIP_CONTROL_TOKEN)",
        )
    scheme, given = get_authorization_scheme_param((authorization or "").strip())  # FastAPI's HTTPBearer's
    if scheme.lower() != "bearer" or not given:
        return AuthProblem(401, "missing bearer token: send 'Authorization: Bearer <token>'")
    if not hmac.compare_digest(given.encode(), token.encode()):
        return AuthProblem(401, "wrong bearer token")
    return None


def replica_document(r: ReplicaStatus) -> dict[str, Any]:
    """One replica as `/specflip/status` shows it."""
    return {
        "replica_id": r.replica_id,
        "mode": r.actual.value,
        "desired_mode": r.desired.value,
        "running": r.running,
        "waiting": r.waiting,
        "load": r.load,
        "accept_length": r.accept_length,
        "flips": r.flips,
        "patched": r.patched,
        "override": r.override.value,
        "policy_source": _policy_source(r),
        "stale": r.stale,
        "last_report_age_s": round(r.last_report_age_s, 3),
        "reason": r.reason,
        "engine": None if r.engine is None else engine_document(r.engine, r.control_timeouts),
    }


def _policy_source(r: ReplicaStatus) -> str | None:
    """What the replica reported it followed (actor, override, actor_cached, local_fallback), or
    STALE_SOURCE when its last report is stale; None before its first answer."""
    if r.stale:
        return STALE_SOURCE
    return None if r.policy_source is None else r.policy_source.value


def engine_document(e: SpeculationState, control_timeouts: int = 0) -> dict[str, Any]:
    """A replica's engine switch state as `/specflip/status` shows it."""
    return {
        # in effect for the next decode step, and the last asked for: they differ while a switch is
        # pending (it lands at the engine's next step; an idle engine's replica already reports it)
        "enabled": e.enabled,
        "requested": e.requested,
        "off_cuda_graphs": e.off_cuda_graphs,
        "off_cuda_graphs_reason": e.off_cuda_graphs_note,
        "off_cuda_graphs_bytes": e.off_cuda_graphs_bytes,
        "strategy": e.strategy.value,
        "strategy_configured": None if e.strategy_configured is None else e.strategy_configured.value,
        "strategy_fallback": e.strategy_fallback,
        "toggles": e.toggles,
        "resyncs": e.resyncs,
        "resyncs_timed": e.resyncs_timed,
        "resync_ms_total": round(e.resync_ms_total, 3),
        "last_resync_ms": None if e.last_resync_ms is None else round(e.last_resync_ms, 3),
        "decode_steps": {"on": e.on_steps, "off": e.off_steps},
        "generated_tokens": e.generated_tokens,
        "control_timeouts": control_timeouts,
        "slow_steps": e.slow_steps,
        "slow_step_log": [
            {"step": i, "kind": kind, "batch": bs, "host_ms": ms} for i, kind, bs, ms in e.slow_step_log
        ],
        "sglang_version": e.sglang_version,
    }


def _plain(value: Any) -> Any:
    return value.value if isinstance(value, enum.Enum) else value


def status_document(
    fleet: FleetStatus, *, enabled: bool, actor_name: str, expected_replicas: int | None = None
) -> dict[str, Any]:
    """The whole `/specflip/status` JSON. expected_replicas: how many the app was deployed with, so
    a client can tell "up" (all of them reporting) from "answering" (some of them)."""
    cfg = {name: _plain(value) for name, value in fleet.config}
    if not enabled:  # the actor runs a never-flipping rule then; show what the operator configured
        cfg.pop("rule", None)
        cfg.pop("goodput_margin", None)
    ticks = fleet.ticks
    return {
        "replicas": [replica_document(r) for r in sorted(fleet.replicas, key=lambda r: r.replica_id)],
        "expected_replicas": expected_replicas,
        "policy": {
            "enabled": enabled,
            "actor": actor_name,
            "reachable": True,
            "restarted": fleet.restarted,
            "uptime_s": round(fleet.uptime_s, 3),
            "ticks": ticks.ticks,
            "flips_total": ticks.flips_total,
            "last_tick_age_s": ticks.last_tick_age_s,
            "config": cfg,
        },
    }
