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

from loadtests.bench.step_costs import KEYS, fit_line, measured_crossover

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
