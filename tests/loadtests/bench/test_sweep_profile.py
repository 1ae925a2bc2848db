"""`loadtests.bench.sweep_profile` against real processes: py-spy samples a busy Python process and
its CPU is read over the same window; a run shorter than the delay is reported, not sampled."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadtests.bench.sweep_profile import RunProfile, serving_pids

BUSY = "import time\nt = time.time()\nwhile time.time() - t < 30:\n    sum(range(1000))\n"


@pytest.fixture
def busy() -> Iterator[subprocess.Popen[bytes]]:
    """A Python process spinning on one core (the stand-in for a server's busy scheduler)."""
    proc = subprocess.Popen([sys.executable, "-c", BUSY])
    yield proc
    proc.kill()
    proc.wait()


def test_a_run_profile_samples_every_process_and_reads_its_cpu(
    busy: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    pids = {"scheduler": busy.pid, "client": os.getpid()}
    with RunProfile(pids, tmp_path, "off-c256-r0", delay_s=0.2, seconds=2.0) as run:
        time.sleep(0.5)  # the client run ends while sampling goes on: exit waits for it
    by_name = {p.name: p for p in run.result}
    assert set(by_name) == {"scheduler", "client"}
    spinning = by_name["scheduler"]
    assert spinning.error == "" and spinning.samples > 20, spinning
    assert spinning.cpu_cores > 0.3, spinning  # one core, shared with this test's other work
    assert "<module>" in spinning.self_top[0][0]
    assert (tmp_path / "profiles" / "off-c256-r0" / "scheduler.txt").exists()
    text = (tmp_path / "profiles.md").read_text()
    assert text.startswith("### off-c256-r0: 2 s from 0 s into the run")
    assert "| scheduler |" in text and "| client |" in text


def test_a_run_that_ends_before_the_delay_is_not_sampled_and_says_so(tmp_path: Path) -> None:
    started = time.monotonic()
    with RunProfile({"client": os.getpid()}, tmp_path, "on-c1-r0", delay_s=30.0, seconds=10.0) as run:
        pass
    assert time.monotonic() - started < 5.0  # leaving the run stops the wait at once
    assert run.result == []
    assert "not sampled: the run ended within 30 s" in (tmp_path / "profiles.md").read_text()
    assert not (tmp_path / "profiles").exists()


def test_a_raw_servers_processes_are_its_own_and_the_client(busy: subprocess.Popen[bytes]) -> None:
    assert serving_pids(busy.pid) == {"http+tokenizer": busy.pid, "client": os.getpid()}
