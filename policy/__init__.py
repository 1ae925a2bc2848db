"""Speculation policy: pure decision rules and the Ray actor that applies them.

Pure (no ray/torch/sglang): types, state, costmodel, reports, rules (`decide`), fleet (the
actor's memory), metrics. The Ray shell is `policy.actor` (SpeculationPolicy, PolicyClient,
get_or_create_policy_actor); it is not imported here so that `import policy` never pulls in Ray.
`loadtests.sim` is the fleet simulator (pure too): tooling, which serving code never imports.
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
