"""`loadtests.bench.client_sweep`'s run order: over as many repeats as variants, each variant runs
first at a level once (`rotated`: a variant's place is not confounded with the variant), and
`--levels-of` keeps a variant to some levels (`plan`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadtests.bench.client_sweep import main
from loadtests.bench.sweep_plan import levels_of, plan, rotated, servers


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


def test_levels_of_runs_a_variant_at_some_levels_only() -> None:
    """SGLang's servers at c=256 and the app's variants at c=256 and 8 in one sweep: the app's
    variants keep their rotation, a raw server runs only its level's repeats."""
    variants = ["off", "dynamic", "raw_plain"]
    only = levels_of(["raw_plain=256"], variants, [256, 8])
    assert only == {"raw_plain": [256]}
    assert plan(variants[:2], [256, 8], 2, only) == [
        (256, 0, "off"), (256, 0, "dynamic"), (256, 1, "dynamic"), (256, 1, "off"),
        (8, 0, "off"), (8, 0, "dynamic"), (8, 1, "dynamic"), (8, 1, "off"),
    ]  # fmt: skip
    assert plan(["raw_plain"], [256, 8], 2, only) == [(256, 0, "raw_plain"), (256, 1, "raw_plain")]
    assert plan(variants, [8], 1, {}) == [(8, 0, v) for v in variants]  # no --levels-of: every level


@pytest.mark.parametrize("item", ["raw_eagle=256", "raw_plain=64", "raw_plain=", "raw_plain", "raw_plain=x"])
def test_levels_of_names_what_it_cannot_run(item: str) -> None:
    """A variant not swept, a level not in --concurrency, no levels: a ValueError naming the item."""
    with pytest.raises(ValueError, match="--levels-of"):
        levels_of([item], ["off", "raw_plain"], [256, 8])
    assert levels_of(["raw_plain=256, 8"], ["raw_plain"], [256, 8]) == {"raw_plain": [8, 256]}


def test_app_variants_in_a_row_share_a_server_and_each_raw_one_starts_its_own() -> None:
    app = ("on", "off", "dynamic")
    assert servers(["raw_plain", "off", "on", "raw_eagle", "dynamic"], app) == [
        ["raw_plain"], ["off", "on"], ["raw_eagle"], ["dynamic"],
    ]  # fmt: skip
    assert servers(["raw_plain", "raw_eagle"], app) == [["raw_plain"], ["raw_eagle"]]
    assert servers([], app) == []


def test_the_dry_run_prints_each_servers_runs_and_starts_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "never"
    args = ["--config", "deployments/examples/h200-dummy8b-tree.yaml", "--variants", "raw_plain,off,on"]
    args += ["--concurrency", "256,8", "--repeat", "2", "--prompts", "256=1088", "--out", str(out)]
    assert main([*args, "--dry-run"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "raw_plain (raw_plain): 4 runs" and printed[5] == "app (off, on): 8 runs"
    assert printed[1] == "  c=256 repeat 0 raw_plain: 1088 prompts"
    assert printed[4] == "  c=8 repeat 1 raw_plain: 32 prompts"  # --min-waves 4 where --prompts is silent
    assert printed[6:8] == ["  c=256 repeat 0 off: 1088 prompts", "  c=256 repeat 0 on: 1088 prompts"]
    assert printed[-1] == f"12 runs, {(3 * 2 * 1088 + 3 * 2 * 32) * 128:,} output tokens"
    assert not out.exists()
    # a --prompts level that is not swept is a typo, named
    assert main([*args, "--prompts", "265=1088", "--dry-run"]) == 2
    assert "--prompts at 265, not a level of --concurrency" in capsys.readouterr().err
