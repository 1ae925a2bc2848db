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
[2026-12-01 10:00:09 TP0] Decode batch, #running-req: 128, #token: 300, token usage: 0.00, cuda graph: True, gen throughput (token/s): 400.00, #queue-req: 0
"""


def _t(hms: str) -> float:
    return datetime.strptime(f"2026-12-01 {hms}", "%Y-%m-%d %H:%M:%S").timestamp()


def test_decode_lines_are_read_with_their_local_time_stamps() -> None:
    assert decode_lines(LINES) == [
        (_t("10:00:02"), 128, 11000.0),
        (_t("10:00:03"), 128, 12000.5),
        (_t("10:00:09"), 128, 400.0),
    ]


def test_a_slow_line_weighs_by_the_time_it_took() -> None:
    """40 steps at 100 tok/s (prefills in between) and 40 at 10,000: 2 x 40 x n tokens in 0.4 n + 0.004 n
    seconds, ~198 tok/s; the mean of the two rates (5,050) would be 25x too high."""
    log = (
        "[2026-12-01 10:00:02] Decode batch, #running-req: 8, #token: 1, gen throughput (token/s): 100.00, #q\n"
        "[2026-12-01 10:00:03] Decode batch, #running-req: 8, #token: 1, gen throughput (token/s): 10000.00, #q\n"
    )
    from loadtests.referee import _tokens_over_time

    lines = [(n, r) for _, n, r in decode_lines(log)]
    assert _tokens_over_time(lines) == pytest.approx(2 / (1 / 100 + 1 / 10000))


@pytest.mark.parametrize(
    ("start", "end", "rate"),
    [
        # both lines inside: 2 x 40 x 128 tokens over the time they took (not their mean rate)
        ("10:00:02", "10:00:04", 2 / (1 / 11000.0 + 1 / 12000.5)),
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
