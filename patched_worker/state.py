"""Plain data describing the speculation switch; no SGLang or torch imports."""

from __future__ import annotations

import enum
import json
from dataclasses import asdict, dataclass, field

__all__ = ["OffPrefill", "Strategy", "SwitchConfig", "SpeculationState"]


class Strategy(enum.StrEnum):
    """What happens to the draft model while speculation is OFF."""

    WARM_KV = "warm_kv"  # write only the draft layer's K/V for each new position (cheap, stays warm)
    FULL_EXTEND = "full_extend"  # run the draft forward every OFF step (upstream steps=0 behaviour)
    COLD = "cold"  # no draft work, no resync: a benchmark-only counter-example (refused unless allowed)


class OffPrefill(enum.StrEnum):
    """How a prefill keeps the draft's K/V while speculation is OFF under warm_kv."""

    KV_WRITE = "kv_write"  # the prompt's draft K/V written from the target's aux states, no draft forward
    DRAFT_FORWARD = "draft_forward"  # upstream's draft prefill (a full draft forward): for comparison


@dataclass(frozen=True)
class SwitchConfig:
    """Scheduler-side settings, handed to SGLang's spawned scheduler process."""

    strategy: Strategy = Strategy.WARM_KV
    start_enabled: bool = True
    accept_ema_alpha: float = 0.2
    trace_len: int = 256  # recent per-step records kept for state queries
    allow_cold: bool = False  # benchmark-only: permit Strategy.COLD (see setup_check.ALLOW_COLD_ENV)
    off_prefill: OffPrefill = OffPrefill.KV_WRITE  # warm_kv only (full_extend: draft forward; cold: nothing)

    def to_json(self) -> str:
        return json.dumps(asdict(self))  # the enums are str: JSON holds their values

    @classmethod
    def from_json(cls, text: str) -> SwitchConfig:
        raw = json.loads(text)
        raw["strategy"] = Strategy(raw["strategy"])
        raw["off_prefill"] = OffPrefill(raw.get("off_prefill", "kv_write"))
        return cls(**raw)


@dataclass(frozen=True)
class SpeculationState:
    """What `SpecFlipEngine.get_speculation_state()` returns (fields documented in docs/patched_worker.md)."""

    enabled: bool  # speculation in effect for the next decode step
    requested: bool  # last mode asked for (differs from `enabled` until the next decode step)
    strategy: Strategy  # draft upkeep in force while OFF (after any fallback)
    steps: int
    topk: int
    draft_tokens: int
    toggles: int  # flips applied so far
    accept_length_ema: float | None  # accepted tokens per verify while ON (EMA over steps)
    on_steps: int  # decode steps run with speculation (draft + verify)
    off_steps: int  # decode steps run as a plain decode (resync steps included)
    resyncs: int  # decode-mode draft resyncs launched (one per OFF -> ON flip, none under cold)
    running: int
    waiting: int
    patched: bool = True
    sglang_version: str = ""
    off_cuda_graphs: bool = False  # OFF steps replay plain DECODE CUDA graphs
    off_cuda_graphs_note: str = ""  # why not, when they do not
    off_cuda_graphs_bytes: int | None = None  # device memory the OFF graphs took at capture (None: no graphs)
    last_resync_ms: float | None = None  # duration of the last timed resync (device time on CUDA)
    # host time from the last flip's request (its RPC, handled between iterations) to the step it took
    # effect at (OFF: as that step starts; ON: once its resync step is launched): the scheduler's share
    # of a decision's latency
    last_flip_ms: float | None = None
    resync_ms_total: float = 0.0  # summed over timed resyncs
    resyncs_timed: int = 0  # resyncs whose duration is known (a resync still on the device is not yet)
    strategy_configured: Strategy | None = None  # what the config or the last set_strategy asked for
    strategy_fallback: str = ""  # why `strategy` differs from `strategy_configured` ("" when it does not)
    off_prefill: OffPrefill = OffPrefill.KV_WRITE  # how OFF prefills keep the draft K/V (under warm_kv)
    off_prefills: int = 0  # extend batches run while OFF without the draft forward
    # every token a decode step committed since the engine started, both modes (the referee's count)
    generated_tokens: int = 0
    # cumulative decode-step counters of steady decoding (a step right after a prefill and idle gaps
    # left out: the goodput rule's step rate): tokens committed, seconds, steps, requests summed
    decode_tokens: int = 0
    decode_seconds: float = 0.0
    decode_steps: int = 0
    decode_requests: int = 0
    # recent decode steps: (step index, mode "on"/"off"/"resync", batch size, mean accept length)
    trace: list[tuple[int, str, int, float]] = field(default_factory=list)
    # steps whose host call took >= switch.SLOW_STEP_S, and the most recent of them: (step index, kind
    # "prefill_on"/"prefill_off"/"on"/"off"/"resync"/"idle", batch size, host ms)
    slow_steps: int = 0
    slow_step_log: list[tuple[int, str, int, float]] = field(default_factory=list)

    @classmethod
    def from_json(cls, text: str) -> SpeculationState:
        raw = json.loads(text)
        raw["strategy"] = Strategy(raw["strategy"])
        raw["off_prefill"] = OffPrefill(raw.get("off_prefill", "kv_write"))
        if raw.get("strategy_configured") is not None:
            raw["strategy_configured"] = Strategy(raw["strategy_configured"])
        raw["trace"] = [tuple(t) for t in raw.get("trace", [])]
        raw["slow_step_log"] = [tuple(t) for t in raw.get("slow_step_log", [])]
        return cls(**raw)

    def to_json(self) -> str:
        return json.dumps(asdict(self))  # the enums are str: JSON holds their values
