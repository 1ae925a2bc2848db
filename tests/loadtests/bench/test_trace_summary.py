"""loadtests.bench.trace_summary on hand-made traces: the GPU's busy time is the union of its
intervals and its idle time the gaps between them, host waits are the blocking runtime calls only,
and a CPU-only trace summarises by its host ops."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from loadtests.bench.trace_summary import main, summarize, summarize_file


def _x(cat: str, name: str, ts: float, dur: float) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur}


GPU_TRACE = [
    _x("cpu_op", "aten::mm", 0, 50),
    _x("cuda_runtime", "cudaLaunchKernel", 5, 2),
    _x("cuda_runtime", "cudaStreamSynchronize", 60, 300),  # the host waits 0.3 ms
    _x("cuda_runtime", "cudaMemcpy", 400, 100),
    _x("kernel", "gemm", 100, 200),  # 100-300
    _x("kernel", "attn", 250, 100),  # 250-350: overlaps gemm on another stream
    _x("gpu_memcpy", "Memcpy DtoH", 600, 50),  # 600-650: idle 350-600
    _x("kernel", "gemm", 1000, 100),  # 1000-1100: idle 650-1000
    {"ph": "i", "name": "marker", "ts": 5000},  # not a complete event
]


def test_busy_is_the_union_of_the_gpu_intervals_and_idle_the_gaps_between_them() -> None:
    s = summarize(GPU_TRACE)
    assert s["span_ms"] == pytest.approx(1.1)  # 0 to 1100 us
    # busy: 100-350 (250) + 600-650 (50) + 1000-1100 (100) = 400 us; window 100-1100
    assert s["gpu"] == {"window_ms": 1.0, "busy_ms": 0.4, "idle_ms": 0.6}
    w = s["host_waits"]
    assert w["total_ms"] == pytest.approx(0.4) and w["count"] == 2 and w["longest_ms"] == 0.3
    assert set(w["by_call"]) == {"cudaStreamSynchronize", "cudaMemcpy"}  # a launch is no wait
    assert [k["name"] for k in s["top_kernels"]] == ["gemm", "attn"]
    assert s["top_kernels"][0] == {"name": "gemm", "count": 2, "total_ms": 0.3, "longest_ms": 0.2}
    assert s["top_host_ops"] == [{"name": "aten::mm", "count": 1, "total_ms": 0.05, "longest_ms": 0.05}]
    # every runtime call ranked, the launch too (a launch into a full queue blocks)
    assert [r["name"] for r in s["top_runtime"]] == [
        "cudaStreamSynchronize",
        "cudaMemcpy",
        "cudaLaunchKernel",
    ]


def test_a_cpu_only_trace_has_no_gpu_and_no_waits_and_an_empty_one_nothing() -> None:
    s = summarize([_x("cpu_op", "aten::add", 10, 5), _x("cpu_op", "aten::add", 30, 5)])
    assert s["gpu"] is None and s["host_waits"] is None and s["top_kernels"] == s["top_runtime"] == []
    assert s["span_ms"] == 0.025 and s["top_host_ops"][0]["count"] == 2
    assert summarize([])["span_ms"] == 0.0


def test_files_gzipped_or_not_and_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gz = tmp_path / "plain-c256-TP-0.trace.json.gz"
    gz.write_bytes(gzip.compress(json.dumps({"traceEvents": GPU_TRACE}).encode()))
    plain = tmp_path / "off.json"
    plain.write_text(json.dumps(GPU_TRACE))  # a bare event list is a trace too
    assert summarize_file(gz)["gpu"] == summarize_file(plain)["gpu"]
    assert main([str(gz), str(plain), "--json", str(tmp_path / "s.json")]) == 0
    out = capsys.readouterr().out
    assert "plain-c256-TP-0.trace.json.gz: span 1.1 ms, GPU busy 0.4 / idle 0.6 ms, host waits 0.4 ms" in out
    assert (
        "top kernel gemm 0.3 ms x2, top runtime cudaStreamSynchronize 0.3 ms x1, top host op aten::mm" in out
    )
    assert len(json.loads((tmp_path / "s.json").read_text())) == 2
    (tmp_path / "bad.json").write_text("{")
    assert main([str(tmp_path / "bad.json")]) == 2


def _on(tid: int, cat: str, name: str, ts: float, dur: float) -> dict:
    return {**_x(cat, name, ts, dur), "tid": tid}


def test_where_the_host_blocked_is_named_by_the_call_its_host_op_and_its_annotation() -> None:
    """The OFF prefill's wait of 2026-12-07: a copy from pageable memory after the step (a memcpy and a
    stream sync inside aten::copy_, in run_batch outside the step) against plain's inside the step;
    calls under 1 ms and other threads' spans around the same time do not count."""
    trace = [
        _on(1, "user_annotation", "scheduler.run_batch", 0, 400_000),
        _on(1, "user_annotation", "step[EXTEND bs=19 toks=8192]", 1_000, 20_000),
        _on(1, "cpu_op", "aten::to", 2_000, 5_000),
        _on(1, "cpu_op", "aten::copy_", 2_500, 4_000),
        _on(1, "cuda_runtime", "cudaMemcpyAsync", 3_000, 3_000),  # in the step: blocked 3 ms
        _on(1, "cpu_op", "aten::copy_", 30_000, 170_000),
        _on(1, "cuda_runtime", "cudaMemcpyAsync", 30_010, 20),  # an async copy: not a block
        _on(1, "cuda_runtime", "cudaStreamSynchronize", 30_040, 165_000),
        _on(1, "user_annotation", "step[EXTEND bs=20 toks=8192]", 250_000, 20_000),
        _on(1, "cpu_op", "aten::copy_", 251_000, 2_000),
        _on(1, "cuda_runtime", "cudaMemcpyAsync", 251_100, 1_500),
        _on(2, "cpu_op", "aten::elsewhere", 0, 400_000),  # another thread: never around thread 1's calls
    ]
    blocked = summarize(trace)["blocked_at"]
    assert blocked == [
        {
            "name": "cudaStreamSynchronize in aten::copy_ under scheduler.run_batch",
            "count": 1,
            "total_ms": 165.0,
            "longest_ms": 165.0,
        },
        {"name": "cudaMemcpyAsync in aten::copy_ under step", "count": 2, "total_ms": 4.5, "longest_ms": 3.0},
    ]
    assert summarize(GPU_TRACE)["blocked_at"] == []  # nothing there blocked for 1 ms
