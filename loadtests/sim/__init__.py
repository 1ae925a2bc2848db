"""Fleet simulator: replicas as continuous-batching engines under a speculation policy. Pure.

Tooling, not serving: nothing in `deployments/` or the policy core imports it (tests/test_layers.py).
The simulated policy is the production one (`policy.fleet.FleetView` ticking `rules.decide`).

- `model`: per-mode engine step costs (H200 defaults, or measured curves);
- `trace`: load phases and traces (open-loop Poisson, closed-loop users, lockstep waves);
- `sources`: requests from a trace, in time order;
- `run`: `simulate(trace, policy, model, config) -> SimResult`.

Reports and plots: `python -m loadtests.bench.policy_sim --out docs/`.
"""

from loadtests.sim.model import EngineModel, default_model, load_calibration
from loadtests.sim.run import SimConfig, SimPolicy, SimResult, simulate
from loadtests.sim.sources import SimRequest
from loadtests.sim.trace import ClosedLoop, Phase, Trace, lockstep, low_high_low, poisson, steps, sticky_users

__all__ = [
    "ClosedLoop",
    "EngineModel",
    "Phase",
    "SimConfig",
    "SimPolicy",
    "SimRequest",
    "SimResult",
    "Trace",
    "default_model",
    "load_calibration",
    "lockstep",
    "low_high_low",
    "poisson",
    "simulate",
    "steps",
    "sticky_users",
]
