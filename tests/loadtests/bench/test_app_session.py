"""`loadtests.bench.app_session.keep_logs`: the replica's engine log comes back with the results."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadtests.bench.app_session import keep_logs


def test_keep_logs_copies_each_worker_log_and_names_one_it_cannot_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ray_logs = tmp_path / "ray"
    ray_logs.mkdir()
    err = ray_logs / "worker-ab-123.err"
    out = ray_logs / "worker-ab-123.out"
    err.write_text(
        "[2026-12-04 19:30:01] Decode batch, #running-req: 126, gen throughput (token/s): 5400.1\n"
    )
    out.write_text("specflip replica up\n")
    gone = ray_logs / "worker-cd-456.err"  # rotated away before the sweep ended

    kept = keep_logs([err, out, gone], tmp_path / "sweep" / "app", "replica")

    assert [p.name for p in kept] == ["replica-0.err", "replica-1.out"]
    assert [p.read_text() for p in kept] == [err.read_text(), out.read_text()]
    assert f"log {gone} not kept" in capsys.readouterr().out
