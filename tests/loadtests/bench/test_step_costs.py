"""loadtests.bench.step_costs: the least-squares step-time lines, the measured crossover, and the whole
run on CPU (the specflip engine of a config, ON then OFF, its own decode counters) writing a config
the app loads with the fitted priors. Asserts the fit and the files, not the CPU's numbers."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from loadtests.bench.step_costs import KEYS, decision_levels, fit_line, fit_priors, measured_crossover

ROOT = Path(__file__).resolve().parents[3]


def test_fit_line_recovers_a_line_and_never_a_falling_or_free_step() -> None:
    base, per_req = fit_line([(1, 0.005 + 0.0001), (64, 0.005 + 0.0064), (128, 0.005 + 0.0128)])
    assert base == pytest.approx(0.005) and per_req == pytest.approx(1e-4)
    assert fit_line([(1, 0.010), (128, 0.008)])[1] == 0.0  # noise that falls: flat, not negative
    assert fit_line([(8, 0.004)]) == (pytest.approx(0.004), 0.0)  # one size: its time, no slope
    assert fit_line([(1, 0.001), (100, 0.5)])[0] > 0  # a line through below zero keeps base > 0
    with pytest.raises(ValueError):
        fit_line([])


@pytest.mark.parametrize(
    ("ratios", "want"),
    [
        ({1: 0.6, 32: 0.9, 64: 1.1}, 32 + 0.1 * 32 / 0.2),  # between 32 and 64, linear in the ratio
        ({1: 0.6, 64: 0.8, 256: 0.9}, None),  # ON faster everywhere (the second H200 run)
        ({1: 1.2, 64: 1.5}, 1.0),  # OFF never slower
    ],
)
def test_measured_crossover(ratios: dict[int, float], want: float | None) -> None:
    levels = [{"batch": b, "on_tok_s": 1000.0, "off_tok_s": 1000.0 * r} for b, r in ratios.items()]
    got = measured_crossover(levels)
    assert got == (None if want is None else pytest.approx(want))


@pytest.mark.engine
@pytest.mark.slow
def test_step_costs_end_to_end_on_cpu_writes_a_config_the_app_loads(
    tmp_path: Path, tiny_config: Path
) -> None:
    from deployments.config import load_config

    out, fitted_cfg = tmp_path / "out", tmp_path / "fitted.yaml"
    argv = [
        sys.executable, "-m", "loadtests.bench.step_costs", "--config", str(tiny_config), "--batches", "1,2,4",
        "--requests-per-user", "1", "--input-len", "12", "--output-len", "24", "--out", str(out),
        "--write-config", str(fitted_cfg),
    ]  # fmt: skip
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    data = json.loads((out / "results.json").read_text())
    for mode in ("on", "off"):
        for b in ("1", "2", "4"):
            r = data["measured"][mode][b]
            assert r["steps"] > 0 and r["step_s"] > 0 and 0 < r["mean_batch"] <= int(b), (mode, b, r)
    assert data["accept_length"] is not None and data["accept_length"] >= 1
    fitted = data["fitted"]
    assert set(fitted) == set(KEYS) and all(math.isfinite(v) for v in fitted.values())
    assert fitted["on_step_base_s"] > 0 and fitted["off_step_base_s"] > 0
    assert 1 <= data["crossover_predicted"] <= load_config(str(tiny_config)).engine.max_running_requests
    policy = load_config(str(fitted_cfg)).policy  # the written config is one the app takes
    for k in KEYS:
        assert getattr(policy, k) == pytest.approx(fitted[k], rel=1e-5), k
    report = (out / "report.md").read_text()
    assert "| `on_step_base_s` |" in report and "Crossover batch predicted by the fitted lines" in report


def test_decision_levels_are_the_ones_near_the_crossover() -> None:
    assert decision_levels([1, 4, 8, 16, 32, 64], 10.2) == [1, 4, 8, 16]  # up to twice the crossover
    assert decision_levels([1, 64, 128, 256], 2.0) == [1, 64, 128]  # at least three levels
    assert decision_levels([1, 8, 64], None) == [1, 8, 64]  # ON faster everywhere: every level


def test_fit_priors_uses_only_the_given_levels_and_their_median_accept() -> None:
    def level(step_ms: float, batch: float, accept: float | None = None) -> dict:
        return {"step_s": step_ms / 1e3, "mean_batch": batch, "steps": 10, "accept_length": accept}

    measured = {
        "on": {1: level(8, 1, 2.6), 8: level(11.5, 8, 2.3), 16: level(15.5, 16, 2.4), 64: level(48, 50, 2.5)},
        "off": {1: level(5, 1), 8: level(5.2, 8), 16: level(5.4, 16), 64: level(6, 50)},
    }
    fitted, accept = fit_priors(measured, [1, 8, 16])
    assert fitted["on_step_base_s"] == pytest.approx(0.0075, rel=0.05)  # the 64 level's jump left out
    assert fitted["on_step_per_req_s"] == pytest.approx(0.0005, rel=0.05)
    assert accept == 2.4


def test_refit_of_the_h200_run_puts_the_crossover_near_the_measured_one(tmp_path: Path) -> None:
    """The 2026-12-04 H200 measurements (tree shape): lines through every level predict a crossover
    far below the measured one; the decision-region fit lands near it (the reason the fit changed)."""
    results = ROOT / "docs/gpu/h200-2026-12-04-fitted/fit/results.json"
    out, cfg = tmp_path / "out", tmp_path / "fitted.yaml"
    argv = [
        sys.executable, "-m", "loadtests.bench.step_costs", "--config",
        str(ROOT / "deployments/examples/h200-dummy8b-tree.yaml"), "--refit", str(results), "--out", str(out),
        "--write-config", str(cfg),
    ]  # fmt: skip
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads((out / "results.json").read_text())
    found, near, every = (
        data["crossover_measured"], data["crossover_predicted"], data["every_level"]["crossover_predicted"],
    )  # fmt: skip
    assert abs(near - found) <= 0.25 * found < abs(every - found), (found, near, every)
    assert data["fitted_on"] == [1, 4, 8, 16]
    assert cfg.read_text().count("_step_") == 4
