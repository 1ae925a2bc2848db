"""What `specflip serve` prints, start to Ctrl-C, on the real app (1 CPU replica of the tiny pair):
its own progress lines, and none of Ray's option dump (a 20-line dict per deployment) nor the
yellow "ServeController.graceful_shutdown failed ... killed by ray.kill" that Serve's own
shutdown made Ray print at every clean stop. Ctrl-C as a terminal sends it: SIGINT to
the whole process group."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.deployments.conftest import free_port
from tests.reporting import report

pytestmark = pytest.mark.serve
ROOT = Path(__file__).resolve().parents[2]
NOT_SHOWN = ("Deployment Options", "'graceful_shutdown_timeout_s'", "graceful_shutdown failed", "Traceback")


def test_specflip_serve_prints_its_progress_and_none_of_rays_noise(model_pair: Any, tmp_path: Path) -> None:
    config = tmp_path / "serve.yaml"
    config.write_text(
        (ROOT / "deployments/examples/cpu-tiny-1replica.yaml")
        .read_text()
        .replace("../../models/tiny", os.path.dirname(model_pair.target))
    )
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # its own local Ray
    env["PYTHONPATH"] = str(ROOT)
    command = [
        sys.executable,
        "-m",
        "deployments",
        "serve",
        "--config",
        str(config),
        "--port",
        str(free_port()),
    ]
    proc = subprocess.Popen(
        command,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # a process group of its own, as a terminal's foreground job
    )
    lines: list[str] = []
    up = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            if line.startswith("specflip: serving"):
                up.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert up.wait(420), "\n".join(lines[-30:])
        time.sleep(1.0)
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C
        try:
            code: int | None = proc.wait(180)
        except subprocess.TimeoutExpired:
            code = None  # still running 3 minutes after Ctrl-C: what it printed says where it stopped
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    reader.join(10)
    console = "\n".join(lines)
    print(console)  # shown with -s, and with a failure
    report(f"specflip serve console, start to Ctrl-C: {len(lines)} lines, exit {code}")
    assert code is not None, "no exit within 180 s of Ctrl-C; its console:\n" + console[-3000:]
    assert code == 0, console[-3000:]
    assert "specflip: shutting down" in console, console[-3000:]
    assert not [s for s in NOT_SHOWN if s in console], console[-3000:]
