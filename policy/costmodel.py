"""Per-mode engine cost model, fitted online from each replica's own reports. Pure.

An engine step costs `base + per_req * batch` seconds in each mode; a step yields one
token per request with speculation OFF and `accept_length` tokens per request ON
(SmartSpec/TurboSpec: goodput = accepted tokens / batch execution time). A report gives
a step time back: at output `tok_s` and mean batch `b`, `step = b * tokens_per_step / tok_s`.
Each replica's fit is weighted least squares over its reports plus a prior: two
pseudo-reports on the config's prior line at batch 1 and `batch_cap` (weight
`prior_weight` each), so a replica that only ever ran one batch size still gets a
well-posed slope, and one never seen ON predicts ON from the prior. Every report decays
both modes' older reports by `fit_decay`, so what a replica learnt about the mode it is
not in fades back to the prior: bounded re-exploration, not a belief frozen by one bad tick.

Columnar (numpy, one slot per replica): the fleet's fits update in a handful of array
operations per tick, which keeps `decide` within a few milliseconds at 1000 replicas.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from policy.reports import Floats, Reports, frozen
from policy.types import PolicyConfig

__all__ = ["FitTable", "GoodputView", "crossover_batch", "goodput_tick"]

_SUMS = 5  # n, sum x, sum y, sum x^2, sum xy  (x = batch, y = step seconds)


@functools.lru_cache(maxsize=64)
def _prior_sums(config: PolicyConfig) -> Floats:
    """Per mode (ON, OFF), the sums of the two pseudo-reports on the config's prior line: (2, 5, 1)."""
    bases = (config.on_step_base_s, config.off_step_base_s)
    per_reqs = (config.on_step_per_req_s, config.off_step_per_req_s)
    w = config.prior_weight
    x0, x1 = 1.0, max(float(config.batch_cap), 2.0)
    rows = []
    for base, per_req in zip(bases, per_reqs, strict=True):
        y0, y1 = base + per_req * x0, base + per_req * x1
        rows.append([2 * w, w * (x0 + x1), w * (y0 + y1), w * (x0 * x0 + x1 * x1), w * (x0 * y0 + x1 * y1)])
    return frozen(np.array(rows)[:, :, None])


@dataclass(frozen=True, eq=False)
class FitTable:
    """Every replica's fit; slot i belongs to ids[i]. The arrays are read-only."""

    ids: tuple[str, ...]
    sums: Floats  # (2, 5, n): per mode (ON, OFF) the decayed sums n, x, y, x^2, xy of its reports
    accept: Floats  # (n,) last accept length reported; NaN: none yet
    fitted_at: Floats  # (n,) reported_at of the last report folded in; NaN: none

    @staticmethod
    def empty() -> FitTable:
        return FitTable((), frozen(np.zeros((2, _SUMS, 0))), frozen(np.zeros(0)), frozen(np.zeros(0)))

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
            frozen(gather(self.sums, 0.0)),
            frozen(gather(self.accept, np.nan)),
            frozen(gather(self.fitted_at, np.nan)),
        )


class GoodputView(NamedTuple):
    """One tick of the goodput model: updated fits and per-replica predictions (slot order)."""

    table: FitTable
    on_tok_s: Floats
    off_tok_s: Floats
    batch: Floats  # the load the prediction is for, clipped to [1, batch_cap]
    accept: Floats  # the accept length it assumes


def goodput_tick(table: FitTable, reports: Reports, loads: Floats, config: PolicyConfig) -> GoodputView:
    """Fold this tick's reports into the fits and predict each replica's tok/s in both modes at `loads`."""
    table = table.aligned(reports.ids)
    on_mode, x, tok_s, at = reports.on, reports.batch, reports.tok_s, reports.reported_at
    # the engine's EMA only moves while ON, so an OFF replica reports its last ON value: use it
    accept = np.where(np.isnan(reports.accept), table.accept, reports.accept)
    a = np.where(np.isnan(accept), config.default_accept_length, accept)
    new = (tok_s > 0) & (x >= 1) & (at != table.fitted_at)  # NaN != x: never-fitted slots count
    y = x * np.where(on_mode, a, 1.0) / np.where(new, tok_s, 1.0)  # step seconds = b * tokens/step / tok_s
    # every report decays both modes' sums; its point goes to the mode it was measured in
    point = np.stack([np.ones_like(x), x, y, x * x, x * y])  # (5, n)
    into = np.stack([new & on_mode, new & ~on_mode])[:, None, :]  # (2, 1, n)
    sums = table.sums * np.where(new, config.fit_decay, 1.0) + point * into
    # least squares through reports + prior pseudo-reports (det > 0: those sit at two batches)
    n, sx, sy, sxx, sxy = (sums + _prior_sums(config)).transpose(1, 0, 2)  # each (2, n)
    per_req = np.maximum((n * sxy - sx * sy) / (n * sxx - sx * sx), 0.0)
    base = np.maximum((sy - per_req * sx) / n, 1e-6)

    b = np.clip(loads, 1.0, float(config.batch_cap))
    tok = b * np.stack([a, np.ones_like(a)]) / (base + per_req * b)  # (2, n): ON, OFF
    fits = FitTable(table.ids, frozen(sums), frozen(accept), frozen(np.where(new, at, table.fitted_at)))
    return GoodputView(fits, tok[0], tok[1], b, a)


def crossover_batch(config: PolicyConfig, accept: Floats) -> Floats:
    """Per replica, the batch below which the prior predicts ON faster than OFF (capped at
    batch_cap; at least 1): tok/s ON = b*a/(on_base+on_per*b) equals b/(off_base+off_per*b)."""
    a = np.where(np.isnan(accept), config.default_accept_length, accept)
    num = a * config.off_step_base_s - config.on_step_base_s
    den = config.on_step_per_req_s - a * config.off_step_per_req_s
    with np.errstate(divide="ignore", invalid="ignore"):
        b = np.where(den > 0, num / den, np.inf)  # ON's slope no steeper: ON wins at any batch
    b = np.where(num <= 0, 1.0, b)  # ON slower even at batch 1
    return np.clip(b, 1.0, float(config.batch_cap))
