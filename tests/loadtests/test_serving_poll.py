"""docs/gpu/serving_poll.sh keeps `$OUT` current while it waits: a device command cut off at its limit
(or a host taken back) mid-wait still brings back the results the chain had written by then."""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
POLL = ROOT / "docs" / "gpu" / "serving_poll.sh"


def _chain_results(tmp: Path, files: dict[str, str]) -> tuple[Path, dict[str, str]]:
    """A results folder holding `files` (path -> text), an empty $OUT, and the poll's environment."""
    results, out = tmp / "results", tmp / "out"
    for name, text in files.items():
        (results / name).parent.mkdir(parents=True, exist_ok=True)
        (results / name).write_text(text)
    out.mkdir()
    return out, {**os.environ, "CHAIN_RESULTS": str(results), "OUT": str(out)}


@contextlib.contextmanager
def _chain_holding_the_lock(results: Path) -> Iterator[None]:
    """As serving_chain.sh holds `chain.lock` while it runs."""
    with (results / "chain.lock").open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        yield


def test_poll_packs_results_before_its_wait_ends(tmp_path: Path) -> None:
    files = {
        "sweep/sweep.csv": "shape,variant\ntree,on\n",
        "sweep.log": "run 1\n",
        "progress.log": "[chain] sweep: start\n",
        "top.log": "== 1796440000\n",  # the host's CPU samples travel with the sweep
    }
    out, env = _chain_results(tmp_path, files)
    env["POLL_EVERY"] = "1"
    # a chain runs (it holds the results folder's lock); a 60-s wait killed after 3 s, as the device
    # tool kills a command at its limit
    with _chain_holding_the_lock(tmp_path / "results"):
        done = subprocess.run(
            ["timeout", "3", "bash", str(POLL), "60"], env=env, capture_output=True, timeout=30
        )
    assert done.returncode == 124
    assert sorted(p.name for p in out.iterdir()) == ["sweep.tgz"]  # no half-written pack left beside it
    with tarfile.open(out / "sweep.tgz") as tar:
        assert {"sweep/sweep.csv", "sweep.log", "progress.log", "top.log"} <= set(tar.getnames())
        member = tar.extractfile("sweep/sweep.csv")
        assert member is not None and member.read() == b"shape,variant\ntree,on\n"


def _poll_once(tmp: Path, files: dict[str, str]) -> tuple[Path, str]:
    """The chain's results made of `files`, polled once without a wait: ($OUT, what the poll printed)."""
    out, env = _chain_results(tmp, files)
    done = subprocess.run(["bash", str(POLL), "0"], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return out, done.stdout


def _packed(tgz: Path) -> set[str]:
    with tarfile.open(tgz) as tar:
        return set(tar.getnames())


def test_poll_without_a_wait_prints_progress_and_packs(tmp_path: Path) -> None:
    files = {"fit/results.json": "{}", "fitted.yaml": "x: 1\n", "progress.log": "[chain] fit: rc=0\n"}
    out, stdout = _poll_once(tmp_path, files)
    assert "[chain] fit: rc=0" in stdout
    assert "fitted.yaml" in _packed(out / "fit.tgz")


@pytest.mark.parametrize("workload", ["closed", "open"])
def test_a_transition_comes_back_with_its_plan(tmp_path: Path, workload: str) -> None:
    """The plan the chain made for a transition (CHAIN_CLOSED_PLAN / CHAIN_OPEN_PLAN) in its pack."""
    want = {f"transition_{workload}/transition.csv", f"{workload}_plan.json", f"{workload}_plan.log"}
    out, _ = _poll_once(tmp_path, dict.fromkeys([*want, f"transition_{workload}.log", "progress.log"], "x\n"))
    assert want <= _packed(out / f"transition_{workload}.tgz")


def test_poll_stops_waiting_once_no_chain_runs(tmp_path: Path) -> None:
    """A chain that ended (its lock free) ends the wait at the next pack: a device command asked to
    wait 60 s does not hold the machine for the rest of it."""
    files = {"sweep/sweep.csv": "shape,variant\ntree,off\n", "progress.log": "[chain] all done\n"}
    out, env = _chain_results(tmp_path, files)
    (tmp_path / "results" / "chain.lock").touch()  # left by the chain that ended
    env["POLL_EVERY"] = "1"
    started = time.monotonic()
    done = subprocess.run(["bash", str(POLL), "60"], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and time.monotonic() - started < 15
    assert "no chain holds" in done.stdout and "[chain] all done" in done.stdout
    assert (out / "sweep.tgz").is_file()


def test_the_engines_alone_come_back_without_their_traces_and_the_traces_apart(tmp_path: Path) -> None:
    """A profiled arrivals run's traces can be megabytes each: in their own pack, so a pack over the
    device tool's per-file limit would cost the traces, never the results."""
    files = {
        "arrivals/results.json": "{}",
        "arrivals/report.md": "# report\n",
        "arrivals/profiles/plain-c256-TP-0.trace.json.gz": "trace",
        "arrivals.log": "[engine-arrivals] done\n",
    }
    out, _ = _poll_once(tmp_path, files)
    names = _packed(out / "arrivals.tgz")
    assert {"arrivals/results.json", "arrivals/report.md", "arrivals.log"} <= names
    assert not any("profiles" in n for n in names)
    assert "arrivals/profiles/plain-c256-TP-0.trace.json.gz" in _packed(out / "arrivals-profiles.tgz")
