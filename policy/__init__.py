"""Speculation policy: pure decision rules, the Ray actor that applies them, a fleet simulator.

Pure (no ray/torch/sglang): types, state, costmodel, rules (`decide`), fleet (the actor's
memory), metrics, sim_model, sim_trace, sim, sim_report, bench. The Ray shell is
`policy.actor` (SpeculationPolicy, PolicyClient, get_or_create_policy_actor); it is not
imported here so that `import policy` never pulls in Ray.
"""

from policy.rules import decide
from policy.state import PolicyState, with_override
from policy.types import (
    ClientDecision,
    Decision,
    DecisionSource,
    FleetStatus,
    LoadMetric,
    Observation,
    Override,
    PolicyConfig,
    Rule,
    SetSpeculation,
    SpecMode,
    UnknownReplicaError,
)

__all__ = [
    "ClientDecision",
    "Decision",
    "DecisionSource",
    "FleetStatus",
    "LoadMetric",
    "Observation",
    "Override",
    "PolicyConfig",
    "PolicyState",
    "Rule",
    "SetSpeculation",
    "SpecMode",
    "UnknownReplicaError",
    "decide",
    "with_override",
]
