"""Discrete-event simulation of a fleet of speculative-decoding replicas under a policy. Pure.

Each replica is a continuous-batching engine (`loadtests.sim.model.EngineModel`): when requests
wait and the batch has room it runs one prefill step for them (first token at its end),
otherwise one decode step for the whole running batch, where every request gains one
token (OFF) or `accept_length` tokens (ON). A desired mode is applied at the next step
boundary (re-enabling adds one draft forward). Requests come from a trace (open-loop
Poisson arrivals, or closed-loop users: `loadtests.sim.sources`) and go to the replica with
the least running + waiting (ties at random), unless their user is pinned to one.

Policies: ALWAYS_ON, ALWAYS_OFF, or a dynamic rule run exactly as in production: every
`tick_s` each replica reports an Observation to a `FleetView` (the actor's memory) and
gets back the desired mode of the previous tick; then the view ticks `rules.decide`.

`python -m loadtests.bench.policy_sim --out docs/` runs the comparisons and writes the report.
"""

from __future__ import annotations

import enum
import gc
import heapq
import random
from collections import deque
from dataclasses import dataclass, field

from loadtests.sim.model import EngineModel, default_model
from loadtests.sim.sources import SimRequest, make_source
from loadtests.sim.trace import ClosedLoop, Trace, TwoClassTrace
from policy.fleet import FleetView
from policy.routing import RankReason, ReplicaStats, RequestClass, RoutingConfig, rank
from policy.types import Observation, PolicyConfig, Rule, SpecMode

__all__ = ["SimConfig", "SimPolicy", "SimResult", "simulate"]

_ON, _OFF = SpecMode.ON, SpecMode.OFF


class SimPolicy(enum.Enum):
    ALWAYS_ON = "always-on"
    ALWAYS_OFF = "always-off"
    THRESHOLD = "threshold"
    GOODPUT = "goodput"


@dataclass(frozen=True)
class SimConfig:
    replicas: int = 8
    seed: int = 0
    drain_s: float = 30.0  # keep serving after the trace ends so late requests finish
    bin_s: float = 1.0  # timeline resolution
    policy: PolicyConfig = field(default_factory=PolicyConfig)  # its rule is set by SimPolicy
    # two-class traces: route by class and mode (policy.routing.rank, as deployments.routing.router does),
    # else every request to the least-loaded replica
    class_routing: bool = False
    # SimPolicy.THRESHOLD runs this rule instead when set (Rule.MIXED: threshold plus k kept ON)
    threshold_rule: Rule | None = None
    routing: RoutingConfig = field(default_factory=RoutingConfig)


@dataclass(frozen=True)
class SimResult:
    policy: SimPolicy
    trace: Trace | ClosedLoop | TwoClassTrace
    replicas: int
    end_s: float
    records: tuple[SimRequest, ...]
    tokens_per_bin: tuple[float, ...]  # output tokens finished in each bin (fleet)
    on_fraction: tuple[tuple[float, float], ...]  # (time, fraction of replicas ON) at each tick
    flips: tuple[tuple[float, int], ...]  # (time, replica) of every applied mode change
    decision_s: tuple[float, ...]  # wall time of each decide() (dynamic policies)
    decision_cpu_s: tuple[float, ...]  # thread CPU time of each decide()
    bin_s: float


class _Replica:
    __slots__ = (
        "idx", "mode", "pending", "running", "g", "waiting", "prefilling", "busy", "resync",
        "decode_tokens", "decode_time", "batch_time", "ever_on",
    )  # fmt: skip

    def __init__(self, idx: int, mode: SpecMode) -> None:
        self.idx, self.mode, self.pending = idx, mode, mode
        self.running: list[tuple[float, int, SimRequest]] = []  # heap by g at which it finishes
        self.g = 0.0  # tokens each running request has gained (lockstep)
        self.waiting: deque[SimRequest] = deque()
        self.prefilling: list[SimRequest] = []
        self.busy = False
        self.resync = False
        self.decode_tokens = self.decode_time = self.batch_time = 0.0  # this tick's decode stats
        self.ever_on = mode is _ON


