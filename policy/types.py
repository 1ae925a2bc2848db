"""Plain data the policy speaks: modes, observations, actions, decisions, config, status.

Pure: no ray, torch or sglang. Everything here is a frozen dataclass or an enum, so it
crosses process boundaries (Ray pickles it by reference to this module) and can be
compared in tests.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the engine's own record, passed through for operators (a plain dataclass)
    from patched_worker.state import SpeculationState

__all__ = [
    "ClientDecision",
    "ClientState",
    "Decision",
    "DecisionSource",
    "FleetStatus",
    "LoadMetric",
    "Observation",
    "Override",
    "PolicyConfig",
    "Reason",
    "ReplicaStatus",
    "Rule",
    "SETTING",
    "setting",
    "STALE_SOURCE",
    "SetSpeculation",
    "SpecMode",
    "TickStats",
    "UnknownReplicaError",
]


class SpecMode(enum.Enum):
    """Whether a replica's engine runs EAGLE-3 speculation."""

    ON = "on"
    OFF = "off"


class Override(enum.Enum):
    """An operator's instruction for one replica; AUTO lets the rule decide."""

    AUTO = "auto"
    FORCE_ON = "on"
    FORCE_OFF = "off"


class Rule(enum.Enum):
    """Which rule proposes flips."""

    THRESHOLD = "threshold"  # hysteresis on queue depth
    GOODPUT = "goodput"  # predicted output tok/s with vs without speculation
    HOLD = "hold"  # never proposes a flip: replicas keep their mode unless an operator overrides
    MIXED = "mixed"  # threshold per replica, plus k replicas kept ON sized from latency-class demand


class LoadMetric(enum.Enum):
    """What counts as a replica's load."""

    RUNNING_PLUS_WAITING = "running+waiting"
    RUNNING = "running"
    WAITING = "waiting"


class Reason(enum.Enum):
    """Why a replica's desired mode is what it is after a tick."""

    NEW = "registered, no decision yet"
    RULE_FLIP = "rule flipped it"
    RULE_HOLD = "rule keeps the mode"
    DWELL = "dwell time not elapsed"
    FLEET_LIMIT = "flip deferred: max flips per tick reached"
    MIN_ON = "kept on: min_on_replicas"
    MIN_ON_FLIP = "turned on: min_on_replicas"
    OVERRIDE = "operator override"
    UNPATCHED = "engine unpatched: never flipped"
    STALE = "report stale: never flipped"


class DecisionSource(enum.Enum):
    """Where a replica's desired mode came from (PolicyClient); the replica reports it back."""

    ACTOR = "actor"  # the policy actor answered this tick (its rule decided)
    OVERRIDE = "override"  # the policy actor answered this tick with an operator override
    ACTOR_CACHED = "actor_cached"  # actor unreachable this tick; its last answer is kept
    LOCAL_FALLBACK = "local_fallback"  # actor unreachable for fail_after ticks; local rule decides


# how status and metrics show the policy source of a replica whose last report is stale: what it
# follows now is unknown to the actor (one that cannot reach it decides locally; a dead one, nothing)
STALE_SOURCE = "stale"


class UnknownReplicaError(LookupError):
    """An operator named a replica the policy has not heard from (or has expired)."""


@dataclass(frozen=True, slots=True)
class Observation:
    """What a replica reports every tick. (slots: compact, so a tick over 1000 of them stays in cache.)

    `reported_at` is on the clock `decide` is called with: the actor re-stamps it with
    its own clock on receipt (replica clocks are not comparable across processes).
    """

    replica_id: str
    running: int  # requests in the running batch
    waiting: int  # requests queued in the engine
    mode: SpecMode  # actual mode of the engine now
    patched: bool  # engine patch installed (never flip an unpatched replica)
    accept_length: float | None  # EMA of accepted tokens per verify while ON (None if unknown)
    # goodput fit: output tokens of decode steps / seconds spent in decode steps, over the last tick
    # (decode time only, so prefill interruptions do not read as a slower step)
    decode_tok_s: float | None = None
    reported_at: float = 0.0  # seconds, see the class docstring
    decode_batch: float | None = None  # mean running batch over the decode_tok_s window (else `running`)
    mode_age_s: float | None = (
        None  # seconds since the engine last changed mode; rebuilds dwell after an actor restart
    )
    # the operator override the actor last answered with (PolicyClient fills it in): an actor
    # that does not know the replica (restarted, or the replica expired) takes it back
    override: Override | None = None
    # where the mode the replica ran since its last report came from (None: no answer yet)
    policy_source: DecisionSource | None = None
    # the engine's switch state as its scheduler reported it (its step trace left out), for operators
    # (status, metrics); the rules never read it. None for an unpatched engine
    engine: SpeculationState | None = None
    control_timeouts: int = 0  # this replica's control calls to its engine that timed out
    interactive: int = 0  # latency-class requests in flight on the replica (class routing)


