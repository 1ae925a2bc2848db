"""docs/gpu/serving_poll.sh keeps `$OUT` current while it waits: a device command cut off at its limit
(or a host taken back) mid-wait still brings back the results the chain had written by then."""

from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
POLL = ROOT / "docs" / "gpu" / "serving_poll.sh"


def test_poll_packs_results_before_its_wait_ends(tmp_path: Path) -> None:
    results, out = tmp_path / "results", tmp_path / "out"
    (results / "sweep").mkdir(parents=True)
    out.mkdir()
    (results / "sweep" / "sweep.csv").write_text("shape,variant\ntree,on\n")
    (results / "sweep.log").write_text("run 1\n")
    (results / "progress.log").write_text("[chain] sweep: start\n")
    env = {**os.environ, "CHAIN_RESULTS": str(results), "OUT": str(out), "POLL_EVERY": "1"}
    # a 60-s wait killed after 3 s, as the device tool kills a command at its limit
    done = subprocess.run(["timeout", "3", "bash", str(POLL), "60"], env=env, capture_output=True, timeout=30)
    assert done.returncode == 124
    assert sorted(p.name for p in out.iterdir()) == ["sweep.tgz"]  # no half-written pack left beside it
    with tarfile.open(out / "sweep.tgz") as tar:
        assert {"sweep/sweep.csv", "sweep.log", "progress.log"} <= set(tar.getnames())
        member = tar.extractfile("sweep/sweep.csv")
        assert member is not None and member.read() == b"shape,variant\ntree,on\n"


def test_poll_without_a_wait_prints_progress_and_packs(tmp_path: Path) -> None:
    results, out = tmp_path / "results", tmp_path / "out"
    (results / "fit").mkdir(parents=True)
    out.mkdir()
    (results / "fit" / "results.json").write_text("{}")
    (results / "fitted.yaml").write_text("x: 1\n")
    (results / "progress.log").write_text("[chain] fit: rc=0\n")
    env = {**os.environ, "CHAIN_RESULTS": str(results), "OUT": str(out)}
    done = subprocess.run(["bash", str(POLL), "0"], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0
    assert "[chain] fit: rc=0" in done.stdout
    with tarfile.open(out / "fit.tgz") as tar:
        assert "fitted.yaml" in tar.getnames()
