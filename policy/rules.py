"""The decision: `decide(observations, state, config, now) -> (actions, new_state)`. Pure.

No ray, torch or sglang; the clock is the `now` argument. One call is one tick:

1. Per replica, in order of precedence: an unpatched engine is never flipped (its desired
   mode mirrors its actual one); an operator override wins (at once: no dwell, no fleet
   limit); a stale report is never acted on; otherwise the configured rule may want the
   other mode; a wish younger than `persist_s` (over consecutive decisions; a wish to turn
   speculation ON: `on_persist_s`, at least `persist_s`, and twice the longest dip that high load
   ended in the last minute, up to `on_persist_max_s`) is not acted on, and one inside the dwell
   time is held. A dip runs from an idle tick to the next tick where the rule prefers OFF: a
   closed-loop client's gap between waves, which a slow client stretches to seconds; it is one idle
   stretch (light load that comes and goes is not a gap). A wish under way outlasts a tick inside
   the goodput margin (the other mode still predicted at least as good); the flip needs the margin.
2. Fleet limits over the wishes: OFF flips go first (they relieve overload), then the
   larger gaps; at most `max_flips_per_tick`; an OFF flip that would leave fewer than
   `min_on_replicas` fresh replicas ON is held (the least-loaded stay ON); if still short,
   the least-loaded eligible OFF replicas are turned ON.

Replicas present in `state` but absent from `observations` are forgotten (the actor
passes every replica it has not expired), with their overrides. A flip compares the
rule's wish with the replica's *desired* mode; a replica that has not applied its
desired mode yet is not asked again.

Rules:
- THRESHOLD: OFF when load >= high, ON when load <= low; nothing in between (hysteresis).
- GOODPUT: predicted output tok/s ON vs OFF at the replica's batch (load capped at
  `batch_cap`) from a per-replica cost model fitted online (policy.costmodel); flip when
  the other mode is predicted better by more than `goodput_margin`.
- HOLD: never wants a flip (the policy is off; overrides and min_on_replicas still apply).
- MIXED: THRESHOLD per replica, and the fleet keeps k replicas ON where k sizes from latency-class
  demand: ceil(interactive requests in flight / (mixed_on_fill x an ON replica's crossover batch,
  the batch where its cost-model prior predicts OFF as fast as ON at its accept length)), at least
  min_on_replicas. With class routing the interactive requests sit on those k; the threshold turns
  the rest OFF under high load. Same dwell, persist, overrides, fleet limit and staleness.

Step 1 runs on whole columns (numpy): one read of every observation, a few array
operations, and Python only for the replicas that flip (1000 replicas in ~1-2 ms).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from policy.costmodel import FitTable, GoodputView, crossover_batch, goodput_tick
from policy.reports import Bools, Floats, Reports, frozen
from policy.state import REASONS, PolicyState, frozen_map
from policy.types import LoadMetric, Observation, Override, PolicyConfig, Reason, Rule, SetSpeculation

__all__ = ["decide", "load_of", "mixed_on_target"]

_CODE = {r: i for i, r in enumerate(REASONS)}
_DIP_FACTOR = 2.0  # a wish to turn ON outlasts twice the longest recent dip
_DIP_MEMORY_S = 60.0  # dips older than this are forgotten


def load_of(obs: Observation, metric: LoadMetric) -> float:
    if metric is LoadMetric.RUNNING_PLUS_WAITING:
        return float(obs.running + obs.waiting)
    if metric is LoadMetric.RUNNING:
        return float(obs.running)
    return float(obs.waiting)


def decide(
    observations: Iterable[Observation], state: PolicyState, config: PolicyConfig, now: float
) -> tuple[tuple[SetSpeculation, ...], PolicyState]:
    latest = {o.replica_id: o for o in observations}  # the last report of a replica wins
    rep = Reports.of(list(latest.values()))
    ids, n = rep.ids, len(rep.ids)
    load = rep.load(config.load_metric)
    prev = state.aligned(ids, rep.on, now - rep.mode_age_s)  # a new replica's dwell from its mode age
    desired, last = prev.desired_on.copy(), prev.last_flip_at.copy()
    flips, reason = prev.flips.copy(), np.full(n, _CODE[Reason.RULE_HOLD])
    fresh = rep.reported_at >= now - config.stale_after_s
    forced_on, forced_off = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
    for rid, override in state.overrides.items():
        i = prev.index.get(rid)
        if i is not None:
            (forced_on if override is Override.FORCE_ON else forced_off)[i] = True
    actions: list[SetSpeculation] = []

    # 1. unpatched: never flipped, desired mirrors actual
    unpatched = ~rep.patched
    desired[unpatched] = rep.on[unpatched]
    reason[unpatched] = _CODE[Reason.UNPATCHED]
    # 2. overrides: at once
    forced = rep.patched & (forced_on | forced_off)
    reason[forced] = _CODE[Reason.OVERRIDE]
    for i in np.flatnonzero(forced & (desired != forced_on)).tolist():
        desired[i], last[i], flips[i] = forced_on[i], now, flips[i] + 1
        override = Override.FORCE_ON if forced_on[i] else Override.FORCE_OFF
        actions.append(
            SetSpeculation(ids[i], bool(forced_on[i]), f"{Reason.OVERRIDE.value}: {override.value}")
        )
    # 3. stale: held
    auto = rep.patched & ~forced
    reason[auto & ~fresh] = _CODE[Reason.STALE]
    auto &= fresh
    # 4. the rule's wish (gap >= 0), held inside the dwell time
    gp: GoodputView | None = None
    if config.rule is Rule.GOODPUT:
        gp = goodput_tick(state.fits or FitTable.empty(), rep, load, config)
        ratio = gp.on_tok_s / gp.off_tok_s
        on_gap, off_gap = ratio - 1.0 - config.goodput_margin, 1.0 / ratio - 1.0 - config.goodput_margin
    elif config.rule is Rule.HOLD:
        on_gap = off_gap = np.full(n, -np.inf)
    else:  # THRESHOLD and MIXED
        on_gap, off_gap = config.low - load, load - config.high
    gap = np.where(desired, off_gap, on_gap)
    raw_wish = auto & (gap >= 0.0)
    # a wish under way outlasts a tick inside the goodput margin (the other mode still predicted at least
    # as good): a light load's passing burst near the crossover does not start the wait over; a tick
    # that prefers the desired mode does, and the flip itself still needs the margin
    slack = config.goodput_margin if config.rule is Rule.GOODPUT else 0.0
    held = auto & ~np.isnan(prev.wish_since) & (gap + slack >= 0.0)
    since = np.where(raw_wish | held, np.where(np.isnan(prev.wish_since), now, prev.wish_since), np.nan)
    idle = auto & (load <= 0)
    low_since, dip_s, dip_at = _dips(prev, idle, auto & (off_gap >= 0.0), now, config)
    # asymmetric: a wish to go ON (desired OFF now) must outlast the dip between closed-loop waves
    learned = np.maximum(config.on_persist_s, np.minimum(_DIP_FACTOR * dip_s, config.on_persist_max_s))
    on_persist = learned if config.on_persist_s > 0 else np.zeros(n)
    persist = np.where(desired, config.persist_s, np.maximum(config.persist_s, on_persist))
    wish = raw_wish & (now - since >= persist)
    dwell_ok = np.isnan(last) | (last <= now - config.dwell_s)
    reason[wish & ~dwell_ok] = _CODE[Reason.DWELL]

    min_on = config.min_on_replicas
    if config.rule is Rule.MIXED:
        min_on = max(min_on, mixed_on_target(rep, fresh, config))
    # fleet limits, in Python over the few replicas that want to flip
    on_count = int(np.count_nonzero(fresh & desired))
    budget = config.max_flips_per_tick if config.max_flips_per_tick is not None else n
    wishes = np.flatnonzero(wish & dwell_ok).tolist()
    wishes.sort(key=lambda i: (not desired[i], -gap[i], ids[i]))  # OFF flips first, then the biggest gap
    flipped = np.zeros(n, dtype=bool)
    for i in wishes:
        turning_off = bool(desired[i])
        if budget <= 0:
            reason[i] = _CODE[Reason.FLEET_LIMIT]
        elif turning_off and on_count <= min_on:
            reason[i] = _CODE[Reason.MIN_ON]
        else:
            desired[i], last[i], flips[i] = not turning_off, now, flips[i] + 1
            reason[i] = _CODE[Reason.RULE_FLIP]
            actions.append(
                SetSpeculation(ids[i], not turning_off, _explain(i, turning_off, load, gp, config))
            )
            flipped[i] = True
            budget -= 1
            on_count += -1 if turning_off else 1
    if on_count < min_on and budget > 0:
        eligible = np.flatnonzero(auto & ~desired & dwell_ok & ~flipped).tolist()
        eligible.sort(key=lambda i: (load[i], ids[i]))  # the least loaded
        for i in eligible[: min(min_on - on_count, budget)]:
            desired[i], last[i], flips[i], reason[i] = True, now, flips[i] + 1, _CODE[Reason.MIN_ON_FLIP]
            actions.append(SetSpeculation(ids[i], True, Reason.MIN_ON_FLIP.value))
    since[desired != prev.desired_on] = np.nan  # a new desired mode (flip, override, min_on) ends the wish

    kept = {rid: o for rid, o in state.overrides.items() if rid in latest}
    new_state = PolicyState(
        ids=ids,
        desired_on=frozen(desired),
        last_flip_at=frozen(last),
        flips=frozen(flips),
        wish_since=frozen(since),
        low_since=frozen(low_since),
        idle=frozen(idle),
        dip_s=frozen(dip_s),
        dip_at=frozen(dip_at),
        reason=frozen(reason),
        overrides=state.overrides if len(kept) == len(state.overrides) else frozen_map(kept),
        tick=state.tick + 1,
        fits=gp.table if gp is not None else state.fits,
    )
    return tuple(actions), new_state


def _dips(
    prev: PolicyState, idle: Bools, prefer_off: Bools, now: float, config: PolicyConfig
) -> tuple[Floats, Floats, Floats]:
    """(low_since, dip_s, dip_at) after this tick. A dip starts at an idle tick (nothing running or
    waiting) and ends at the next tick where the rule prefers OFF: the gap between two waves of a
    closed-loop client (a falling load without an idle tick is not one). Busy ticks in between end
    it unless one alone leads straight into the wave. The longest dip of the last `_DIP_MEMORY_S` is
    kept; one longer than `on_persist_max_s` was a low phase, not a gap."""
    started = prev.low_since
    # a gap is one idle stretch up to the wave that ends it (one tick of the wave arriving allowed):
    # load that comes and goes without OFF preferred (two busy ticks in a row, or idle again after
    # one) is light traffic, and only the last idle stretch before a wave can be its gap
    light = ~idle & ~prefer_off & ~prev.idle
    restart = idle & (np.isnan(started) | ~prev.idle)
    low_since = np.where(prefer_off | light, np.nan, np.where(restart, now, started))
    length = np.where(prefer_off & ~np.isnan(started), now - started, 0.0)
    ended = (length > 0) & (length <= config.on_persist_max_s)
    live = prev.dip_at >= now - _DIP_MEMORY_S  # NaN: none
    dip_s = np.where(live, prev.dip_s, 0.0)
    longer = ended & (length >= dip_s)
    dip_at = np.where(longer, now, np.where(live, prev.dip_at, np.nan))
    return low_since, np.where(longer, length, dip_s), dip_at


def mixed_on_target(rep: Reports, fresh: np.ndarray, config: PolicyConfig) -> int:
    """MIXED: replicas to keep ON for the latency-class requests in flight on fresh replicas."""
    demand = float(rep.interactive[fresh].sum())
    if demand <= 0:
        return 0
    usable = fresh & rep.patched
    if not usable.any():
        return 0
    per_on = float(np.median(crossover_batch(config, rep.accept[usable]))) * config.mixed_on_fill
    return min(int(np.ceil(demand / max(per_on, 1.0))), int(np.count_nonzero(usable)))


def _explain(i: int, turning_off: bool, load: Floats, gp: GoodputView | None, config: PolicyConfig) -> str:
    """The reason string of a rule flip (built only for flips)."""
    if gp is None:
        if turning_off:
            return f"load {float(load[i]):g} >= high {config.high:g}"
        return f"load {float(load[i]):g} <= low {config.low:g}"
    return (
        f"batch {float(gp.batch[i]):g}, accept {float(gp.accept[i]):.2f}: "
        f"predicted on {float(gp.on_tok_s[i]):.0f} vs off {float(gp.off_tok_s[i]):.0f} tok/s"
    )
