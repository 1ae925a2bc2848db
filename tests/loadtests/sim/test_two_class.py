"""Two request classes in the simulator: class routing sends interactive requests to ON replicas."""

from __future__ import annotations

from loadtests.sim import SimConfig, SimPolicy, simulate
from loadtests.sim.model import default_model
from loadtests.sim.trace import Phase, Trace, TwoClassTrace
from policy.routing import RoutingConfig
from policy.types import PolicyConfig, Rule, SpecMode


def _trace(batch_rps: float) -> TwoClassTrace:
    return TwoClassTrace(
        interactive=Trace((Phase("run", 10.0, rate_rps=5.0),), out_min=32, out_max=64),
        batch=Trace((Phase("run", 10.0, rate_rps=batch_rps),), out_min=32, out_max=64),
    )


def _config(class_routing: bool) -> SimConfig:
    return SimConfig(
        replicas=4,
        drain_s=5.0,
        policy=PolicyConfig(dwell_s=1.0, tick_s=0.5, high=32, low=12, batch_cap=64),
        class_routing=class_routing,
        threshold_rule=Rule.MIXED,
        routing=RoutingConfig(stale_after_s=5.0, max_imbalance=1000),
    )


def test_mixed_rule_with_class_routing_keeps_interactive_tpot_low_under_a_batch_flood() -> None:
    model = default_model(accept_length=3.0, max_running=64)
    flood = 0.6 * 4 * model.output_tok_s(SpecMode.OFF, 64) / 48  # requests of ~48 tokens
    routed = simulate(_trace(flood), SimPolicy.THRESHOLD, model, _config(True))
    blind = simulate(_trace(flood), SimPolicy.THRESHOLD, model, _config(False))

    def inter_tpot(result) -> float:  # noqa: ANN001
        tpots = sorted(
            q.tpot for q in result.records if q.interactive and q.tpot is not None and q.arrival > 3
        )
        return tpots[len(tpots) // 2]

    assert any(q.interactive for q in routed.records) and any(not q.interactive for q in routed.records)
    # with class routing interactive requests run on the ON replica at a small batch: well under OFF's step
    assert inter_tpot(routed) < 0.8 * model.decode_step_s(SpecMode.OFF, 1)
    assert inter_tpot(blind) > inter_tpot(routed) * 1.5