class _LeastQueue:
    """Replica with the least load, ties at random; O(1) updates (loads bucketed)."""

    def __init__(self, n: int, rng: random.Random) -> None:
        self._rng = rng
        self._buckets: dict[int, list[int]] = {0: list(range(n))}
        self._pos = list(range(n))
        self._load = [0] * n
        self._min = 0

    def pick(self) -> int:
        while not self._buckets.get(self._min):
            self._min += 1
        bucket = self._buckets[self._min]
        return bucket[self._rng.randrange(len(bucket))]

    @property
    def loads(self) -> list[int]:
        return self._load

    def move(self, idx: int, delta: int) -> None:
        old = self._load[idx]
        bucket = self._buckets[old]
        last = bucket.pop()
        if last != idx:  # swap-remove
            bucket[self._pos[idx]] = last
            self._pos[last] = self._pos[idx]
        new = old + delta
        self._load[idx] = new
        dest = self._buckets.setdefault(new, [])
        self._pos[idx] = len(dest)
        dest.append(idx)
        self._min = min(self._min, new)


def simulate(
    trace: Trace | ClosedLoop | TwoClassTrace,
    policy: SimPolicy,
    model: EngineModel | None = None,
    config: SimConfig | None = None,
) -> SimResult:
    model = model or default_model()
    config = config or SimConfig()
    rng = random.Random(config.seed)
    source = make_source(trace, config.seed, config.replicas)
    start_mode = _OFF if policy is SimPolicy.ALWAYS_OFF else _ON
    reps = [_Replica(i, start_mode) for i in range(config.replicas)]
    router = _LeastQueue(config.replicas, rng)
    fleet: FleetView | None = None
    if policy in (SimPolicy.THRESHOLD, SimPolicy.GOODPUT):
        rule = Rule.THRESHOLD if policy is SimPolicy.THRESHOLD else Rule.GOODPUT
        if policy is SimPolicy.THRESHOLD and config.threshold_rule is not None:
            rule = config.threshold_rule
        fleet = FleetView(
            config.policy.replace(rule=rule, batch_cap=min(config.policy.batch_cap, model.max_running))
        )
    tick_s = config.policy.tick_s
    end = trace.duration_s + config.drain_s
    n_bins = int(end / config.bin_s) + 1
    tokens = [0.0] * n_bins
    on_fraction: list[tuple[float, float]] = []
    flips: list[tuple[float, int]] = []
    decision_s: list[float] = []
    decision_cpu_s: list[float] = []
    events: list[tuple[float, int, int]] = []  # (time, seq, replica) step ends
    seq = 0

    def credit(t: float, n: float) -> None:
        tokens[min(int(t / config.bin_s), n_bins - 1)] += n

    def start_step(r: _Replica, t: float) -> None:
        nonlocal seq
        if r.pending is not r.mode:  # flips land between steps
            r.mode = r.pending
            r.resync = r.mode is _ON
            r.ever_on = r.ever_on or r.mode is _ON
            flips.append((t, r.idx))
        extra = 0.0
        if r.resync and (r.waiting or r.running):
            extra, r.resync = model.resync_s, False  # re-enable: one draft forward for the running batch
        if r.waiting and len(r.running) < model.max_running:
            room = model.max_running - len(r.running)
            while r.waiting and len(r.prefilling) < room:
                r.prefilling.append(r.waiting.popleft())
            prompt = sum(q.prompt_tokens for q in r.prefilling)
            duration = model.prefill_s(prompt, r.mode) + extra
        elif r.running:
            duration = model.decode_step_s(r.mode, len(r.running)) + extra
        else:
            r.busy = False
            return
        r.busy = True
        seq += 1
        heapq.heappush(events, (t + duration, seq, r.idx))

    def end_step(r: _Replica, t: float, duration: float) -> None:
        nonlocal seq
        if r.prefilling:  # first tokens
            for q in r.prefilling:
                q.first_token = t
                if q.output_tokens <= 1:
                    q.done = t
                    router.move(r.idx, -1)
                    source.finished(q, t)
                else:
                    seq += 1
                    heapq.heappush(r.running, (r.g + q.output_tokens - 1, seq, q))
            credit(t, len(r.prefilling))
            r.prefilling = []
            return
        batch = len(r.running)
        gained = model.tokens_per_step(r.mode)
        r.g += gained
        produced = gained * batch
        while r.running and r.running[0][0] <= r.g + 1e-9:
            g_end, _, q = heapq.heappop(r.running)
            produced -= r.g - g_end  # the last step overshoots what the request needed
            q.done = t
            router.move(r.idx, -1)
            source.finished(q, t)
        credit(t, produced)
        r.decode_tokens += produced
        r.decode_time += duration
        r.batch_time += batch * duration

    # The request records are long-lived: keep the cyclic GC from rescanning them at every
    # collection (it would slow the run and be charged to whatever allocates, decide() included).
    gc.collect()
    gc.freeze()
    try:
        step_started = [0.0] * config.replicas
        next_tick, t = tick_s, 0.0
        while True:
            t_event = events[0][0] if events else float("inf")
            t_arrival = source.next_at()
            t = min(t_event, t_arrival, next_tick)
            if t > end:
                break
            if t == next_tick:
                _tick(reps, fleet, model, t, on_fraction, decision_s, decision_cpu_s)
                for r in reps:
                    if not r.busy:
                        start_step(r, t)
                        step_started[r.idx] = t
                next_tick += tick_s
            elif t == t_arrival:
                taken = source.take(t)
                if taken is None:  # a closed-loop user starting or stopping
                    continue
                q, pinned = taken
                if pinned is None and config.class_routing:
                    pinned = _class_pick(reps, router, q, t, config.routing, rng)
                r = reps[router.pick() if pinned is None else pinned]
                q.replica = r.idx
                r.waiting.append(q)
                router.move(r.idx, +1)
                if not r.busy:
                    start_step(r, t)
                    step_started[r.idx] = t
            else:
                _, _, idx = heapq.heappop(events)
                r = reps[idx]
                end_step(r, t, t - step_started[idx])
                start_step(r, t)
                step_started[idx] = t
    finally:
        gc.unfreeze()

    return SimResult(
        policy, trace, config.replicas, end, tuple(source.records), tuple(tokens), tuple(on_fraction),
        tuple(flips), tuple(decision_s), tuple(decision_cpu_s), config.bin_s,
    )  # fmt: skip


