"""Per-mode engine model for the fleet simulator, with defaults from measured H200 numbers
and a loader for measured curves. Pure.

Defaults (Llama-3.1-8B shapes on one H200, bf16, CUDA graphs; ../shared/gpu/README.md):
- OFF: plain-engine output tok/s at batch N = 1, 8, 32, 64, 128: 206, 1578, 5126, 8665,
  12636, read as seconds per decode step = N / tok_s (4.9 ms at 1 .. 10.1 ms at 128).
- ON: EAGLE-3 (topk 4, 16 draft tokens) steps cost 7.25 ms + 0.418 ms x batch whatever the
  acceptance; a step yields `accept_length` tokens per request. Calibrated so that at
  accept 3 speculation gives ~1.9x the tok/s of plain at batch 1 (TPOT ~1.9x lower) and
  ~0.5x at batch 128, consistent with the 773 vs 354 tok/s saturated deployment in
  DESIGN.md. (The measured EAGLE-3 column in the README used a random draft, accept ~1.)
- Prefill (not in that table): 2 ms + 15 us per prompt token, x1.1 with speculation ON
  (draft extend); re-enabling speculation costs one draft forward (2 ms).

Measured curves replace the defaults: CSV with columns `mode,batch,tok_s[,accept_length]`
or JSON (a list of such objects, or {"points": [...], "accept_length": a}).
"""

from __future__ import annotations

import bisect
import csv
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from policy.types import SpecMode

__all__ = ["EngineModel", "StepCurve", "default_model", "load_calibration"]

_PLAIN_H200 = ((1, 206.0), (8, 1578.0), (32, 5126.0), (64, 8665.0), (128, 12636.0))
_EAGLE_BASE_S, _EAGLE_PER_REQ_S = 7.25e-3, 4.18e-4


@dataclass(frozen=True)
class StepCurve:
    """Seconds per decode step against batch size: piecewise linear through the points,
    extended along the end segments."""

    batches: tuple[float, ...]
    step_s: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.batches) < 2 or len(self.batches) != len(self.step_s):
            raise ValueError("StepCurve needs at least two (batch, step_s) points")
        if list(self.batches) != sorted(set(self.batches)) or min(self.step_s) <= 0:
            raise ValueError("StepCurve batches must be distinct and increasing, step times > 0")

    @staticmethod
    def from_tok_s(points: Iterable[tuple[float, float]], tokens_per_step: float) -> StepCurve:
        """From measured (batch, output tok/s) with `tokens_per_step` tokens per request per step."""
        pts = sorted((float(b), float(b) * tokens_per_step / float(t)) for b, t in points)
        return StepCurve(tuple(b for b, _ in pts), tuple(s for _, s in pts))

    def at(self, batch: float) -> float:
        xs, ys = self.batches, self.step_s
        i = min(max(bisect.bisect_right(xs, batch), 1), len(xs) - 1)
        x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
        return max(y0 + (y1 - y0) * (batch - x0) / (x1 - x0), 1e-6)


@dataclass(frozen=True)
class EngineModel:
    """One replica's engine: decode step cost per mode, prefill cost, acceptance, batch cap."""

    off: StepCurve
    on: StepCurve
    accept_length: float = 3.0  # tokens per request per ON step, bonus token included
    max_running: int = 64
    prefill_base_s: float = 2e-3
    prefill_per_token_s: float = 1.5e-5
    on_prefill_factor: float = 1.1
    resync_s: float = 2e-3

    def __post_init__(self) -> None:
        if self.accept_length < 1 or self.max_running < 1:
            raise ValueError("EngineModel needs accept_length >= 1 and max_running >= 1")

    def decode_step_s(self, mode: SpecMode, batch: float) -> float:
        return (self.on if mode is SpecMode.ON else self.off).at(batch)

    def tokens_per_step(self, mode: SpecMode) -> float:
        return self.accept_length if mode is SpecMode.ON else 1.0

    def prefill_s(self, prompt_tokens: int, mode: SpecMode) -> float:
        cost = self.prefill_base_s + self.prefill_per_token_s * prompt_tokens
        return cost * (self.on_prefill_factor if mode is SpecMode.ON else 1.0)

    def output_tok_s(self, mode: SpecMode, batch: float) -> float:
        """Steady decode output tok/s at this batch (no prefill)."""
        return batch * self.tokens_per_step(mode) / self.decode_step_s(mode, batch)


def default_model(accept_length: float = 3.0, max_running: int = 64) -> EngineModel:
    on_batches = (1.0, 8.0, 32.0, 64.0, 128.0)
    on = StepCurve(on_batches, tuple(_EAGLE_BASE_S + _EAGLE_PER_REQ_S * b for b in on_batches))
    return EngineModel(StepCurve.from_tok_s(_PLAIN_H200, 1.0), on, accept_length, max_running)


def load_calibration(path: str | Path, base: EngineModel | None = None) -> EngineModel:
    """Replace the default curves with measured ones (either mode may be missing: it keeps its default).

    ON rows convert tok/s to step time with the row's accept_length, else the file's, else the model's.
    """
    base = base or default_model()
    p = Path(path)
    accept = base.accept_length
    if p.suffix.lower() == ".json":
        data = json.loads(p.read_text())
        if isinstance(data, dict):
            accept = float(data.get("accept_length", accept))
            data = data["points"]
        rows: Sequence[dict] = data
    else:
        with p.open(newline="") as f:
            rows = list(csv.DictReader(f))
    by_mode: dict[SpecMode, list[tuple[float, float]]] = {SpecMode.ON: [], SpecMode.OFF: []}
    for row in rows:
        try:
            mode = SpecMode(str(row["mode"]).strip().lower())
            batch, tok_s = float(row["batch"]), float(row["tok_s"])
            row_accept = float(row.get("accept_length") or accept) if mode is SpecMode.ON else 1.0
        except (KeyError, ValueError) as err:
            raise ValueError(f"{p}: bad calibration row {row!r}: need mode (on/off), batch, tok_s") from err
        by_mode[mode].append((batch, batch * row_accept / tok_s))  # (batch, step seconds)
    curves = {
        m: StepCurve(tuple(b for b, _ in sorted(v)), tuple(s for _, s in sorted(v)))
        for m, v in by_mode.items()
        if v
    }
    return replace(
        base,
        off=curves.get(SpecMode.OFF, base.off),
        on=curves.get(SpecMode.ON, base.on),
        accept_length=accept,
    )
