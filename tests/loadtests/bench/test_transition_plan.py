"""The closed-loop transition's plan (loadtests.bench.transition_plan): balanced phases make static ON and
static OFF take the same whole time, every phase lasts at least the minimum in its faster mode, the
prediction charges dynamic the policy's waits at each change of load, and the printed `--phases` is one
client_transition reads."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from loadtests.bench.client_transition import default_warmup, parse_phases
from loadtests.bench.transition_plan import Rates, balanced, lags, main, predict, rates_from_sweeps, summary
from policy.types import PolicySettings

RATES = Rates(on_low=507.0, off_low=364.0, on_high=3134.0, off_high=5804.0)  # H200 tok/s, c = 2 and 256
PATTERN = ["low", "high", "low", "high", "low"]


def _tokens(low_n: int, high_n: int, out: int = 128) -> dict[str, float]:
    return {"low": float(low_n * out), "high": float(high_n * out)}


def test_balanced_phases_make_both_static_modes_take_the_same_time_and_last_the_minimum() -> None:
    low_n, high_n = balanced(PATTERN, RATES, 20.0, 128, 2, 256)
    assert low_n % 2 == 0 and high_n % 256 == 0  # whole waves
    rows = predict(PATTERN, _tokens(low_n, high_n), RATES, 0.0, 0.0)
    whole = summary(rows)
    # equal up to the rounding to whole waves: one wave of 256 at the high level is 256 x 128 tokens
    assert abs(whole["on_s"] - whole["off_s"]) <= 256 * 128 * (1 / RATES.on_high - 1 / RATES.off_high) + 1
    for r in rows:
        assert min(float(r["on_s"]), float(r["off_s"])) >= 20.0, r
    # with no reaction time dynamic is each phase's better mode: the ideal gain, 1.2-1.3x for these rates
    assert 1.2 < whole["dynamic_over_better_static"] < 1.3


def test_low_phases_grow_to_the_minimum_when_the_balance_makes_them_short() -> None:
    rates = Rates(on_low=4000.0, off_low=2000.0, on_high=3000.0, off_high=6000.0)  # ON saves a lot at low
    low_n, high_n = balanced(PATTERN, rates, 20.0, 128, 2, 256)
    rows = predict(PATTERN, _tokens(low_n, high_n), rates, 0.0, 0.0)
    assert min(float(r["on_s"]) for r in rows if r["load"] == "low") >= 20.0


def test_dynamic_pays_the_policys_waits_where_the_load_changes_and_not_in_the_first_phase() -> None:
    tokens = _tokens(116, 1024)
    ideal = predict(PATTERN, tokens, RATES, 0.0, 0.0)
    late = predict(PATTERN, tokens, RATES, 4.0, 1.0)
    assert late[0]["dynamic_s"] == ideal[0]["dynamic_s"] == ideal[0]["on_s"]
    for i in (2, 4):  # 4 s OFF at low load: 4 x (1 - 364/507) s lost
        assert float(late[i]["dynamic_s"]) - float(ideal[i]["dynamic_s"]) == pytest.approx(
            4 * (1 - 364 / 507)
        )
    for i in (1, 3):  # 1 s ON at high load
        assert float(late[i]["dynamic_s"]) - float(ideal[i]["dynamic_s"]) == pytest.approx(1 - 3134 / 5804)
    # where one mode wins at both levels, dynamic stays in it: no wait is charged
    off_wins = Rates(on_low=300.0, off_low=400.0, on_high=3000.0, off_high=6000.0)
    for r in predict(PATTERN, tokens, off_wins, 4.0, 1.0):
        assert r["dynamic_s"] == r["off_s"], r
    tiny = predict(["high", "low"], {"high": 1e5, "low": 100.0}, RATES, 60.0, 1.0)
    assert tiny[1]["dynamic_s"] == pytest.approx(tiny[1]["off_s"])  # the phase ended inside the wait


def test_the_waits_come_from_the_policy_settings() -> None:
    p = PolicySettings(tick_s=0.5, on_persist_s=3.0, on_persist_max_s=10.0, persist_s=0.0)
    assert lags(p, worst=False) == (4.0, 1.0)
    assert lags(p, worst=True) == (11.0, 1.0)
    assert lags(p.replace(on_persist_s=0.0, persist_s=2.0), worst=True) == (3.0, 3.0)


def test_a_load_where_dynamic_cannot_gain_is_refused() -> None:
    with pytest.raises(ValueError, match="ON must win"):
        balanced(PATTERN, Rates(300.0, 400.0, 3000.0, 6000.0), 20.0, 128, 2, 256)


def _sweep(path: Path, rows: list[tuple[str, int, float]]) -> Path:
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["shape", "variant", "concurrency", "repeat", "output_tok_s"])
        w.writerows(("tree", v, c, k, tok_s) for k, (v, c, tok_s) in enumerate(rows))
    return path


def test_rates_are_medians_and_a_missing_level_is_named(tmp_path: Path) -> None:
    rows = [("on", 2, 500.0), ("on", 2, 520.0), ("on", 2, 900.0), ("off", 2, 360.0)]
    rows += [("on", 256, 3100.0), ("off", 256, 5800.0), ("raw_plain", 256, 9999.0)]
    rates = rates_from_sweeps([_sweep(tmp_path / "a.csv", rows)], 2, 256)
    assert rates == Rates(520.0, 360.0, 3100.0, 5800.0)
    with pytest.raises(ValueError, match=r"on at c=8, off at c=8"):
        rates_from_sweeps([tmp_path / "a.csv"], 8, 256)
    # a folder holding a sweep.csv (a chain's results) reads as its file; a path without one is named
    (tmp_path / "run").mkdir()
    _sweep(tmp_path / "run" / "sweep.csv", rows)
    assert rates_from_sweeps([tmp_path / "run"], 2, 256) == rates
    with pytest.raises(ValueError, match=r"no sweep.csv at .*nowhere"):
        rates_from_sweeps([tmp_path / "run", tmp_path / "nowhere"], 2, 256)


def test_the_command_prints_phases_client_transition_reads(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    rows = [("on", 2, 507.0), ("off", 2, 364.0), ("on", 256, 3134.0), ("off", 256, 5804.0)]
    sweep = _sweep(tmp_path / "sweep.csv", rows)
    config = "deployments/examples/h200-dummy8b-tree.yaml"
    assert main(["--sweep", str(sweep), "--config", config, "--json", str(tmp_path / "plan.json")]) == 0
    printed = capsys.readouterr().out
    phases_arg = printed.splitlines()[0].removeprefix("--phases ")
    phases = parse_phases(phases_arg, "closed")
    assert [p.load for p in phases] == PATTERN and {p.concurrency for p in phases} == {2, 256}
    doc = json.loads((tmp_path / "plan.json").read_text())
    assert doc["phases"] == phases_arg and doc["balanced"] is True
    best, worst = doc["whole_run"]["best"], doc["whole_run"]["worst"]
    assert worst["dynamic_s"] > best["dynamic_s"] > 0 and "dynamic over the better static mode" in printed
    # a given design is predicted, not balanced; a half-given one is refused
    assert main(["--sweep", str(sweep), "--config", config, "--pattern", "low,high,low",
                 "--low-prompts", "24", "--high-prompts", "768"]) == 0  # fmt: skip
    assert capsys.readouterr().out.startswith("--phases low:2x24,high:256x768,low:2x24\n")
    assert main(["--sweep", str(sweep), "--config", config, "--low-prompts", "24"]) == 2
    assert "go together" in capsys.readouterr().err


def test_the_open_loop_offers_a_rate_off_keeps_up_with_and_on_does_not(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    from loadtests.bench.transition_plan import open_rates

    low_rps, high_rps = open_rates(RATES, 128)
    assert low_rps == pytest.approx(507 / 128, abs=0.01)
    assert RATES.on_high < high_rps * 128 < RATES.off_high
    with pytest.raises(ValueError, match="OFF must outrun ON"):
        open_rates(Rates(507.0, 364.0, 6000.0, 5000.0), 128)
    rows = [("on", 2, 507.0), ("off", 2, 364.0), ("on", 256, 3134.0), ("off", 256, 5804.0)]
    sweep = _sweep(tmp_path / "sweep.csv", rows)
    args = [
        "--sweep",
        str(sweep),
        "--config",
        "deployments/examples/h200-dummy8b-tree.yaml",
        "--workload",
        "open",
    ]
    assert main([*args, "--json", str(tmp_path / "open.json")]) == 0
    phases = parse_phases(capsys.readouterr().out.splitlines()[0].removeprefix("--phases "), "open")
    assert [p.load for p in phases] == PATTERN
    for p in phases:  # each high phase lasts at least 20 s of arrivals, each low one 40 s
        assert p.rate is not None and p.prompts / p.rate >= (40.0 if p.load == "low" else 20.0), p
        assert p.prompts / p.rate < (41.0 if p.load == "low" else 21.0), p
    assert json.loads((tmp_path / "open.json").read_text())["workload"] == "open"
    assert main([*args, "--low-prompts", "2", "--high-prompts", "256"]) == 2


def test_the_warm_up_defaults_to_the_top_closed_level_or_the_engines_batch_limit() -> None:
    """client_transition's `--warmup` default: the highest closed phase's concurrency; a run of open phases
    only warms up at the config's engine batch limit, whatever that is, not a fixed number."""
    closed = parse_phases("low:2x8,high:64x128,low:2x8", "closed")
    assert default_warmup(closed, batch_cap=256) == 64
    open_loop = parse_phases("low:4r@80,high:35r@700", "open")
    assert default_warmup(open_loop, batch_cap=256) == 256
    assert default_warmup(open_loop, batch_cap=16) == 16
