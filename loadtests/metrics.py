"""Percentiles, throughput and goodput over a measurement window of request records.

Two window rules:
- **Tokens by arrival** (`output_tokens`, `output_tok_s`): the output tokens that reached the
  client inside the window, whichever request carried them (a request's tokens are spread
  evenly over its token chunks, each counted at the chunk's arrival time; a non-streamed
  response's tokens all count at its end). Requests still running at either edge count for the
  part they delivered inside, cancelled ones too (their tokens were delivered), failed ones not.
  A rate counted from whole requests quantizes: users that start together with equal output
  lengths finish in waves, and a window holds a whole number of waves (every c >= 128 point of
  the 2026-12-01 H200 run counted exactly 768 requests; one counted 0).
- **Requests by completion** (latencies, `requests`, `req_s`, goodput): a request belongs to the
  window when it *completed* inside it. Cancelled requests (a user stopped mid-stream) carry no
  latency and are left out.

Goodput (as in vLLM's `--goodput` and SGLang's bench_serving): completed requests
per second whose TTFT and TPOT both meet the SLOs; an SLO set to None is not
checked, a request with one output token has no TPOT and meets the TPOT SLO.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import MISSING, dataclass, fields
from typing import Any, TypeVar

import numpy as np

from loadtests.locust.records import RequestRecord

__all__ = [
    "CANCELLED",
    "Slo",
    "Summary",
    "meets_slo",
    "percentile",
    "summarize",
    "throughput_timeline",
    "window_tokens",
]

CANCELLED = "cancelled"


def percentile(values: Sequence[float], p: float) -> float | None:
    """numpy's percentile (linear interpolation); None for no values. The one percentile of the
    load tests, benchmarks, simulator report and demo."""
    if not 0 <= p <= 100:
        raise ValueError(f"percentile must be in [0, 100], got {p}")
    if len(values) == 0:
        return None
    return float(np.percentile(values, p))


@dataclass(frozen=True)
class Slo:
    """Service-level objectives for goodput, in milliseconds (None = not checked)."""

    ttft_ms: float | None = 2000.0
    tpot_ms: float | None = 100.0

    def describe(self) -> str:
        parts = [
            f"TTFT <= {self.ttft_ms:g} ms" if self.ttft_ms is not None else "",
            f"TPOT <= {self.tpot_ms:g} ms" if self.tpot_ms is not None else "",
        ]
        return " and ".join(p for p in parts if p) or "no SLO (every successful request counts)"


def meets_slo(r: RequestRecord, slo: Slo) -> bool:
    if not r.ok:
        return False
    if slo.ttft_ms is not None and (r.ttft is None or r.ttft * 1000 > slo.ttft_ms):
        return False
    return not (slo.tpot_ms is not None and r.tpot is not None and r.tpot * 1000 > slo.tpot_ms)


def _ms(x: float | None) -> float | None:
    return None if x is None else x * 1000


S = TypeVar("S", bound="Summary")


@dataclass(frozen=True)
class Summary:
    """Aggregates of one window. Latencies in ms, rates per second. The sweep's rows and the
    raw-vs-app points are this record with what they were measured on (subclasses)."""

    requests: int
    ok: int
    errors: int
    duration_s: float
    output_tokens: int
    output_tok_s: float
    req_s: float
    goodput_req_s: float
    ttft_p50_ms: float | None
    ttft_p90_ms: float | None
    ttft_p99_ms: float | None
    tpot_p50_ms: float | None
    tpot_p90_ms: float | None
    tpot_p99_ms: float | None
    itl_p50_ms: float | None
    itl_p99_ms: float | None
    e2e_p50_ms: float | None
    chunk_counted: int
    chunks_s: float = 0.0  # SSE token chunks the client took in per second (its per-event load)

    @classmethod
    def from_dict(cls: type[S], d: Mapping[str, Any]) -> S:
        """The record from its `asdict` form (JSON, CSV); a field a file written before it
        existed lacks is its default, else None."""
        values = {f.name: d.get(f.name, None if f.default is MISSING else f.default) for f in fields(cls)}
        return cls(**values)


def summarize(records: Iterable[RequestRecord], start: float, end: float, slo: Slo) -> Summary:
    """Summarize the requests that completed in [start, end)."""
    if end <= start:
        raise ValueError(f"empty window [{start}, {end})")
    records = list(records)
    inside = [r for r in records if start <= r.end < end and r.error != CANCELLED]
    good = [r for r in inside if r.ok]
    duration = end - start
    ttfts = [r.ttft for r in good if r.ttft is not None]
    tpots = [r.tpot for r in good if r.tpot is not None]
    itls = [g for r in good for g in r.itl]
    tokens = window_tokens(records, start, end)
    return Summary(
        requests=len(inside),
        ok=len(good),
        errors=len(inside) - len(good),
        duration_s=duration,
        output_tokens=round(tokens),
        output_tok_s=tokens / duration,
        req_s=len(good) / duration,
        goodput_req_s=sum(1 for r in good if meets_slo(r, slo)) / duration,
        ttft_p50_ms=_ms(percentile(ttfts, 50)),
        ttft_p90_ms=_ms(percentile(ttfts, 90)),
        ttft_p99_ms=_ms(percentile(ttfts, 99)),
        tpot_p50_ms=_ms(percentile(tpots, 50)),
        tpot_p90_ms=_ms(percentile(tpots, 90)),
        tpot_p99_ms=_ms(percentile(tpots, 99)),
        itl_p50_ms=_ms(percentile(itls, 50)),
        itl_p99_ms=_ms(percentile(itls, 99)),
        e2e_p50_ms=_ms(percentile([r.e2e for r in good], 50)),
        chunk_counted=sum(1 for r in good if r.token_source == "chunks"),
        chunks_s=sum(r.chunks for r in good) / duration,
    )


def _delivers(r: RequestRecord) -> bool:
    """Whether a record's tokens count: successful, or cancelled (delivered until it stopped)."""
    return r.ok or r.error == CANCELLED


def window_tokens(records: Iterable[RequestRecord], start: float, end: float) -> float:
    """Output tokens that arrived in [start, end) (the arrival rule of the module docstring)."""
    total = 0.0
    for r in records:
        if not _delivers(r) or r.output_tokens <= 0:
            continue
        times = r.token_times()
        if not times:  # not streamed: everything at the end
            total += r.output_tokens if start <= r.end < end else 0.0
            continue
        if times[-1] < start or times[0] >= end:
            continue
        arrived = sum(1 for t in times if start <= t < end)
        total += r.output_tokens * arrived / len(times)
    return total


def throughput_timeline(
    records: Iterable[RequestRecord], t0: float, t1: float, bin_s: float = 1.0
) -> list[float]:
    """Output tok/s per bin of `bin_s` seconds over [t0, t1).

    Each request's output tokens are spread evenly over its token chunks (so a
    chunk carrying three speculated tokens counts three), cancelled requests
    included: their tokens were generated.
    """
    n = max(1, math.ceil((t1 - t0) / bin_s))
    bins = [0.0] * n
    for r in records:
        times = r.token_times()
        if not times or (not r.ok and r.error != CANCELLED):
            continue
        per_chunk = r.output_tokens / len(times)
        for t in times:
            i = int((t - t0) // bin_s)
            if 0 <= i < n:
                bins[i] += per_chunk
    return [b / bin_s for b in bins]
