"""SGLang's own benchmark client (`sglang.benchmark.serving`) in process, and what its result dict says:
shared by `loadtests.bench.client_sweep` and `client_transition`.

`chunk_gaps` gives the gaps between streamed chunks the same way for every server (SGLang's own ITL
is per token only for a server reporting an accept length: see `loadtests.bench.client_sweep`).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

from loadtests.metrics import percentile

__all__ = ["SglangClient", "chunk_gaps", "gap_ms", "ms"]


class SglangClient:
    """`sglang.benchmark.serving` imported once; `run(...)` is one benchmark run, its result dict."""

    def __init__(self) -> None:
        # offline: the client asks the hub about the served model id (a chat-template check), and each
        # of its retries waits; with no network that alone cost ~45 s per run
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import sglang.benchmark.serving as bench  # the tooling's client, not the product's engine

        self._bench = bench
        captured: list[argparse.Namespace] = []
        real = bench.run_benchmark
        bench.run_benchmark = captured.append  # cli_main parses, then hands us its Namespace
        argv = sys.argv
        try:
            sys.argv = ["sglang.benchmark.serving", "--backend", "sglang-oai", "--dataset-name", "random-ids"]
            bench.cli_main()
        finally:
            sys.argv, bench.run_benchmark = argv, real
        self._defaults = captured[0]

    def run(self, **overrides: Any) -> dict[str, Any]:
        args = argparse.Namespace(**{**vars(self._defaults), **overrides})
        result = self._bench.run_benchmark(args)
        return dict(result or {})

    def warm_up(self, url: str, c: int, **run: Any) -> float:
        """One unmeasured closed-loop run of two waves at concurrency `c` (`run`: the model, tokenizer,
        lengths, seed and output file of the measured runs); its seconds. A server's first large
        prefill can stall (an 11-s gap in SGLang's own server's log before its first 8,192-token prefill
        chunk on a fresh H200 host, 2026-12-04): whichever server or variant met it first would pay for
        it inside a measured run."""
        started = time.monotonic()
        self.run(base_url=url, num_prompts=2 * c, max_concurrency=c, random_range_ratio=1.0, disable_tqdm=True,
                 request_rate=float("inf"), **run)  # fmt: skip
        return time.monotonic() - started


def ms(result: dict[str, Any], key: str) -> float | None:
    """A millisecond figure of the result, rounded to 0.01 ms; None where the client left it out."""
    v = result.get(key)
    return None if v is None else round(float(v), 2)


def chunk_gaps(result: dict[str, Any]) -> list[float]:
    """The gaps (seconds) between streamed chunks that carried text, over the run's successful requests:
    SGLang's per-request `itls` (in its result whether or not `--output-details` is set), undivided.
    A request's first chunk is its TTFT, not a gap. SGLang's own ITL leaves failed requests out too."""
    errors = result.get("errors") or []
    return [
        gap
        for i, gaps in enumerate(result.get("itls") or [])
        if i >= len(errors) or not errors[i]
        for gap in gaps
    ]


def gap_ms(gaps: list[float], p: float) -> float | None:
    """Percentile p of gaps in seconds, in ms."""
    v = percentile(gaps, p)
    return None if v is None else round(v * 1000, 2)
