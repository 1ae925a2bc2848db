"""What a torch profiler trace (Chrome JSON, as SGLang's `start_profile` writes it) says about where a
window of engine steps spent its time: how long the GPU was busy and how long it sat idle between
kernels, how long the host waited on the device, and the kernels and host ops that took the most.

    python -m loadtests.bench.trace_summary out/arrivals/profiles/*.trace.json.gz

Why: the engines alone found the OFF engine's prefill stage ~8% longer than a plain engine's at c=256
(docs/benchmarks.md); a longer stage can be more GPU work, or the GPU waiting for a host that waits
on it. Comparing two engines' summaries over the same kind of window says which.

GPU time: the union of the trace's kernel, memcpy and memset intervals (`busy`), and the gaps between
them from the window's first to its last (`idle`). Host waits: the CUDA runtime calls that block the
host until the device is done (`HOST_WAITS`); beside them every runtime call ranked by its total time
(`top_runtime`), since others block too at times (a launch into a full queue, an async copy from
pageable memory that waits for its stream, a pinned allocation). Where the host blocked
(`blocked_at`): every runtime call of 1 ms or more, named by the call, the host op around it and the
annotation around that (SGLang's `step`, `scheduler.run_batch`, ...), so two engines' traces say not
only how long their hosts waited but at which point of the step. A trace of a CPU-only run has no GPU
or runtime events: those fields are None and the host ops carry the summary.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

__all__ = ["GPU_CATEGORIES", "HOST_WAITS", "main", "summarize", "summarize_file"]

GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
# runtime calls that return only when the device (or a stream, or an event) has caught up; a
# synchronous memcpy waits for the work queued before it on its stream
HOST_WAITS = (
    "cudaDeviceSynchronize",
    "cudaStreamSynchronize",
    "cudaEventSynchronize",
    "cudaMemcpy",
)
TOP = 8  # kernels and host ops listed, by total time
BLOCKED_US = 1000.0  # a runtime call this long held the host (a launch or an async copy takes microseconds)


def summarize(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The summary of one trace's complete events (`ph` "X"; times in microseconds, as Chrome's)."""
    spans = [e for e in events if e.get("ph") == "X" and "dur" in e and "ts" in e]
    if not spans:
        return {
            "span_ms": 0.0, "gpu": None, "host_waits": None, "top_kernels": [], "top_runtime": [], "top_host_ops": [],
            "blocked_at": [],
        }  # fmt: skip
    start = min(float(e["ts"]) for e in spans)
    end = max(float(e["ts"]) + float(e["dur"]) for e in spans)
    gpu = [e for e in spans if e.get("cat") in GPU_CATEGORIES]
    runtime = [e for e in spans if e.get("cat") == "cuda_runtime"]
    host_ops = [e for e in spans if e.get("cat") == "cpu_op"]
    return {
        "span_ms": _ms(end - start),
        "gpu": _gpu_time(gpu) if gpu else None,
        "host_waits": _host_waits(runtime) if runtime else None,
        "top_kernels": _top(e for e in spans if e.get("cat") == "kernel"),
        "top_runtime": _top(runtime),
        "top_host_ops": _top(host_ops),
        "blocked_at": _blocked_at(spans),
    }


def summarize_file(path: str | Path) -> dict[str, Any]:
    """`summarize` of a trace file (gzipped or not), with its path."""
    p = Path(path)
    raw = gzip.decompress(p.read_bytes()) if p.suffix == ".gz" else p.read_bytes()
    data = json.loads(raw)
    events = data["traceEvents"] if isinstance(data, dict) else data
    return {"trace": p.name, **summarize(events)}