@dataclass(frozen=True, slots=True)
class SetSpeculation:
    """A flip: the replica's desired mode changed this tick."""

    replica_id: str
    enabled: bool
    reason: str


@dataclass(frozen=True, slots=True)
class Decision:
    """The actor's answer to one report."""

    replica_id: str
    desired: SpecMode
    reason: str
    tick: int  # the actor tick that produced it; 0 = registered, not yet decided
    override: Override = Override.AUTO  # the override in force (the client reports it back)
    draining: bool = False  # the app is shutting down: new requests are answered 503

    @property
    def overridden(self) -> bool:
        """An operator override decides this replica."""
        return self.override is not Override.AUTO


@dataclass(frozen=True, slots=True)
class ClientDecision:
    """What PolicyClient tells its replica to do."""

    desired: SpecMode
    source: DecisionSource
    reason: str
    overridden: bool = False
    consecutive_failures: int = 0
    draining: bool = False  # the app is shutting down (the actor said so): new requests get a 503


@dataclass(frozen=True)
class ClientState:
    """A PolicyClient's own state, for the replica's status and logs."""

    source: DecisionSource  # where the last decision came from
    consecutive_failures: int  # failed round trips to the actor in a row
    last_error: str | None  # the last failure, one line
    desired: SpecMode | None  # the last desired mode handed out (None before the first report)


SETTING = "setting"  # field metadata key: the description of a field users set in the app config


def setting(default: Any, description: str) -> Any:
    """A PolicyConfig field that is also a key of the app config's `policy` section (described there)."""
    return field(default=default, metadata={SETTING: description})


@dataclass(frozen=True)
class PolicyConfig:
    """Everything the rules and the actor are tuned by. Every field has a usable default.

    Fields made with `_setting` are the app config's `policy` section: deployments.config builds
    its pydantic model from them (name, type, default, description), so a setting is declared here
    once. The others are set by the app (`batch_cap`) or are fit internals.

    Cost-model priors are engine step times (seconds) as `base + per_req * batch`,
    derived from the H200 Llama-3.1-8B shapes in ../shared/gpu/README.md: plain decode
    4.85 ms at batch 1 and 10.1 ms at batch 128; EAGLE-3 (16 draft tokens) calibrated so
    that at accept length 3 it gives ~1.9x the tok/s at batch 1 and ~0.5x at batch 128.
    """

    rule: Rule = setting(
        Rule.THRESHOLD,
        "Decision rule: threshold (hysteresis on load) | goodput (predicted tok/s with vs without "
        "speculation) | mixed (threshold, plus enough replicas kept ON for the latency-class "
        "requests in flight, sized by the cost model) | hold (never flips; overrides only).",
    )
    load_metric: LoadMetric = setting(
        LoadMetric.RUNNING_PLUS_WAITING,
        "What counts as a replica's load: running+waiting | running | waiting.",
    )
    high: float = setting(32.0, "threshold: turn speculation OFF when load >= high.")
    low: float = setting(12.0, "threshold: turn speculation back ON when load <= low.")
    dwell_s: float = setting(10.0, "Minimum seconds between two flips of one replica.")
    persist_s: float = setting(
        0.0,
        "A rule's wish to flip must hold this many seconds over consecutive ticks before it acts "
        "(a momentary dip or spike in load is ignored); 0 acts at once.",
    )
    max_flips_per_tick: int | None = setting(
        None, "Fleet limit: rule flips per policy tick; null = no limit (overrides never count)."
    )
    min_on_replicas: int = setting(0, "Keep at least this many replicas ON for latency traffic.")
    mixed_on_fill: float = setting(
        0.5,
        "mixed: an ON replica is counted for this fraction of its crossover batch of latency-class "
        "requests (the batch where the cost model predicts OFF as fast as ON); k = ceil(interactive "
        "in flight / that).",
    )
    stale_after_s: float = setting(5.0, "A replica whose last report is older is never flipped.")
    goodput_margin: float = setting(
        0.10, "goodput: flip only if the other mode is predicted better by this fraction."
    )
    default_accept_length: float = setting(2.5, "goodput: accept length assumed until a replica reports one.")
    # largest batch the engine runs; goodput predictions cap the load here (the app sets it from
    # engine.max_running_requests)
    batch_cap: int = 128
    off_step_base_s: float = setting(4.81e-3, "goodput prior: OFF step base seconds.")
    off_step_per_req_s: float = setting(4.16e-5, "goodput prior: OFF step seconds per request.")
    on_step_base_s: float = setting(
        7.25e-3,
        "goodput prior: an engine step ON takes base + per_req * batch seconds; the defaults are "
        "H200 Llama-3.1-8B numbers: put your engine's measured line here.",
    )
    on_step_per_req_s: float = setting(4.18e-4, "goodput prior: ON step seconds per request.")
    # weight of the prior, in reports, at each of two pseudo-points (batch 1 and batch_cap)
    prior_weight: float = 2.0
    # per-report decay of older reports in the online fit, both modes (1.0: never forget)
    fit_decay: float = 0.95
    tick_s: float = setting(1.0, "Seconds between two policy decisions (actor), at most 60.")
    ttl_s: float = setting(30.0, "Forget a replica that has not reported for this long.")

    def __post_init__(self) -> None:
        problem = _config_problem(self)
        if problem:
            raise ValueError(f"PolicyConfig: {problem}")


