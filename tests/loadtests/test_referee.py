"""The engine-count referee's log reading: SGLang's decode-batch lines as its scheduler writes them."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from loadtests.referee import LogReferee, decode_lines

LINES = """\
[2026-12-01 10:00:01 TP0] Prefill batch, #new-seq: 4, #new-token: 512, #cached-token: 0
[2026-12-01 10:00:02 TP0] Decode batch, #running-req: 128, #token: 20480, token usage: 0.05, cuda graph: True, gen throughput (token/s): 11000.00, #queue-req: 0
[2026-12-01 10:00:03] Decode batch, #running-req: 128, #token: 20992, token usage: 0.05, accept len: 2.90, accept rate: 0.63, cuda graph: True, gen throughput (token/s): 12000.50, #queue-req: 3
[2026-12-01 10:00:09 TP0] Decode batch, #running-req: 2, #token: 300, token usage: 0.00, cuda graph: True, gen throughput (token/s): 400.00, #queue-req: 0
"""


def _t(hms: str) -> float:
    return datetime.strptime(f"2026-12-01 {hms}", "%Y-%m-%d %H:%M:%S").timestamp()


def test_decode_lines_are_read_with_their_local_time_stamps() -> None:
    assert decode_lines(LINES) == [
        (_t("10:00:02"), 11000.0),
        (_t("10:00:03"), 12000.5),
        (_t("10:00:09"), 400.0),
    ]


@pytest.mark.parametrize(
    ("start", "end", "rate"),
    [
        ("10:00:02", "10:00:04", 11500.25),  # both lines inside: their mean
        ("10:00:02", "10:00:03", 11000.0),  # the window ends before the second stamp
        ("10:00:04", "10:00:06", 400.0),  # no line inside: the next one after it (covers its end)
        ("10:00:10", "10:00:12", None),  # nothing inside or after
    ],
)
def test_rate_over_a_window(tmp_path: Path, start: str, end: str, rate: float | None) -> None:
    log = tmp_path / "raw.log"
    log.write_text(LINES)
    got = LogReferee(log).rate(_t(start) + 0.4, _t(end) + 0.4)
    assert got == (None if rate is None else pytest.approx(rate))
