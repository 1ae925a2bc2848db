"""One tick's observations as columns (numpy), built in one place. Pure.

`decide` works on whole columns: at 1000 replicas a handful of array operations replace
thousands of per-replica Python steps, and every observation is read once per tick.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
from numpy.typing import NDArray

from policy.types import LoadMetric, Observation, SpecMode

__all__ = ["Bools", "Floats", "Ints", "Reports", "frozen"]

Floats = NDArray[np.float64]
Bools = NDArray[np.bool_]
Ints = NDArray[np.int64]


def frozen(a: NDArray) -> NDArray:
    """Mark an array read-only (state and reports are never mutated once built)."""
    a.flags.writeable = False
    return a


class Reports(NamedTuple):
    """Slot i is replica ids[i]. NaN marks a missing optional value."""

    ids: tuple[str, ...]
    running: Floats
    waiting: Floats
    reported_at: Floats
    patched: Bools
    on: Bools  # actual mode is ON
    accept: Floats  # accept-length EMA
    tok_s: Floats  # decode tok/s; 0 when not reported
    batch: Floats  # mean decode batch behind tok_s (else running)
    mode_age_s: Floats
    interactive: Floats  # latency-class requests in flight

    @staticmethod
    def of(observations: Sequence[Observation]) -> Reports:
        nan, on = float("nan"), SpecMode.ON
        obs = observations
        return Reports(
            tuple(o.replica_id for o in obs),
            np.array([o.running for o in obs], dtype=float),
            np.array([o.waiting for o in obs], dtype=float),
            np.array([o.reported_at for o in obs], dtype=float),
            np.array([o.patched for o in obs], dtype=bool),
            np.array([o.mode is on for o in obs], dtype=bool),
            np.array([nan if o.accept_length is None else o.accept_length for o in obs], dtype=float),
            np.array([o.decode_tok_s or 0.0 for o in obs], dtype=float),
            np.array([o.running if o.decode_batch is None else o.decode_batch for o in obs], dtype=float),
            np.array([nan if o.mode_age_s is None else o.mode_age_s for o in obs], dtype=float),
            np.array([o.interactive for o in obs], dtype=float),
        )

    def load(self, metric: LoadMetric) -> Floats:
        if metric is LoadMetric.RUNNING_PLUS_WAITING:
            return self.running + self.waiting
        return self.running if metric is LoadMetric.RUNNING else self.waiting
