"""Per-request overhead of the Ray Serve path against calling the engine directly (CPU).

    python -m loadtests.bench.serve_overhead [--requests 40] [--max-tokens 1 16] [--pair DIR]

Same model pair, same engine settings (the replica's own factory builds both engines), same
machine, one request at a time, greedy with `ignore_eos` so both paths generate exactly the same
tokens. Both engines are up at once and requests alternate between the paths, so drift of a
shared host hits both alike; the overhead is the median of per-pair differences.
Serve path = HTTP client -> Serve's HAProxy (+ Ray's LLMRouter) -> the SpecFlipServer replica's own
HTTP app (checks, metrics) -> SpecFlipServer
replica (with its policy tick running) -> engine. Writes the "## Ray Serve overhead" section
of docs/benchmarks.md (other sections are left alone) and the raw numbers to out/bench_overhead.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from loadtests.markdown import table, write_section
from loadtests.metrics import percentile

__all__ = ["PathStats", "main"]

ROOT = Path(__file__).resolve().parents[2]
SECTION = "## Ray Serve overhead"
PROMPTS = ("def add(a, b):", "class Stack:", "import os\n\ndef", "for i in range(", "return self.")


@dataclass(frozen=True)
class PathStats:
    max_tokens: int
    stream: bool  # the Ray Serve path streamed (SSE, read to its last byte) or not
    requests: int
    direct_p50_ms: float
    serve_p50_ms: float
    overhead_p50_ms: float  # median over request pairs of (Serve - direct)
    direct_p90_ms: float
    serve_p90_ms: float


def _p(values: list[float], q: float) -> float:
    return percentile(values, q) or 0.0


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _measure(config: Any, requests: int, max_tokens: list[int], streams: list[bool]) -> list[PathStats]:
    """Both paths up at once, requests alternating one at a time: host drift hits both alike."""
    from deployments.local import run_local
    from deployments.replica.engine import build_specflip_engine

    engine: Any = build_specflip_engine(config)  # the replica's own factory, in this process
    try:
        with run_local(
            config,
            host="127.0.0.1",
            port=_free_port(),
            worker_pythonpath=str(ROOT),
            log=lambda line: print(f"bench: {line}", flush=True),
        ) as app:

            def direct(prompt: str, t: int) -> float:
                started = time.perf_counter()
                engine.generate(
                    prompt=prompt, sampling_params={"max_new_tokens": t, "temperature": 0, "ignore_eos": True}
                )
                return time.perf_counter() - started

            def served(prompt: str, t: int, stream: bool) -> float:
                body = {
                    "model": config.model.id,
                    "prompt": prompt,
                    "max_tokens": t,
                    "temperature": 0,
                    "ignore_eos": True,
                    "stream": stream,
                    **({"stream_options": {"include_usage": True}} if stream else {}),
                }
                started = time.perf_counter()
                r = app.client.post("/v1/completions", body, timeout=300)  # the whole body, SSE included
                took = time.perf_counter() - started
                assert r.status_code == 200, r.text[:300]
                usage = _stream_usage(r.text) if stream else r.json()["usage"]
                assert usage["completion_tokens"] == t, usage
                return took

            out = []
            for t, stream in [(t, stream) for t in max_tokens for stream in streams]:
                for p in PROMPTS:  # warm-up, both paths
                    direct(p, t), served(p, t, stream)
                d: list[float] = []
                s: list[float] = []
                for i in range(requests):
                    prompt = PROMPTS[i % len(PROMPTS)]
                    if i % 2:  # alternate which path goes first
                        s.append(served(prompt, t, stream))
                        d.append(direct(prompt, t))
                    else:
                        d.append(direct(prompt, t))
                        s.append(served(prompt, t, stream))
                ms_d, ms_s = [x * 1000 for x in d], [x * 1000 for x in s]
                out.append(
                    PathStats(
                        t,
                        stream,
                        requests,
                        _p(ms_d, 50),
                        _p(ms_s, 50),
                        _p([b - a for a, b in zip(ms_d, ms_s, strict=True)], 50),
                        _p(ms_d, 90),
                        _p(ms_s, 90),
                    )
                )
                print(
                    f"bench: max_tokens={t} stream={stream}: direct p50 {out[-1].direct_p50_ms:.1f} ms, Ray Serve p50 "
                    f"{out[-1].serve_p50_ms:.1f} ms, paired overhead p50 {out[-1].overhead_p50_ms:.1f} ms",
                    flush=True,
                )
            return out
    finally:
        engine.shutdown()


def _stream_usage(text: str) -> dict[str, Any]:
    """The usage object of a stream's usage chunk (asked for with stream_options.include_usage)."""
    for line in reversed(text.splitlines()):
        if line.startswith("data: {") and '"usage"' in line:
            usage = json.loads(line[6:]).get("usage")
            if usage:
                return dict(usage)
    raise AssertionError(f"no usage chunk in the stream: {text[-300:]}")


