"""The transition goals from client_transition results (loadtests.bench.transition_goals): the closed
loop's whole run against the better static mode, dynamic within 5% inside each phase (TPOT p50 in low
phases, output tok/s in high ones), and the plan's prediction beside."""

from __future__ import annotations

import csv
import json
from dataclasses import asdict
from pathlib import Path

import pytest

from loadtests.bench.client_transition import PhaseRun
from loadtests.bench.transition_goals import main, verdicts

# (variant, phase, load, duration_s, output_tok_s, tpot_p50_ms): low-high-low
PHASES = [
    ("on", 0, "low", 29.0, 510.0, 3.5), ("on", 1, "high", 42.0, 3100.0, 65.0), ("on", 2, "low", 29.5, 505.0, 3.5),
    ("off", 0, "low", 41.0, 360.0, 5.0), ("off", 1, "high", 22.5, 5800.0, 26.0), ("off", 2, "low", 41.0, 361.0, 5.0),
    ("dynamic", 0, "low", 29.2, 508.0, 3.6), ("dynamic", 1, "high", 24.0, 5450.0, 27.0),
    ("dynamic", 2, "low", 31.0, 480.0, 3.8),
]  # fmt: skip


# what the goals do not read, the same in every row
SAME = {"ttft_p99_ms": 900.0, "goodput_rps": 1.5, "ttft_p50_ms": 300.0, "completed": 10, "prompts": 10,
        "good_requests": 9, "flips": 0, "engine_flips": 0, "slow_steps": 0, "on_fraction": None, "started": 0.0}  # fmt: skip


def _csv(path: Path, workload: str = "closed", phases: list[tuple] = PHASES) -> Path:
    runs = [
        PhaseRun(
            workload, v, i, load, int(tok_s * s), s, tpot, output_tok_s=tok_s, tpot_p99_ms=2 * tpot, **SAME
        )
        for v, i, load, s, tok_s, tpot in phases
    ]
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(asdict(runs[0])))
        w.writeheader()
        w.writerows(asdict(r) for r in runs)
    return path


def test_the_whole_run_and_each_phase_are_judged(tmp_path: Path) -> None:
    got = verdicts(list(csv.DictReader(_csv(tmp_path / "transition.csv").open())))
    assert got["whole_s"]["dynamic"] == pytest.approx(84.2)
    assert got["whole_x"] == pytest.approx(min(100.5, 104.5) / 84.2)  # 1.194: met
    # phase 1 (high): 5,450 tok/s < 0.95 x 5,800 = 5,510; phase 2 (low): TPOT 3.8 ms > 1.05 x 3.5 = 3.675
    assert [p["within"] for p in got["phases"]] == [True, False, False]


def test_the_report_says_met_short_and_the_plans_prediction(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    plan = {"whole_run": {"best": {"on_s": 100.0, "off_s": 104.0, "dynamic_s": 83.0, "dynamic_over_better_static": 1.2},
                          "worst": {"dynamic_s": 85.0, "dynamic_over_better_static": 1.18}}}  # fmt: skip
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    _csv(tmp_path / "transition.csv")
    assert main([str(tmp_path), "--plan", str(tmp_path / "plan.json")]) == 0
    out = capsys.readouterr().out
    assert "- dynamic over the better static mode, whole run: 1.194x (met: >= 1.15)" in out
    assert "- the plan predicted static ON 100.0 s, static OFF 104.0 s, dynamic 83.0-85.0 s" in out
    assert "- inside each phase, dynamic within 5%: 1/3 phases; short in phase 1, 2" in out
    assert "| 1 | high | 42.0 | 3,100 | 65.00 | 1.50 |" in out


def test_an_open_loop_has_no_whole_run_goal_and_a_missing_variant_judges_nothing(tmp_path: Path) -> None:
    got = verdicts(list(csv.DictReader(_csv(tmp_path / "t.csv", workload="open").open())))
    assert got["whole_x"] is None and not got["closed"]
    assert [p["within"] for p in got["phases"]] == [True, False, False]
    only = [row for row in PHASES if row[0] != "off"]
    got = verdicts(list(csv.DictReader(_csv(tmp_path / "u.csv", phases=only).open())))
    assert got["whole_x"] is None and [p["within"] for p in got["phases"]] == [None, None, None]


def test_a_missing_file_or_an_open_loop_plan_is_refused(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    assert main([str(tmp_path / "nowhere.csv")]) == 2
    _csv(tmp_path / "transition.csv")
    (tmp_path / "open.json").write_text(json.dumps({"phases": "low:1r@20", "open_loop": []}))
    assert main([str(tmp_path), "--plan", str(tmp_path / "open.json")]) == 2
    assert "not a closed-loop plan" in capsys.readouterr().err
