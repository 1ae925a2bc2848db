"""A `SpeculationState` for tests: an EAGLE-3 3/1/4 engine ON under warm_kv, with what a test sets."""

from __future__ import annotations

from typing import Any

from patched_worker.state import SpeculationState, Strategy


def speculation_state(**fields: Any) -> SpeculationState:
    base: dict[str, Any] = dict(
        enabled=True,
        requested=True,
        strategy=Strategy.WARM_KV,
        steps=3,
        topk=1,
        draft_tokens=4,
        toggles=0,
        accept_length_ema=2.5,
        on_steps=10,
        off_steps=0,
        resyncs=0,
        running=4,
        waiting=0,
    )
    return SpeculationState(**{**base, **fields})