def _table(stats: list[PathStats]) -> str:
    header = [
        "max_tokens",
        "Ray Serve path",
        "requests",
        "direct p50 (ms)",
        "Ray Serve p50 (ms)",
        "overhead p50 (ms)",
    ]
    rows = [
        [
            s.max_tokens,
            "streamed" if s.stream else "non-streamed",
            s.requests,
            f"{s.direct_p50_ms:.1f}",
            f"{s.serve_p50_ms:.1f}",
            f"**{s.overhead_p50_ms:+.1f}**",
            f"{s.direct_p90_ms:.1f}",
            f"{s.serve_p90_ms:.1f}",
        ]
        for s in stats
    ]
    return table([*header, "direct p90", "Serve p90"], rows, align="rlrrrrrr").rstrip("\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m loadtests.bench.serve_overhead", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--requests", type=int, default=40, help="timed requests per path and max_tokens")
    parser.add_argument("--max-tokens", type=int, nargs="+", default=[1, 16])
    parser.add_argument(
        "--stream",
        choices=("no", "yes", "both"),
        default="both",
        help="the Ray Serve path non-streamed, streamed (SSE read to its last byte), or both",
    )
    parser.add_argument(
        "--pair",
        default=os.environ.get("SPECFLIP_MODELS"),
        help="tiny pair dir (default $SPECFLIP_MODELS or ./models/tiny; built if missing)",
    )
    parser.add_argument("--doc", default=str(ROOT / "docs" / "benchmarks.md"))
    parser.add_argument("--json", default=str(ROOT / "out" / "bench_overhead.json"))
    args = parser.parse_args(argv)

    from deployments.defaults import cpu_demo_config, default_pair_dir
    from loadtests.models.build import build_pair

    pair_dir = os.path.abspath(args.pair or default_pair_dir())
    paths = build_pair(pair_dir, log=lambda line: print(f"bench: {line}", flush=True))
    config = cpu_demo_config((paths.target, paths.draft), replicas={"count": 1})
    began = time.time()
    load_before = os.getloadavg()
    streams = {"no": [False], "yes": [True], "both": [False, True]}[args.stream]
    stats = _measure(config, args.requests, args.max_tokens, streams)
    load_after = os.getloadavg()

    env = (
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"load average {load_before[0]:.1f} before / {load_after[0]:.1f} after"
    )
    body = "\n".join(
        [
            SECTION,
            "",
            f"`python -m loadtests.bench.serve_overhead --requests {args.requests} --stream {args.stream}` on "
            f"{time.strftime('%Y-%m-%d', time.gmtime(began))} ({env}; other jobs share this host). One CPU replica "
            "of the tiny trained pair (EAGLE-3 steps 3, topk 1, 4 draft tokens, speculation ON), greedy with "
            "`ignore_eos` so both paths generate the same tokens, one request at a time. Direct = "
            "`SpecFlipEngine.generate` in the benchmark process (built by the replica's own factory); Ray Serve = "
            "`POST /v1/completions` (non-streamed, or streamed with its usage chunk and read to `[DONE]`) over HTTP through Serve's HAProxy (and Ray's LLMRouter) to a "
            "`SpecFlipServer` replica's own HTTP app (input checks, metrics; policy tick running) and its engine. Both "
            "engines are up together and requests alternate between the paths, so host drift hits both alike; "
            "overhead p50 is the median over request pairs of (Ray Serve - direct).",
            "",
            _table(stats),
            "",
            "The overhead is a fixed per-request cost (HTTP, HAProxy and its router call, request/response "
            "models, the checks and metrics): it matters for short requests and fades for long ones. On a GPU a "
            "request takes far less engine time, so the same milliseconds are a larger share there. Where the "
            "overhead is far below the paths' p90 - p50 spread, the CPU engine's own jitter hides it.",
        ]
    )
    write_section(Path(args.doc), body)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps({"env": env, "stats": [asdict(x) for x in stats]}, indent=1))
    print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
