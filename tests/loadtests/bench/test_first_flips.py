"""loadtests.bench.first_flips end to end on CPU on the real engine, as it runs on the GPU host: one
fresh engine per warm-up, rounds that really flip (a resync each), the warm-up's own row, and the
slow steps read back from the engine. CPU compiles nothing on first use, so no step is asserted slow."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from deployments.replica.warmup import batch_buckets
from loadtests.bench.first_flips import main

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    "argv", [["--warm-up", "cold"], ["--batches", "0"], ["--batches", "x"], ["--repeat", "0"]]
)
def test_bad_arguments_are_refused_before_an_engine_starts(argv: list[str], tmp_path: Path) -> None:
    assert main(["--config", "unused.yaml", "--out", str(tmp_path), *argv]) == 2


@pytest.mark.engine
@pytest.mark.slow
def test_first_flips_end_to_end_on_cpu(tmp_path: Path, tiny_config: Path) -> None:
    out = tmp_path / "out"
    argv = [
        sys.executable, "-m", "loadtests.bench.first_flips", "--config", str(tiny_config),
        "--warm-up", "none,product", "--batches", "3,5", "--repeat", "2", "--out", str(out),
    ]  # fmt: skip
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    data = json.loads((out / "results.json").read_text())
    assert [r["warm_up"] for r in data["runs"]] == ["none", "product"]
    none, product = (r["rounds"] for r in data["runs"])
    labels = [f"batch {n} round {k}" for n in (3, 5) for k in (1, 2)]
    assert [r["round"] for r in none] == labels
    assert [r["round"] for r in product] == ["warm-up (batch 1-16)", *labels]
    # two rounds per bucket of the cap (16: 1, 2, 4, 8, 16), each with at least one resync
    assert product[0]["resyncs"] >= 2 * len(batch_buckets(16))
    for r in none + product:
        assert r["seconds"] > 0 and r["resyncs"] >= 1, r  # each round flipped ON mid-decode
        assert r["slow_steps"] == len(r["slow"]), r  # the engine's count and its log agree
    report = (out / "report.md").read_text()
    assert "| none | batch 3 round 1 |" in report and "| product | warm-up (batch 1-16) |" in report
