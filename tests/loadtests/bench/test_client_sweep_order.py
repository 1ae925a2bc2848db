"""`loadtests.bench.client_sweep.rotated`: over as many repeats as variants, each variant runs first
at a level once (the sweep's order, so a variant's place is not confounded with the variant)."""

from __future__ import annotations

from loadtests.bench.client_sweep import rotated


def test_each_variant_leads_one_repeat_and_every_repeat_runs_them_all() -> None:
    variants = ["dynamic", "on", "off"]
    orders = [rotated(variants, k) for k in range(4)]
    assert orders[0] == ["dynamic", "on", "off"]  # one repeat: the order given
    assert orders[1] == ["on", "off", "dynamic"]
    assert orders[2] == ["off", "dynamic", "on"]
    assert orders[3] == orders[0]
    assert {o[0] for o in orders[:3]} == set(variants)
    assert all(sorted(o) == sorted(variants) for o in orders)
    assert rotated([], 2) == []
