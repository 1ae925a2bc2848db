"""The policy's memory between ticks: frozen, typed, replaced (never mutated) by `decide`. Pure.

Columnar: slot i of every array is replica ids[i] (the order of the last tick's reports),
so `decide` updates the whole fleet with array operations. `state.replica(id)` and the
read-only `state.replicas` mapping give the per-replica view (`ReplicaState`).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, NamedTuple, TypeVar

import numpy as np

from policy.costmodel import FitTable
from policy.reports import Bools, Floats, Ints, frozen
from policy.types import Override, Reason, SpecMode

__all__ = ["REASONS", "PolicyState", "ReplicaState", "frozen_map", "seed_replica", "with_override"]

K = TypeVar("K")
V = TypeVar("V")

REASONS: tuple[Reason, ...] = tuple(Reason)  # PolicyState.reason holds indices into this
_NEW = REASONS.index(Reason.NEW)
# what a replica new to the memory starts with, per column (besides its mode and last flip)
_FILLS = {
    "flips": 0,
    "wish_since": np.nan,
    "low_since": np.nan,
    "idle": False,
    "dip_s": 0.0,
    "dip_at": np.nan,
    "reason": _NEW,
}


def frozen_map(d: Mapping[K, V]) -> Mapping[K, V]:
    """A read-only view of a fresh copy."""
    return MappingProxyType(dict(d))


class ReplicaState(NamedTuple):
    """What the policy remembers about one replica."""

    desired: SpecMode
    last_flip_at: float | None  # None: never flipped (dwell satisfied)
    flips: int = 0
    reason: Reason = Reason.NEW


def _empty(dtype: type) -> np.ndarray:
    return frozen(np.zeros(0, dtype=dtype))


@dataclass(frozen=True, eq=False)
class PolicyState:
    """All replicas' memory plus operator overrides. Start with `PolicyState()`."""

    ids: tuple[str, ...] = ()
    desired_on: Bools = field(default_factory=lambda: _empty(bool))
    last_flip_at: Floats = field(default_factory=lambda: _empty(float))  # NaN: never flipped
    flips: Ints = field(default_factory=lambda: _empty(np.int64))
    wish_since: Floats = field(default_factory=lambda: _empty(float))  # NaN: the rule wants no flip
    low_since: Floats = field(default_factory=lambda: _empty(float))  # NaN: no gap under way
    idle: Bools = field(default_factory=lambda: _empty(bool))  # nothing running or waiting at the last tick
    dip_s: Floats = field(default_factory=lambda: _empty(float))  # longest recent dip (0: none)
    dip_at: Floats = field(default_factory=lambda: _empty(float))  # when it ended (NaN: none)
    reason: Ints = field(default_factory=lambda: _empty(np.int64))  # index into REASONS
    overrides: Mapping[str, Override] = field(default_factory=lambda: MappingProxyType({}))  # non-AUTO only
    tick: int = 0
    fits: FitTable | None = None  # GOODPUT cost-model fits; None until the rule first runs

    @functools.cached_property
    def index(self) -> Mapping[str, int]:
        return MappingProxyType({rid: i for i, rid in enumerate(self.ids)})

    def replica(self, replica_id: str) -> ReplicaState | None:
        i = self.index.get(replica_id)
        if i is None:
            return None
        last = float(self.last_flip_at[i])
        return ReplicaState(
            SpecMode.ON if self.desired_on[i] else SpecMode.OFF,
            None if last != last else last,  # NaN: never
            int(self.flips[i]),
            REASONS[int(self.reason[i])],
        )

    @functools.cached_property
    def replicas(self) -> Mapping[str, ReplicaState]:
        """Every replica's view (built on first use; for status and tests, not the hot path)."""
        return MappingProxyType({rid: self.replica(rid) for rid in self.ids})  # type: ignore[misc]

    def aligned(self, ids: tuple[str, ...], actual_on: Bools, last_flip_if_new: Floats) -> PolicyState:
        """The same memory laid out in `ids` order. New replicas start in their actual mode,
        reason NEW, with the given last flip (NaN: never); replicas not in `ids` are dropped."""
        if ids == self.ids:
            return self
        slot = self.index
        idx = np.array([slot.get(rid, -1) for rid in ids], dtype=np.intp)
        known = idx >= 0
        take = np.where(known, idx, 0)

        def gather(a: np.ndarray, fill: np.ndarray | float) -> np.ndarray:
            if a.shape[0] == 0:
                return np.broadcast_to(np.asarray(fill, dtype=a.dtype), (len(ids),)).copy()
            return np.where(known, a[take], fill)

        fills: dict[str, Any] = {"desired_on": actual_on, "last_flip_at": last_flip_if_new, **_FILLS}
        columns: dict[str, Any] = {k: frozen(gather(getattr(self, k), v)) for k, v in fills.items()}
        return replace(self, ids=ids, **columns)


def with_override(state: PolicyState, replica_id: str, override: Override) -> PolicyState:
    """Set (or with AUTO, clear) an operator override. It wins until cleared or the replica expires."""
    overrides = dict(state.overrides)
    if override is Override.AUTO:
        overrides.pop(replica_id, None)
    else:
        overrides[replica_id] = override
    return replace(state, overrides=frozen_map(overrides))


def seed_replica(
    state: PolicyState, replica_id: str, desired: SpecMode, last_flip_at: float | None
) -> PolicyState:
    """Start remembering a replica in a known mode (e.g. a client entering local fallback)."""
    keep = [i for i, rid in enumerate(state.ids) if rid != replica_id]
    last = np.nan if last_flip_at is None else last_flip_at
    fills: dict[str, Any] = {"desired_on": desired is SpecMode.ON, "last_flip_at": last, **_FILLS}
    columns: dict[str, Any] = {k: frozen(np.append(getattr(state, k)[keep], v)) for k, v in fills.items()}
    return replace(state, ids=tuple(state.ids[i] for i in keep) + (replica_id,), **columns)
