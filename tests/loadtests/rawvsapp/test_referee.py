"""The engine-count referee's log reading: SGLang's decode-batch lines as its scheduler writes them."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from loadtests.rawvsapp.referee import (
    LogReferee,
    decode_at,
    decode_lines,
    main,
    prefill_batches,
    prefill_lines,
    queue_lines,
    replica_log_paths,
)

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


def test_decode_at_reads_a_batch_size_s_lines_with_their_accept_length(tmp_path: Path, capsys) -> None:
    """Two engines compared at one batch: the lines at exactly that many running requests, the mean
    accept length of those that log one (a plain engine's lines have none) and the median rate."""
    extra = (
        "[2026-12-01 10:00:05] Decode batch, #running-req: 128, #token: 1, accept len: 2.10, "
        "gen throughput (token/s): 9000.00, #queue-req: 0\n"
        "[2026-12-01 10:00:06] Decode batch, #running-req: 16, #token: 1, accept len: 3.00, "
        "gen throughput (token/s): 500.00, #queue-req: 0\n"
    )
    assert decode_at(LINES + extra, 128) == (4, pytest.approx(2.5), 10000.0)
    assert decode_at(LINES + extra, 16) == (1, 3.0, 500.0)
    assert decode_at(LINES, 64) == (0, None, None)
    assert decode_at(LINES.replace("accept len: 2.90, ", ""), 128) == (3, None, 11000.0)
    # a window (epoch seconds, stamps of 1-s resolution) keeps the lines stamped inside it
    assert decode_at(LINES + extra, 128, (_t("10:00:02") + 0.5, _t("10:00:03"))) == (2, 2.9, 11500.25)
    log = tmp_path / "engine.log"
    log.write_text(LINES + extra)
    assert main(["--running", "128", str(log)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"{log} | 4 | 2.500 | 10,000 | 1 | 4.00"


def test_a_band_of_batches_reads_the_lines_from_at_least_to_running(tmp_path: Path, capsys) -> None:
    """A closed loop at c=256 seldom logs exactly 256 running: --at-least takes a band below it."""
    band = "".join(
        f"[2026-12-01 10:00:0{i}] Decode batch, #running-req: {n}, #token: 1, "
        f"gen throughput (token/s): {rate:.2f}, #queue-req: 0\n"
        for i, (n, rate) in enumerate(((255, 16000), (241, 15000), (230, 14000), (223, 9000), (256, 17000)))
    )
    assert decode_at(band, 256) == (1, None, 17000.0)
    assert decode_at(band, 256, at_least=224) == (4, None, 15500.0)  # 223 running is outside
    log = tmp_path / "plain.log"
    log.write_text(band)
    assert main(["--running", "256", "--at-least", "224", str(log)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"{log} | 4 | - | 15,500 | 0 | -"
    with pytest.raises(SystemExit):
        main(["--running", "16", "--at-least", "32", str(log)])


def test_prefill_batches_say_whether_a_wave_arrived_together(tmp_path: Path, capsys) -> None:
    """The same 8 requests as one prefill batch (arrived together) or as three (trickled in)."""
    together = "[2026-12-01 10:00:01] Prefill batch, #new-seq: 8, #new-token: 512, #cached-token: 0\n"
    trickled = "".join(
        f"[2026-12-01 10:00:0{s}] Prefill batch, #new-seq: {n}, #new-token: {64 * n}, #cached-token: 0\n"
        for s, n in ((1, 1), (1, 5), (2, 2))
    )
    assert prefill_batches(together) == (1, 8)
    assert prefill_batches(trickled) == (3, 8)
    assert prefill_batches(trickled, (_t("10:00:02"), _t("10:00:05"))) == (1, 2)
    log = tmp_path / "trickled.log"
    log.write_text(trickled)
    assert main(["--running", "16", "--window", f"{_t('10:00:00')},{_t('10:00:09')}", str(log)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"{log} | 0 | - | - | 3 | 2.67"
    with pytest.raises(SystemExit):
        main(["--running", "16", "--window", "soon", str(log)])


def test_a_sweep_s_runs_are_each_read_in_their_own_window(tmp_path: Path, capsys) -> None:
    """--sweep: one row per run at the given concurrency, from its variant's log, inside the run's
    `started` .. `started + duration_s`; runs at another concurrency or of a variant without a log
    are left out."""
    app = tmp_path / "app.log"
    app.write_text(
        "[2026-12-01 10:00:01] Prefill batch, #new-seq: 8, #new-token: 512, #cached-token: 0\n"
        "[2026-12-01 10:00:02] Decode batch, #running-req: 16, #token: 1, accept len: 2.00, "
        "gen throughput (token/s): 100.00, #queue-req: 0\n"
        "[2026-12-01 10:00:11] Prefill batch, #new-seq: 2, #new-token: 128, #cached-token: 0\n"
        "[2026-12-01 10:00:11] Prefill batch, #new-seq: 6, #new-token: 384, #cached-token: 0\n"
        "[2026-12-01 10:00:12] Decode batch, #running-req: 16, #token: 1, accept len: 3.00, "
        "gen throughput (token/s): 300.00, #queue-req: 0\n"
    )
    sweep = tmp_path / "sweep.csv"
    rows = [
        ("on", 16, 0, _t("10:00:00"), 5.0),
        ("on", 16, 1, _t("10:00:10"), 5.0),
        ("on", 64, 0, _t("10:00:00"), 20.0),
        ("off", 16, 0, _t("10:00:00"), 20.0),
    ]
    sweep.write_text(
        "variant,concurrency,repeat,duration_s,started\n"
        + "".join(f"{v},{c},{k},{d},{t}\n" for v, c, k, t, d in rows)
    )
    assert main(["--running", "16", "--sweep", str(sweep), f"on={app}"]) == 0
    assert capsys.readouterr().out.splitlines()[1:] == [
        "on | 0 | 1 | 2.000 | 100 | 1 | 8.00",
        "on | 1 | 1 | 3.000 | 300 | 2 | 4.00",
    ]
    with pytest.raises(SystemExit):
        main(["--running", "16", "--sweep", str(sweep), str(app)])  # not VARIANT=LOG
    with pytest.raises(SystemExit):
        main(["--running", "16", "--sweep", str(sweep), "--window", "1,2", f"on={app}"])


def test_a_slow_line_weighs_by_the_time_it_took() -> None:
    """40 steps at 100 tok/s (prefills in between) and 40 at 10,000: 2 x 40 x n tokens in 0.4 n + 0.004 n
    seconds, ~198 tok/s; the mean of the two rates (5,050) would be 25x too high."""
    log = (
        "[2026-12-01 10:00:02] Decode batch, #running-req: 8, #token: 1, gen throughput (token/s): 100.00, #q\n"
        "[2026-12-01 10:00:03] Decode batch, #running-req: 8, #token: 1, gen throughput (token/s): 10000.00, #q\n"
    )
    from loadtests.rawvsapp.referee import _tokens_over_time

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


# A client run that starts after the server idled (as SGLang's client's runs did on the H200): the
# warm-up request's line at 10:00:00, then 5 s idle, then the run from 10:00:05 to 10:00:08. The
# first line of the run reports its 40 steps over the time since the warm-up line, idle included.
AFTER_IDLE = """\
[2026-12-01 10:00:00] Decode batch, #running-req: 1, #token: 90, cuda graph: True, gen throughput (token/s): 80.00, #q
[2026-12-01 10:00:05] Prefill batch, #new-seq: 64, #new-token: 8192, #cached-token: 0, token usage: 0.01
[2026-12-01 10:00:05] Prefill batch, #new-seq: 64, #new-token: 4096, #cached-token: 4096, token usage: 0.01
[2026-12-01 10:00:06] Decode batch, #running-req: 128, #token: 9, cuda graph: True, gen throughput (token/s): 900.00, #q
[2026-12-01 10:00:07] Decode batch, #running-req: 128, #token: 9, cuda graph: True, gen throughput (token/s): 10240.00, #q
[2026-12-01 10:00:08] Decode batch, #running-req: 128, #token: 9, cuda graph: True, gen throughput (token/s): 10240.00, #q
"""


def test_a_run_after_idle_is_refereed_by_its_tokens_over_the_clients_duration(tmp_path: Path) -> None:
    log = tmp_path / "raw.log"
    log.write_text(AFTER_IDLE)
    referee = LogReferee(log)
    start, end = _t("10:00:04") + 0.5, _t("10:00:08") + 0.9  # the client's launch .. exit
    tokens = referee.tokens(start, end)
    assert tokens == 40 * 128 * 3  # three lines of 40 steps of 128 requests; the warm-up is before it
    duration = 3.0  # what the client measured, first request to last end
    # the lines' own time base (those stamped before the end's whole second): the first one holds the
    # idle gap (40 x 128 / 900 = 5.7 s), so the rate reads 1.7k tok/s where the run made 5.1k
    assert referee.rate(start, end) == pytest.approx(2 / (1 / 900 + 1 / 10240))
    assert tokens / duration == pytest.approx(5120.0)
    assert referee.rate(start, end) < 0.5 * tokens / duration


def test_a_speculative_engine_s_tokens_count_its_accept_length(tmp_path: Path) -> None:
    """An EAGLE-3 line's 40 steps are verify steps that each give `accept len` tokens per request
    (bonus included): the count is 40 x n x accept, not 40 x n (which read 908 tok/s for a server
    whose client counted 2,200)."""
    log = tmp_path / "eagle.log"
    log.write_text(LINES)
    referee = LogReferee(log)
    assert referee.tokens(_t("10:00:03"), _t("10:00:03")) == round(40 * 128 * 2.90)
    assert referee.tokens(_t("10:00:02"), _t("10:00:03")) == 40 * 128 + round(40 * 128 * 2.90)


def test_prompt_tokens_per_request_read_from_the_prefill_lines(tmp_path: Path) -> None:
    assert prefill_lines(AFTER_IDLE) == [(_t("10:00:05"), 64, 8192), (_t("10:00:05"), 64, 8192)]
    log = tmp_path / "raw.log"
    log.write_text(AFTER_IDLE)
    referee = LogReferee(log)
    assert referee.prompt_tokens(_t("10:00:04"), _t("10:00:09")) == pytest.approx(128.0)  # new + cached
    assert referee.prompt_tokens(_t("10:00:06"), _t("10:00:09")) is None  # no prefill line there
    assert referee.tokens(_t("10:00:09"), _t("10:00:10")) is None


def test_running_is_the_mean_batch_of_the_lines_in_a_window(tmp_path: Path) -> None:
    log = tmp_path / "raw.log"
    log.write_text(AFTER_IDLE)
    referee = LogReferee(log)
    assert referee.running(_t("10:00:00"), _t("10:00:08")) == pytest.approx((1 + 3 * 128) / 4)
    assert referee.running(_t("10:00:06"), _t("10:00:08")) == pytest.approx(128.0)
    # none inside: the next line after the window
    assert referee.running(_t("10:00:02"), _t("10:00:04")) == pytest.approx(128.0)
    assert referee.running(_t("10:00:09"), _t("10:00:10")) is None


def test_queue_and_several_log_files(tmp_path: Path) -> None:
    """An app replica's engine logs into two Ray worker files (.out, .err): read as one."""
    (tmp_path / "a.out").write_text(LINES)
    (tmp_path / "a.err").write_text(AFTER_IDLE)
    referee = LogReferee([tmp_path / "a.out", tmp_path / "a.err"])
    assert queue_lines(LINES) == [(_t("10:00:02"), 0), (_t("10:00:03"), 3), (_t("10:00:09"), 0)]
    assert referee.queued(_t("10:00:02"), _t("10:00:03")) == pytest.approx(1.5)
    assert referee.running(_t("10:00:06"), _t("10:00:09")) == pytest.approx(128.0)
    assert LogReferee([tmp_path / "missing.err"]).queued(_t("10:00:02"), _t("10:00:03")) is None


def test_replica_log_paths_are_the_workers_out_and_err(tmp_path: Path) -> None:
    for name in (
        "worker-ab-01000000-4242.out",
        "worker-ab-01000000-4242.err",
        "worker-cd-01000000-14242.err",
    ):
        (tmp_path / name).write_text("")
    (tmp_path / "python-core-worker-ab_4242.log").write_text("")
    got = [p.name for p in replica_log_paths(4242, tmp_path)]
    assert got == ["worker-ab-01000000-4242.err", "worker-ab-01000000-4242.out"]
    assert replica_log_paths(None, tmp_path) == [] and replica_log_paths(4242, tmp_path / "none") == []