def _gpu_time(gpu: list[dict[str, Any]]) -> dict[str, float]:
    """Busy time (the union of the intervals) and idle time (the gaps between its first and last)."""
    intervals = sorted((float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in gpu)
    busy, (cur_start, cur_end) = 0.0, intervals[0]
    for s, e in intervals[1:]:
        if s > cur_end:
            busy += cur_end - cur_start
            cur_start, cur_end = s, e
        else:
            cur_end = max(cur_end, e)
    busy += cur_end - cur_start
    window = max(e for _, e in intervals) - intervals[0][0]
    return {"window_ms": _ms(window), "busy_ms": _ms(busy), "idle_ms": _ms(window - busy)}


def _host_waits(runtime: list[dict[str, Any]]) -> dict[str, Any]:
    by_name: dict[str, list[float]] = defaultdict(list)
    for e in runtime:
        if e.get("name") in HOST_WAITS:
            by_name[e["name"]].append(float(e["dur"]))
    durations = [d for ds in by_name.values() for d in ds]
    return {
        "total_ms": _ms(sum(durations)),
        "count": len(durations),
        "longest_ms": _ms(max(durations, default=0.0)),
        "by_call": {k: {"count": len(v), "total_ms": _ms(sum(v))} for k, v in sorted(by_name.items())},
    }


def _blocked_at(spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Where the host blocked: the runtime calls of >= BLOCKED_US, named by the call, the innermost host
    op around it and the innermost annotation around that (`step[EXTEND bs=19 toks=8192]` read as
    `step`), the TOP places by total time. A blocking copy shows here whatever its runtime name (a
    copy from pageable memory is a cudaMemcpyAsync followed by a cudaStreamSynchronize)."""
    around: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for e in spans:  # only spans at least as long as a blocked call can hold one
        if e.get("cat") in ("cpu_op", "user_annotation") and float(e["dur"]) >= BLOCKED_US:
            around[e.get("tid")].append(e)
    places = []
    for e in spans:
        if e.get("cat") != "cuda_runtime" or float(e["dur"]) < BLOCKED_US:
            continue
        t0, t1 = float(e["ts"]), float(e["ts"]) + float(e["dur"])
        inside = [
            a for a in around[e.get("tid")] if float(a["ts"]) <= t0 and float(a["ts"]) + float(a["dur"]) >= t1
        ]
        op = min((a for a in inside if a.get("cat") == "cpu_op"), key=lambda a: float(a["dur"]), default=None)
        note = min(
            (a for a in inside if a.get("cat") == "user_annotation"),
            key=lambda a: float(a["dur"]),
            default=None,
        )
        where = (
            f"{e['name']} in {op['name'] if op else '-'} under {note['name'].split('[')[0] if note else '-'}"
        )
        places.append({"name": where, "dur": e["dur"]})
    return _top(places)


def _top(events: Any) -> list[dict[str, Any]]:
    """The TOP names by total time: each one's count, total and longest (ms)."""
    total: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    longest: dict[str, float] = defaultdict(float)
    for e in events:
        total[e["name"]] += float(e["dur"])
        count[e["name"]] += 1
        longest[e["name"]] = max(longest[e["name"]], float(e["dur"]))
    ranked = sorted(total, key=total.__getitem__, reverse=True)[:TOP]
    return [
        {"name": n[:100], "count": count[n], "total_ms": _ms(total[n]), "longest_ms": _ms(longest[n])}
        for n in ranked
    ]


def _ms(us: float) -> float:
    return round(us / 1e3, 3)


def line(s: dict[str, Any]) -> str:
    """One summary in a line: span, GPU busy/idle, host waits, the top kernel."""
    parts = [f"span {s['span_ms']:,.1f} ms"]
    if s["gpu"]:
        g = s["gpu"]
        parts.append(f"GPU busy {g['busy_ms']:,.1f} / idle {g['idle_ms']:,.1f} ms")
    if s["host_waits"]:
        w = s["host_waits"]
        parts.append(f"host waits {w['total_ms']:,.1f} ms ({w['count']}, longest {w['longest_ms']:,.1f})")
    for label, top in (
        ("kernel", s["top_kernels"]),
        ("runtime", s["top_runtime"]),
        ("host op", s["top_host_ops"]),
    ):
        if top:
            parts.append(f"top {label} {top[0]['name'][:48]} {top[0]['total_ms']:,.1f} ms x{top[0]['count']}")
    if s.get("blocked_at"):
        b = s["blocked_at"][0]
        parts.append(f"blocked most at {b['name']} {b['total_ms']:,.1f} ms x{b['count']}")
    return ", ".join(parts)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="loadtests.bench.trace_summary", description=__doc__.split("\n\n")[0])
    p.add_argument("traces", nargs="+", help="trace files (.json or .json.gz)")
    p.add_argument("--json", help="write the summaries here too")
    a = p.parse_args(argv)
    summaries = []
    for t in a.traces:
        try:
            summaries.append(summarize_file(t))
        except (OSError, ValueError, KeyError) as e:
            print(f"trace_summary: {t}: {e}", file=sys.stderr)
            return 2
    for s in summaries:
        print(f"{s['trace']}: {line(s)}")
    if a.json:
        Path(a.json).write_text(json.dumps(summaries, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
