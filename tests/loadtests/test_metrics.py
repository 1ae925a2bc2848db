"""Metric math on hand-computed cases: TTFT, TPOT, ITL, token counts, percentiles, goodput."""

from __future__ import annotations

import pytest

from loadtests.locust.records import RequestRecord, StreamAccumulator
from loadtests.locust.sse import StreamChunk
from loadtests.metrics import (
    CANCELLED,
    Slo,
    meets_slo,
    percentile,
    summarize,
    throughput_timeline,
    window_tokens,
)

TOK = StreamChunk(is_token=True)


def run(
    times: list[float],
    *,
    usage: int | None = None,
    finish: str | None = "length",
    max_tokens: int = 8,
    status: int = 200,
    done: bool = True,
) -> RequestRecord:
    acc = StreamAccumulator(start=100.0, max_tokens=max_tokens)
    for t in times:
        acc.add(TOK, t)
    if finish:
        acc.add(StreamChunk(finish_reason=finish), times[-1] if times else 100.0)
    if usage is not None:
        acc.add(StreamChunk(completion_tokens=usage, prompt_tokens=33), 101.2)
    if done:
        acc.add(StreamChunk(done=True), 101.3)
    return acc.finish(101.3, status)


CHUNKS = [100.5, 100.6, 100.8, 101.1]


@pytest.mark.parametrize(
    ("kwargs", "tokens", "source", "tpot"),
    [
        ({"usage": 4}, 4, "usage", 0.6 / 3),  # one token per chunk
        ({"usage": 10}, 10, "usage", 0.6 / 9),  # speculation: several tokens per chunk
        ({"finish": "length", "max_tokens": 8}, 8, "length", 0.6 / 7),  # no usage, stopped at max_tokens
        ({"finish": "stop"}, 4, "chunks", 0.6 / 3),  # no usage, EOS: chunk count
    ],
)
def test_ttft_itl_tpot_and_token_source(kwargs: dict, tokens: int, source: str, tpot: float) -> None:
    r = run(CHUNKS, **kwargs)
    assert r.ok and r.error == ""
    assert r.ttft == pytest.approx(0.5)
    assert r.itl == pytest.approx((0.1, 0.2, 0.3))
    assert r.output_tokens == tokens and r.token_source == source
    assert r.tpot == pytest.approx(tpot)
    assert r.e2e == pytest.approx(1.3)
    assert r.chunks == 4
    assert r.token_times() == pytest.approx(CHUNKS)


def test_single_token_has_no_tpot_and_no_itl() -> None:
    r = run([100.25], usage=1)
    assert r.ok and r.ttft == pytest.approx(0.25) and r.tpot is None and r.itl == ()


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"status": 500}, ""),  # HTTP error: not ok (message comes from the caller)
        ({"finish": None, "done": False}, "stream ended without [DONE] or finish_reason"),
    ],
)
def test_failures(kwargs: dict, error: str) -> None:
    r = run(CHUNKS, **kwargs)
    assert not r.ok
    assert r.error == error


def test_success_without_any_token_is_an_error() -> None:
    r = run([], usage=0)
    assert not r.ok and r.error == "no token in a successful stream"


def test_record_json_round_trip() -> None:
    r = run(CHUNKS, usage=4)
    back = RequestRecord.from_json(r.to_json())
    assert back.output_tokens == 4 and back.prompt_tokens == 33 and back.itl == pytest.approx(r.itl)
    assert back.ttft == pytest.approx(r.ttft)


@pytest.mark.parametrize(
    ("values", "p", "expected"),
    [
        ([1, 2, 3, 4], 50, 2.5),
        ([1, 2, 3, 4], 99, 3.97),  # rank 2.97 -> 3 + 0.97
        ([1, 2, 3, 4], 0, 1),
        ([1, 2, 3, 4], 100, 4),
        ([4, 1, 3, 2], 90, 3.7),  # unsorted input
        ([7], 99, 7),
        ([], 50, None),
    ],
)
def test_percentile_table(values: list[float], p: float, expected: float | None) -> None:
    assert percentile(values, p) == (None if expected is None else pytest.approx(expected))


def rec(
    start: float,
    end: float,
    *,
    ok: bool = True,
    tokens: int = 10,
    ttft: float | None = 0.1,
    tpot: float | None = 0.02,
    error: str = "",
) -> RequestRecord:
    return RequestRecord(
        start=start,
        end=end,
        ok=ok,
        status=200 if ok else 500,
        output_tokens=tokens,
        ttft=ttft,
        tpot=tpot,
        itl=(0.01, 0.03) if ok else (),
        token_source="usage",
        error=error,
    )


WINDOW = [
    rec(0, 2, tokens=10, ttft=0.1, tpot=0.02),
    rec(1, 5, tokens=20, ttft=0.5, tpot=0.05),
    rec(3, 9, tokens=30, ttft=3.0, tpot=0.01),  # misses the TTFT SLO (2 s)
    rec(4, 6, ok=False, tokens=0, ttft=None, tpot=None, error="HTTP 500"),
    rec(8, 12, tokens=99),  # completes after the window: not counted
    rec(5, 7, ok=False, tokens=5, error=CANCELLED),  # cancelled: not counted
    rec(2, 8, tokens=40, ttft=0.2, tpot=0.2),  # misses the TPOT SLO (100 ms)
]


