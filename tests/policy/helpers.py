"""Small builders shared by the policy tests (plain data, no fakes)."""

from __future__ import annotations

from policy.rules import decide
from policy.state import PolicyState
from policy.types import Observation, Override, PolicyConfig, Reason, SpecMode

__all__ = ["drive_one", "obs"]


def obs(
    replica_id: str,
    load: int,
    *,
    at: float,
    mode: SpecMode = SpecMode.ON,
    patched: bool = True,
    accept: float | None = 3.0,
    waiting: int = 0,
    tok_s: float | None = None,
    mode_age_s: float | None = None,
    override: Override | None = None,
) -> Observation:
    """An observation whose `running` is `load` (plus `waiting` queued)."""
    return Observation(
        replica_id=replica_id,
        running=load,
        waiting=waiting,
        mode=mode,
        patched=patched,
        accept_length=accept,
        decode_tok_s=tok_s,
        reported_at=at,
        mode_age_s=mode_age_s,
        override=override,
    )


def drive_one(
    config: PolicyConfig, rows: list[tuple[float, int, SpecMode, Reason]], start: SpecMode = SpecMode.ON
) -> None:
    """One replica, tick by tick: (now, load) in, (desired, reason) out; a flip emits exactly one action."""
    state, mode = PolicyState(), start
    for now, load, want, why in rows:
        actions, state = decide([obs("r", load, at=now, mode=mode)], state, config, now)
        got = state.replicas["r"]
        assert (got.desired, got.reason) == (want, why), f"tick at t={now}, load={load}"
        assert len(actions) == (1 if got.desired is not mode else 0), f"tick at t={now}"
        if actions:
            assert actions[0].enabled is (want is SpecMode.ON) and actions[0].reason
        mode = got.desired
