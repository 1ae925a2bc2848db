"""`python -m loadtests.calibrate` end to end on CPU: real Locust against the null server, the report
and the ceilings the sweep and raw-vs-app read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadtests.calibrate.run import CalibrationRow, ceilings, load_ceiling, main
from loadtests.sweep.launcher import free_port

pytestmark = pytest.mark.slow


def test_calibration_writes_rows_ceilings_and_a_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cal"
    argv = ["--out", str(out), "--processes", "1", "--concurrency", "4,16", "--duration", "3", "--warmup", "1",
            "--server-processes", "1", "--output-len", "64", "--port", str(free_port())]  # fmt: skip
    assert main(argv) == 0
    data = json.loads((out / "calibration.json").read_text())
    rows = data["rows"]
    assert [(r["client"], r["processes"], r["concurrency"]) for r in rows] == [
        ("locust", 1, 4),
        ("locust", 1, 16),
    ]
    for r in rows:
        assert r["chunks_s"] > 0 and r["offered_chunks_s"] == r["concurrency"] * 1000.0
        assert r["limit"] in ("client", "server", "offered")
        assert r["client_cores"] > 0
    ceiling = load_ceiling(out / "calibration.json", "locust", 1)
    # the best client-limited row, else the best row as a lower bound (which rows the client limited
    # depends on the host's load): always one of the measured rows
    assert ceiling is not None and ceiling.chunks_s in {r["chunks_s"] for r in rows}
    limited = [r["chunks_s"] for r in rows if r["limit"] == "client"]
    assert ceiling.chunks_s == max(limited or [r["chunks_s"] for r in rows])
    assert load_ceiling(out / "calibration.json", "locust", 8) is None
    md = (out / "calibration.md").read_text()
    assert "| locust | 1 | 16 |" in md and "ceiling chunks/s" in md
    assert "Load-generator calibration" in capsys.readouterr().out


def test_a_ceiling_is_the_best_client_limited_row_else_a_lower_bound() -> None:
    def row(c: int, chunks: float, limit: str) -> CalibrationRow:
        return CalibrationRow("locust", 1, c, c * 1000.0, chunks, chunks, 1.0, 0.1, limit)

    got = ceilings([row(4, 3900, "offered"), row(64, 20000, "client"), row(256, 18000, "client")])
    assert [(c.chunks_s, c.exact) for c in got] == [(20000, True)]
    got = ceilings([row(4, 3900, "offered"), row(8, 7800, "offered")])
    assert [(c.chunks_s, c.exact) for c in got] == [(7800, False)]


def test_bad_arguments_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--clients", "wrk"]) == 2
    assert main(["--clients", "sglang"]) == 2  # needs --tokenizer
    err = capsys.readouterr().err
    assert "unknown client" in err and "--tokenizer" in err