def test_summary_of_a_window_by_hand() -> None:
    s = summarize(WINDOW, 0.0, 10.0, Slo(ttft_ms=2000, tpot_ms=100))
    assert (s.requests, s.ok, s.errors) == (5, 4, 1)
    assert s.duration_s == 10.0
    # tokens by arrival: the four ok ones (100), the one still running at the window's end (its
    # chunks arrived at 8.1-8.14 s: 99) and the cancelled one (5 tokens before it stopped)
    assert s.output_tokens == 204 and s.output_tok_s == pytest.approx(20.4)
    assert s.req_s == pytest.approx(0.4)
    assert s.goodput_req_s == pytest.approx(0.2)  # only the first two meet both SLOs
    assert s.ttft_p50_ms == pytest.approx(350.0)  # median of 0.1, 0.2, 0.5, 3.0 s
    assert s.tpot_p50_ms == pytest.approx(35.0)  # median of 10, 20, 50, 200 ms
    # ITL: four ok requests x (10 ms, 30 ms): median between them, p99 at the top
    assert s.itl_p50_ms == pytest.approx(20.0) and s.itl_p99_ms == pytest.approx(30.0)
    assert s.e2e_p50_ms == pytest.approx(5000.0)  # e2e 2, 4, 6, 6 s
    assert s.chunk_counted == 0


@pytest.mark.parametrize(
    ("slo", "goodput"),
    [
        (Slo(ttft_ms=None, tpot_ms=None), 0.4),
        (Slo(ttft_ms=2000, tpot_ms=None), 0.3),
        (Slo(ttft_ms=None, tpot_ms=100), 0.3),
        (Slo(ttft_ms=150, tpot_ms=30), 0.1),
    ],
)
def test_goodput_by_slo(slo: Slo, goodput: float) -> None:
    assert summarize(WINDOW, 0.0, 10.0, slo).goodput_req_s == pytest.approx(goodput)


def test_single_token_request_meets_any_tpot_slo() -> None:
    assert meets_slo(rec(0, 1, tpot=None), Slo(ttft_ms=1000, tpot_ms=1))
    assert not meets_slo(rec(0, 1, ok=False), Slo(ttft_ms=None, tpot_ms=None))


def test_empty_window_is_rejected() -> None:
    with pytest.raises(ValueError):
        summarize(WINDOW, 5.0, 5.0, Slo())


def _chunks(
    start: float, first: float, gaps: tuple[float, ...], tokens: int, error: str = ""
) -> RequestRecord:
    """A streamed request: its first chunk `first` s after `start`, then one per gap."""
    end = start + first + sum(gaps)
    ok = not error
    return RequestRecord(start, end, ok, 200, tokens, ttft=first, itl=gaps, error=error)


@pytest.mark.parametrize(
    ("record", "window", "tokens"),
    [
        # 4 chunks at 1, 2, 3, 4 s carrying 8 tokens: 2 tokens per chunk wherever the window cuts
        (_chunks(0.0, 1.0, (1.0, 1.0, 1.0), 8), (0.0, 10.0), 8.0),
        (_chunks(0.0, 1.0, (1.0, 1.0, 1.0), 8), (2.5, 10.0), 4.0),  # started before the window
        (_chunks(0.0, 1.0, (1.0, 1.0, 1.0), 8), (0.0, 2.5), 4.0),  # still running at its end
        (_chunks(0.0, 1.0, (1.0, 1.0, 1.0), 8), (1.5, 3.5), 4.0),  # both
        (_chunks(0.0, 1.0, (1.0, 1.0, 1.0), 8), (4.5, 9.0), 0.0),  # over before it
        # not streamed (no chunk times): all tokens at the end, if the end is inside
        (RequestRecord(start=0.0, end=3.0, ok=True, status=200, output_tokens=8), (2.0, 4.0), 8.0),
        (RequestRecord(start=0.0, end=3.0, ok=True, status=200, output_tokens=8), (0.0, 3.0), 0.0),
        # failed: its tokens do not count; cancelled: what it delivered does
        (_chunks(0.0, 1.0, (1.0,), 4, error="HTTP 500"), (0.0, 9.0), 0.0),
        (_chunks(0.0, 1.0, (1.0,), 4, error=CANCELLED), (0.0, 9.0), 4.0),
    ],
)
def test_window_counts_tokens_by_arrival(
    record: RequestRecord, window: tuple[float, float], tokens: float
) -> None:
    assert window_tokens([record], *window) == pytest.approx(tokens)


def test_waves_do_not_quantize_the_token_rate() -> None:
    """Users in lockstep: 4 waves of 10 requests, each 2 s long with a token every 0.1 s. A window
    of 3 s cut mid-wave counts 1.5 waves of tokens by arrival; by completion it counts whole
    waves (1 or 2 depending on where it starts)."""
    waves = [_chunks(2.0 * w, 0.1, (0.1,) * 19, 20) for w in range(4) for _ in range(10)]
    for start in (0.5, 1.0, 1.7, 2.9):
        s = summarize(waves, start, start + 3.0, Slo(None, None))
        assert s.output_tok_s == pytest.approx(100.0, rel=0.04)  # 10 users x 1 token per 0.1 s


def test_throughput_timeline_spreads_tokens_over_chunks() -> None:
    r = RequestRecord(start=0.0, end=3.0, ok=True, status=200, output_tokens=6, ttft=0.5, itl=(1.0, 1.0))
    cancelled = RequestRecord(
        start=0.0, end=1.0, ok=False, status=200, output_tokens=1, ttft=0.2, error=CANCELLED
    )
    failed = RequestRecord(start=0.0, end=1.0, ok=False, status=200, output_tokens=5, ttft=0.2, error="boom")
    assert throughput_timeline([r, cancelled, failed], 0.0, 4.0) == pytest.approx([3.0, 2.0, 2.0, 0.0])
    assert throughput_timeline([r], 0.0, 4.0, bin_s=2.0) == pytest.approx([2.0, 1.0])
