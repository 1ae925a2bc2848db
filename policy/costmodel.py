"""Per-mode engine cost model, fitted online from each replica's own reports. Pure.

An engine step costs `base + per_req * batch` seconds in each mode; a step yields one
token per request with speculation OFF and `accept_length` tokens per request ON
(SmartSpec/TurboSpec: goodput = accepted tokens / batch execution time). A report gives
a step time back: at output `tok_s` and mean batch `b`, `step = b * tokens_per_step / tok_s`.
Each replica's fit is weighted least squares over its reports (every report decays
both modes' older reports by `fit_decay`, so what a replica learnt about the mode it is
not in fades back to the prior: bounded re-exploration instead of a belief frozen by
one bad tick) plus a prior: two pseudo-reports on the config's
prior line at batch 1 and `batch_cap` (weight `prior_weight` each), so a replica that
only ever ran one batch size still gets a well-posed slope, and one never seen ON
predicts ON from the prior.

Columnar (numpy, one slot per replica): the fleet's fits update in a handful of array
operations per tick, which keeps `decide` within a few milliseconds at 1000 replicas.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from numpy.typing import NDArray

from policy.types import Observation, PolicyConfig, SpecMode

__all__ = ["FitTable", "GoodputView", "Prior", "goodput_tick", "predicted_tok_s", "prior_for"]

Floats = NDArray[np.float64]
_SUMS = 5  # n, sum x, sum y, sum x^2, sum xy  (x = batch, y = step seconds)


class Prior(NamedTuple):
    """The config's prior step-time line and the sums of its two pseudo-reports."""

    base_s: float
    per_req_s: float
    sums: tuple[float, float, float, float, float]


@functools.lru_cache(maxsize=64)
def prior_for(config: PolicyConfig, mode: SpecMode) -> Prior:
    if mode is SpecMode.ON:
        base, per_req = config.on_step_base_s, config.on_step_per_req_s
    else:
        base, per_req = config.off_step_base_s, config.off_step_per_req_s
    w = config.prior_weight
    x0, x1 = 1.0, max(float(config.batch_cap), 2.0)
    y0, y1 = base + per_req * x0, base + per_req * x1
    return Prior(
        base, per_req, (2 * w, w * (x0 + x1), w * (y0 + y1), w * (x0 * x0 + x1 * x1), w * (x0 * y0 + x1 * y1))
    )


def predicted_tok_s(base_s: float, per_req_s: float, batch: float, tokens_per_step: float) -> float:
    """Output tok/s of a replica whose step costs base + per_req * batch."""
    return batch * tokens_per_step / (base_s + per_req_s * batch)


def _frozen(a: Floats) -> Floats:
    a.flags.writeable = False
    return a


@dataclass(frozen=True, eq=False)
class FitTable:
    """Every replica's fit; slot i belongs to ids[i]. The arrays are read-only."""

    ids: tuple[str, ...]
    on: Floats  # (5, n) decayed sums of ON reports
    off: Floats  # (5, n) decayed sums of OFF reports
    accept: Floats  # (n,) last accept length reported; NaN: none yet
    fitted_at: Floats  # (n,) reported_at of the last report folded in; NaN: none

    @staticmethod
    def empty() -> FitTable:
        z = np.zeros((_SUMS, 0))
        return FitTable((), _frozen(z), _frozen(z.copy()), _frozen(np.zeros(0)), _frozen(np.zeros(0)))

    def aligned(self, ids: tuple[str, ...]) -> FitTable:
        """The same fits laid out in `ids` order; new replicas start empty, missing ones are dropped."""
        if ids == self.ids:
            return self
        slot = {rid: i for i, rid in enumerate(self.ids)}
        idx = np.array([slot.get(rid, -1) for rid in ids], dtype=np.intp)
        known = idx >= 0
        take = np.where(known, idx, 0)

        def gather(a: Floats, fill: float) -> Floats:
            if a.shape[-1] == 0:
                return np.full(a.shape[:-1] + (len(ids),), fill)
            return np.where(known, a[..., take], fill)

        return FitTable(
            ids,
            _frozen(gather(self.on, 0.0)),
            _frozen(gather(self.off, 0.0)),
            _frozen(gather(self.accept, np.nan)),
            _frozen(gather(self.fitted_at, np.nan)),
        )


class GoodputView(NamedTuple):
    """One tick of the goodput model: updated fits and per-replica predictions (slot order)."""

    table: FitTable
    on_tok_s: Floats
    off_tok_s: Floats
    batch: Floats  # the load the prediction is for, clipped to [1, batch_cap]
    accept: Floats  # the accept length it assumes


def _solve(sums: Floats, prior: Prior) -> tuple[Floats, Floats]:
    """Least-squares (base, per_req) per slot through its reports plus the prior pseudo-reports."""
    n, sx, sy, sxx, sxy = (sums[k] + prior.sums[k] for k in range(_SUMS))
    per_req = np.maximum((n * sxy - sx * sy) / (n * sxx - sx * sx), 0.0)  # det > 0: two prior batches
    base = np.maximum((sy - per_req * sx) / n, 1e-6)
    return base, per_req


def _fold(sums: Floats, new: Floats, in_mode: Floats, x: Floats, y: Floats, decay: float) -> Floats:
    """Decay every replica that reported this tick; add the point to those in this mode."""
    point = np.stack([np.ones_like(x), x, y, x * x, x * y])
    return np.where(new, sums * decay + np.where(in_mode, point, 0.0), sums)


def goodput_tick(
    table: FitTable, observations: list[Observation], loads: list[float], config: PolicyConfig
) -> GoodputView:
    """Fold this tick's reports into the fits and predict each replica's tok/s in both modes."""
    table = table.aligned(tuple(o.replica_id for o in observations))
    nan = float("nan")
    on_mode = np.array([o.mode is SpecMode.ON for o in observations], dtype=bool)
    seen_accept = np.array([nan if o.accept_length is None else o.accept_length for o in observations])
    tok_s = np.array([o.decode_tok_s or 0.0 for o in observations])
    batch_obs = np.array(
        [o.running if o.decode_batch is None else o.decode_batch for o in observations], float
    )
    at = np.array([o.reported_at for o in observations])

    # the engine's EMA only moves while ON, so an OFF replica reports its last ON value: use it
    accept = np.where(np.isnan(seen_accept), table.accept, seen_accept)
    a = np.where(np.isnan(accept), config.default_accept_length, accept)
    new = (tok_s > 0) & (batch_obs >= 1) & (at != table.fitted_at)  # NaN != x: never-fitted slots count
    step = batch_obs * np.where(on_mode, a, 1.0) / np.where(new, tok_s, 1.0)  # step = b * tokens/step / tok_s
    on = _fold(table.on, new, on_mode, batch_obs, step, config.fit_decay)
    off = _fold(table.off, new, ~on_mode, batch_obs, step, config.fit_decay)
    fitted_at = np.where(new, at, table.fitted_at)

    b = np.clip(np.array(loads, float), 1.0, float(config.batch_cap))
    on_base, on_per = _solve(on, prior_for(config, SpecMode.ON))
    off_base, off_per = _solve(off, prior_for(config, SpecMode.OFF))
    on_tok = b * a / (on_base + on_per * b)
    off_tok = b / (off_base + off_per * b)
    fits = FitTable(table.ids, _frozen(on), _frozen(off), _frozen(accept), _frozen(fitted_at))
    return GoodputView(fits, on_tok, off_tok, b, a)
