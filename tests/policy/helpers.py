"""Small builders shared by the policy tests (plain data, no fakes)."""

from __future__ import annotations

from policy.types import Observation, Override, SpecMode

__all__ = ["obs"]


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
