"""loadtests.bench.engine_arrivals end to end on CPU, as it runs on the GPU host: SGLang's plain engine,
its own EAGLE-3 engine (unpatched) and the specflip engine (ON, OFF warm_kv, OFF warm_kv with upstream's draft prefill, OFF cold) built from a specflip config, closed-loop users
sending the same requests to each. Asserts the accounting and the correctness contract (every
output token-identical to the plain engine's in fp32), not speed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from loadtests.bench.engine_arrivals import REPEAT_KEYS, TTFT_PARTS, WARMUP_TOKENS, _repeated
from loadtests.bench.inprocess import Stream, make_requests

pytestmark = [pytest.mark.engine, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[3]


def test_requests_are_the_same_for_every_engine_and_span_the_output_range() -> None:
    a = make_requests(4, 3, input_len=16, output_len=20, spread=0.5, vocab=1000)
    assert a == make_requests(4, 3, input_len=16, output_len=20, spread=0.5, vocab=1000)
    assert len(a) == 12 and all(len(ids) == 16 and min(ids) >= 10 and max(ids) < 1000 for ids, _ in a)
    assert all(10 <= n <= 30 for _, n in a) and len({n for _, n in a}) > 1
    assert make_requests(8, 3, 16, 20, 0.5, 1000) != a  # another level, other requests


def test_ttft_parts_split_a_first_token_at_sglangs_stage_times() -> None:
    s = Stream(
        sent=100.0, stages=(1000.0, 1000.002, 1000.010, 1000.011)
    )  # wall clock: sent, forward, prefilled, first
    assert s.ttft_parts_s == pytest.approx((0.002, 0.008, 0.001))
    assert Stream(sent=100.0).ttft_parts_s is None  # an engine without metrics reports no stage times


def test_a_levels_record_is_its_median_run_with_every_run_kept() -> None:
    def run(steady: float | None, tok_s: float, outputs: list[list[int]]) -> dict:
        return {
            "steady_tok_s": steady,
            "tok_s": tok_s,
            "seconds": 1.0,
            "ttft_p50_ms": tok_s / 10,
            "outputs": outputs,
        }

    runs = [run(900.0, 800.0, [[1]]), run(700.0, 950.0, [[2]]), run(800.0, 600.0, [[3]])]
    r = _repeated(runs)
    assert r["steady_tok_s"] == 800.0 and r["tok_s"] == 600.0  # the median by steady tok/s, whole
    assert [x["steady_tok_s"] for x in r["repeats"]] == [900.0, 700.0, 800.0]  # in run order
    assert all(set(x) == set(REPEAT_KEYS) for x in r["repeats"])
    assert r["outputs"] == [[[1]], [[2]], [[3]]]  # every run's, for the comparison with plain
    assert _repeated([runs[0], runs[1]])["steady_tok_s"] == 700.0  # of two, the lower
    # a run without a steady window ranks by its whole run
    assert _repeated([run(None, 5.0, []), run(None, 9.0, []), run(None, 7.0, [])])["tok_s"] == 7.0
    assert _repeated([runs[0]])["repeats"] == [{k: runs[0][k] for k in REPEAT_KEYS}]


def test_engine_arrivals_end_to_end_on_cpu(tmp_path: Path, tiny_config: Path, model_pair) -> None:  # noqa: ANN001
    out = tmp_path / "out"
    argv = [
        sys.executable, "-m", "loadtests.bench.engine_arrivals", "--config", str(tiny_config), "--concurrency", "3",
        "--requests-per-user", "2", "--repeat", "2", "--profile-steps", "4", "--input-len", "12", "--output-len", "10", "--settle", "0", "--out", str(out),
    ]  # fmt: skip
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    data = json.loads((out / "results.json").read_text())
    assert set(data["runs"]) == {"plain", "eagle", "on", "off_warm_kv", "off_draft_prefill", "off_cold"}
    assert data["repeat"] == 2
    for c in (3,):
        asked = sum(n for _, n in make_requests(c, 2, 12, 10, 0.5, _vocab(model_pair.target)))
        for variant, by_c in data["runs"].items():
            r = by_c[str(c)]
            assert r["requests"] == 2 * c and r["tokens"] == asked, (variant, c, r)  # ignore_eos: all of them
            # both runs' outputs compared with plain's: greedy = plain's, token for token, every run
            assert r["compared"] == 2 * r["requests"] and r["identical"] == r["compared"], (variant, c, r)
            # the record is the median run (of two, the lower by steady tok/s); both runs kept
            assert len(r["repeats"]) == 2 and r["steady_tok_s"] == min(
                x["steady_tok_s"] for x in r["repeats"]
            )
            assert r["tok_s"] > 0 and r["seconds"] > 0
            # the steady window: from the start until the last request was sent, the tokens streamed in it
            assert 0 < r["steady_s"] < r["seconds"] and r["steady_tok_s"] > 0, (variant, c, r)
            assert r["steady_tok_s"] * r["steady_s"] < r["tokens"], (variant, c, r)
            assert 0 < r["ttft_p50_ms"] <= r["ttft_p99_ms"], (variant, c, r)  # of the requests sent in it
            # TTFT's parts from SGLang's own request timestamps (metrics on in every engine): the prefill
            # stage takes time, no part is negative beyond clock calibration, and the parts' medians are in
            # milliseconds (each at most the largest TTFT, so their sum at most three times it)
            parts = r["ttft_parts_p50_ms"]
            assert list(parts) == list(TTFT_PARTS) and parts["prefill_forward"] > 0, (variant, c, r)
            assert min(parts.values()) > -1 and sum(parts.values()) <= 3 * r["ttft_p99_ms"], (variant, c, r)
            if variant not in ("plain", "eagle"):  # SGLang's engines: no specflip state to read
                assert r["enabled"] is (variant == "on"), (variant, r)
                # the engine's own count: every returned token but the first of each request (prefill
                # makes it), plus the warm-up's (c requests of WARMUP_TOKENS, all but the first by decode steps)
                decoded = r["tokens"] - r["requests"] + (WARMUP_TOKENS - 1) * c
                if variant == "on":
                    assert r["engine_tokens"] >= decoded, (variant, r)  # a last verify may overshoot
                else:
                    assert r["engine_tokens"] == decoded, (variant, r)
                strategy = {"on": "warm_kv", "off_draft_prefill": "warm_kv"}.get(
                    variant, variant.removeprefix("off_")
                )
                assert r["strategy"] == strategy, (variant, r)
                # every prefill of an OFF level skips the draft forward, but under off_draft_prefill
                assert (r["off_prefills"] > 0) is (variant in ("off_warm_kv", "off_cold")), (variant, r)
                assert r["decode_batch"] > 0 and r["decode_step_ms"] > 0, (variant, r)
            # one more run with SGLang's profiler over its first 4 steps: a CPU trace (no GPU, no CUDA
            # runtime), summarised by its host ops, kept under profiles/
            prof = r["profile"]
            assert prof is not None and prof["trace"] == f"{variant}-c{c}-TP-0.trace.json.gz", (variant, prof)
            assert (out / "profiles" / prof["trace"]).exists()
            assert prof["span_ms"] > 0 and prof["gpu"] is None and prof["host_waits"] is None, (variant, prof)
            assert prof["top_host_ops"] and all(op["total_ms"] > 0 for op in prof["top_host_ops"]), (
                variant,
                prof,
            )
    report = (out / "report.md").read_text()
    assert "| c | plain | eagle | on | off_warm_kv | off_draft_prefill | off_cold |" in report
    # ON over SGLang's own EAGLE-3 engine at the same level, from the two medians in results.json
    on, eagle = data["runs"]["on"]["3"], data["runs"]["eagle"]["3"]
    assert f", {on['steady_tok_s'] / eagle['steady_tok_s']:.3f}x eagle steady" in report
    assert "; step " in report and " ms at batch " in report
    assert "(to_forward " in report and " + prefill_forward " in report
    assert "identical 12/12" in report and "| 3 |" in report and "x steady" in report
    assert "SGLang's profiler over its first 4 forward steps" in report and "- off_cold c=3: span " in report
    assert "2 run(s) per level" in report and " run)" in report and "] (" in report  # [min-max] spreads


def _vocab(path: str) -> int:
    from transformers import AutoConfig

    return int(AutoConfig.from_pretrained(path).vocab_size)