def _class_pick(
    reps: list[_Replica], router: _LeastQueue, q: SimRequest, t: float, cfg: RoutingConfig, rng: random.Random
) -> int | None:
    """The replica Serve would take under specflip's router: the shortest queue of the first rank."""
    stats = [
        ReplicaStats(r.pending, len(r.running) + len(r.prefilling), len(r.waiting), None, None, t)
        for r in reps
    ]
    cls = RequestClass.INTERACTIVE if q.interactive else RequestClass.BATCH
    ranking = rank(cls, stats, t, cfg, loads=[float(x) for x in router.loads], rng=rng)
    if ranking.reason is RankReason.STALE:
        return None
    return ranking.ranks[0][0]


def _tick(
    reps: list[_Replica],
    fleet: FleetView | None,
    model: EngineModel,
    now: float,
    on_fraction: list[tuple[float, float]],
    decision_s: list[float],
    decision_cpu_s: list[float],
) -> None:
    """Every replica reports and takes the answer (the previous tick's decision); then the policy ticks."""
    on_fraction.append((now, sum(r.mode is _ON for r in reps) / len(reps)))
    if fleet is None:
        return
    for r in reps:
        tok_s = r.decode_tokens / r.decode_time if r.decode_time > 0 else None
        batch = r.batch_time / r.decode_time if r.decode_time > 0 else None
        obs = Observation(
            replica_id=f"r{r.idx}",
            running=len(r.running) + len(r.prefilling),
            waiting=len(r.waiting),
            mode=r.mode,
            patched=True,
            # the simulated engine accepts a fixed mean: its EMA, once it has run ON
            accept_length=model.accept_length if r.ever_on else None,
            decode_tok_s=tok_s,
            reported_at=now,
            decode_batch=batch,
            interactive=sum(q.interactive for q in r.waiting)
            + sum(q.interactive for q in r.prefilling)
            + sum(e[2].interactive for e in r.running),
        )
        r.pending = fleet.report(obs, now).desired
        r.decode_tokens = r.decode_time = r.batch_time = 0.0
    result = fleet.tick(now)
    decision_s.append(result.decision_s)
    decision_cpu_s.append(result.decision_cpu_s)