def _config_problem(c: PolicyConfig) -> str | None:
    if not isinstance(c.rule, Rule) or not isinstance(c.load_metric, LoadMetric):
        return "rule and load_metric must be Rule and LoadMetric members"
    numbers = {f: getattr(c, f) for f in _FLOAT_FIELDS}
    bad = [f for f, v in numbers.items() if not math.isfinite(v)]
    if bad:
        return f"{', '.join(bad)} must be finite"
    if not 0 <= c.low < c.high:
        return f"need 0 <= low < high, got low={c.low} high={c.high}"
    if c.dwell_s < 0:
        return f"dwell_s must be >= 0, got {c.dwell_s}"
    if c.persist_s < 0:
        return f"persist_s must be >= 0, got {c.persist_s}"
    if c.max_flips_per_tick is not None and c.max_flips_per_tick < 1:
        return f"max_flips_per_tick must be >= 1 or None (no limit), got {c.max_flips_per_tick}"
    if not 0 < c.mixed_on_fill <= 1:
        return f"mixed_on_fill must be in (0, 1], got {c.mixed_on_fill}"
    if c.min_on_replicas < 0:
        return f"min_on_replicas must be >= 0, got {c.min_on_replicas}"
    if c.stale_after_s <= 0 or not 0 < c.tick_s <= 60:
        return f"need stale_after_s > 0 and 0 < tick_s <= 60, got {c.stale_after_s}, {c.tick_s}"
    if c.ttl_s <= c.stale_after_s:
        return f"ttl_s ({c.ttl_s}) must exceed stale_after_s ({c.stale_after_s})"
    if c.goodput_margin < 0:
        return f"goodput_margin must be >= 0, got {c.goodput_margin}"
    if c.default_accept_length < 1:
        return (
            f"default_accept_length must be >= 1 (it counts the bonus token), got {c.default_accept_length}"
        )
    if c.batch_cap < 1:
        return f"batch_cap must be >= 1, got {c.batch_cap}"
    if min(c.off_step_base_s, c.on_step_base_s) <= 0 or min(c.off_step_per_req_s, c.on_step_per_req_s) < 0:
        return "step-time priors need base > 0 and per_req >= 0"
    if c.prior_weight <= 0 or not 0 < c.fit_decay <= 1:
        return "need prior_weight > 0 and 0 < fit_decay <= 1"
    return None


_FLOAT_FIELDS = (
    "high",
    "low",
    "dwell_s",
    "persist_s",
    "stale_after_s",
    "goodput_margin",
    "mixed_on_fill",
    "default_accept_length",
    "off_step_base_s",
    "off_step_per_req_s",
    "on_step_base_s",
    "on_step_per_req_s",
    "prior_weight",
    "fit_decay",
    "tick_s",
    "ttl_s",
)


@dataclass(frozen=True, slots=True)
class ReplicaStatus:
    """One replica as the actor sees it (operators' view)."""

    replica_id: str
    desired: SpecMode
    actual: SpecMode
    load: float
    running: int
    waiting: int
    accept_length: float | None
    flips: int
    last_report_age_s: float
    override: Override
    patched: bool
    stale: bool
    reason: str
    policy_source: DecisionSource | None = None  # as the replica last reported it
    engine: SpeculationState | None = None  # as the replica last reported it
    control_timeouts: int = 0  # as the replica last reported it


@dataclass(frozen=True)
class TickStats:
    """How the actor's ticks are going."""

    ticks: int
    last_tick_age_s: float | None  # None: no tick yet
    last_decision_s: float | None  # wall time of the last decide call
    median_decision_s: float | None  # over the recent window
    flips_total: int
    expired_total: int


@dataclass(frozen=True)
class FleetStatus:
    """The actor's whole view, for operators."""

    replicas: tuple[ReplicaStatus, ...]
    config: PolicyConfig
    ticks: TickStats
    restarted: bool  # this actor process is a restart (its view was rebuilt from reports)
    uptime_s: float
