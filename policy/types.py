"""Plain data the policy speaks: modes, observations, actions, decisions, config, status.

Pure: no ray, torch or sglang. Everything here is a frozen dataclass, a frozen pydantic model (the
settings) or an enum, so it crosses process boundaries (Ray pickles it by reference to this module)
and can be compared in tests.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

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
    "PolicySettings",
    "Reason",
    "ReplicaStatus",
    "Rule",
    "Settings",
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
    # seconds since the engine last changed mode; rebuilds dwell after an actor restart
    mode_age_s: float | None = None
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


class Settings(BaseModel):
    """Base of the settings records (PolicySettings, PolicyConfig, routing's ClassRule and
    RoutingConfig): frozen, no unknown keys, finite numbers, enums kept as members. Each field's
    type, default, bounds and description are declared once, here in the policy package; the app
    config's `policy` and `routing` sections are subclasses, so the checks are the fields' own."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_enum_values=False, allow_inf_nan=False)

    def replace(self, **changes: Any) -> Self:
        """A copy with `changes`, validated like the original (pydantic's model_copy is not)."""
        return self.model_validate({**dict(self), **changes})


class PolicySettings(Settings):
    """The policy settings users set: the app config's `policy` section is this plus the app's own
    keys (deployments.config.PolicySection). Every field has a usable default.

    Cost-model priors are engine step times (seconds) as `base + per_req * batch`,
    derived from the H200 Llama-3.1-8B shapes in ../shared/gpu/README.md: plain decode
    4.85 ms at batch 1 and 10.1 ms at batch 128; EAGLE-3 (16 draft tokens) calibrated so
    that at accept length 3 it gives ~1.9x the tok/s at batch 1 and ~0.5x at batch 128.
    """

    rule: Rule = Field(
        default=Rule.THRESHOLD,
        description="Decision rule: threshold (hysteresis on load) | goodput (predicted tok/s with vs "
        "without speculation) | mixed (threshold, plus enough replicas kept ON for the latency-class "
        "requests in flight, sized by the cost model) | hold (never flips; overrides only).",
    )
    load_metric: LoadMetric = Field(
        default=LoadMetric.RUNNING_PLUS_WAITING,
        description="What counts as a replica's load: running+waiting | running | waiting.",
    )
    high: float = Field(default=32.0, description="threshold: turn speculation OFF when load >= high.")
    low: float = Field(default=12.0, description="threshold: turn speculation back ON when load <= low.")
    dwell_s: float = Field(default=10.0, ge=0, description="Minimum seconds between flips of one replica.")
    persist_s: float = Field(
        default=0.0,
        ge=0,
        description="A rule's wish to flip (either way) must hold this many seconds over consecutive "
        "ticks before it acts (a momentary spike in load is ignored); 0 acts at once.",
    )
    on_persist_s: float = Field(
        default=3.0,
        ge=0,
        description="A wish to turn speculation back ON must hold this many seconds over consecutive "
        "ticks (at least persist_s) before it acts: between two waves of a closed-loop client a "
        "replica's load dips to ~0 for a moment, which is not low load. Turning OFF waits only "
        "persist_s, so relief under load stays prompt. A tick where ON is still predicted at least "
        "as good, inside goodput_margin, does not break the wish.",
    )
    on_persist_max_s: float = Field(
        default=10.0,
        ge=0,
        description="With on_persist_s > 0 a wish to turn ON must also outlast twice the longest dip "
        "of the last minute that high load ended (a slow client's gap between waves), up to this.",
    )
    max_flips_per_tick: int | None = Field(
        default=None,
        ge=1,
        description="Fleet limit: rule flips per policy tick; null = no limit (overrides never count).",
    )
    min_on_replicas: int = Field(
        default=0, ge=0, description="Keep at least this many replicas ON for latency traffic."
    )
    mixed_on_fill: float = Field(
        default=0.5,
        gt=0,
        le=1,
        description="mixed: an ON replica is counted for this fraction of its crossover batch of "
        "latency-class requests (the batch where the cost model predicts OFF as fast as ON); k = "
        "ceil(interactive in flight / that).",
    )
    stale_after_s: float = Field(
        default=5.0, gt=0, description="A replica whose last report is older is never flipped."
    )
    goodput_margin: float = Field(
        default=0.10,
        ge=0,
        description="goodput: flip only if the other mode is predicted better by this fraction.",
    )
    default_accept_length: float = Field(
        default=2.5,
        ge=1,
        description="goodput: accept length assumed until a replica reports one (it counts the bonus "
        "token, so >= 1).",
    )
    off_step_base_s: float = Field(default=4.81e-3, gt=0, description="goodput prior: OFF step base seconds.")
    off_step_per_req_s: float = Field(
        default=4.16e-5, ge=0, description="goodput prior: OFF step seconds per request."
    )
    on_step_base_s: float = Field(
        default=7.25e-3,
        gt=0,
        description="goodput prior: an engine step ON takes base + per_req * batch seconds; the "
        "defaults are H200 Llama-3.1-8B numbers: put your engine's measured line here "
        "(loadtests.bench.step_costs fits it).",
    )
    on_step_per_req_s: float = Field(
        default=4.18e-4, ge=0, description="goodput prior: ON step seconds per request."
    )
    tick_s: float = Field(
        default=1.0, gt=0, le=60, description="Seconds between two policy decisions (actor), at most 60."
    )
    ttl_s: float = Field(default=30.0, description="Forget a replica that has not reported for this long.")

    @property
    def longest_on_wait_s(self) -> float:
        """The longest a wish to turn ON can be made to hold (the rule's learned wait at its cap)."""
        on_wait = max(self.on_persist_s, self.on_persist_max_s) if self.on_persist_s > 0 else 0.0
        return max(self.persist_s, on_wait)

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if not 0 <= self.low < self.high:
            raise ValueError(f"need 0 <= low < high, got low={self.low} high={self.high}")
        if self.ttl_s <= self.stale_after_s:
            raise ValueError(f"ttl_s ({self.ttl_s}) must exceed stale_after_s ({self.stale_after_s})")
        return self


class PolicyConfig(PolicySettings):
    """Everything the rules and the actor are tuned by: the settings users set, plus what the app
    sets (`batch_cap`) and the online fit's internals."""

    # largest batch the engine runs; goodput predictions cap the load here (the app sets it from
    # engine.max_running_requests)
    batch_cap: int = Field(default=128, ge=1)
    # weight of the prior, in reports, at each of two pseudo-points (batch 1 and batch_cap)
    prior_weight: float = Field(default=2.0, gt=0)
    # per-report decay of older reports in the online fit, both modes (1.0: never forget)
    fit_decay: float = Field(default=0.95, gt=0, le=1)


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
