"""The report `specflip demo` prints: one row per phase and per replica, columns aligned however
many mode changes a replica had (the README run showed a flapping replica pushing them out)."""

from __future__ import annotations

from loadtests.demo.drive import DemoReport, ModeChange, PhaseResult, format_report
from loadtests.sim.trace import Phase


def test_replica_rows_stay_aligned_with_long_change_lists() -> None:
    phases = [
        PhaseResult(Phase("low", 20, users=1), requests=35, tokens=1640, latencies=[0.5, 0.7], elapsed_s=20)
    ]
    changes = [ModeChange(22, "high", "aaaa", "off"), ModeChange(58, "low again", "aaaa", "on")]
    changes += [
        ModeChange(t, "high", "bbbb", m) for t, m in ((22, "off"), (41, "on"), (43, "off"), (44, "on"))
    ]
    final = {
        "aaaa": {"flips": 2, "accept_length": 3.23, "mode": "on"},
        "bbbb": {"flips": 4, "accept_length": 3.54, "mode": "on"},
        "cccc": {"flips": 0, "accept_length": None, "mode": "off"},
    }
    text = format_report(DemoReport(phases, changes, final))
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("replica"))
    rows = lines[header + 1 :]
    assert [r.split()[0] for r in rows] == ["aaaa", "bbbb", "cccc"]
    assert "OFF@22s(high) ON@41s(high) OFF@43s(high) ON@44s(high)" in rows[1]
    assert rows[2].split()[2] == "none" and rows[2].split()[3] == "-"
    mode_col = lines[header].index("mode now")
    assert all(r[mode_col:] in ("on", "off") for r in rows)  # the last column starts at its header
    accept_end = lines[header].index("accept length") + len("accept length")
    assert [r[accept_end - 4 : accept_end] for r in rows] == ["3.23", "3.54", "   -"]
    assert "low" in text and "82.0" in text  # 1640 tokens in 20 s
