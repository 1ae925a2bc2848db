"""The replicas' HTTP metrics: status counting at the HTTP boundary, TTFT/TPOT from an SSE stream, usage-chunk handling."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from starlette.responses import JSONResponse

from deployments.http.metrics import (
    HttpMetrics,
    RequestCountMiddleware,
    endpoint_of,
    http_metrics,
    observe_stream,
)


def _value(metrics: HttpMetrics, line_start: str) -> float:
    found = re.search(re.escape(line_start) + r" ([0-9.e+-]+)", metrics.text())
    return float(found.group(1)) if found else 0.0


@pytest.mark.parametrize(
    ("path", "endpoint"),
    [
        ("/v1/chat/completions", "/v1/chat/completions"),
        ("/api/v1/completions", "/v1/completions"),
        ("/v1/models/specflip-tiny", "/v1/models"),
        ("/specflip/override", "/specflip/override"),
        ("/metrics", None),
        ("/", None),
        ("/-/healthz", None),
    ],
)
def test_endpoint_labels(path: str, endpoint: str | None) -> None:
    assert endpoint_of(path) == endpoint


def test_middleware_counts_every_status_including_errors_raised_by_handlers() -> None:
    app = FastAPI()

    @app.post("/v1/completions")
    async def completions(ok: int) -> JSONResponse:
        if ok == 2:
            raise RuntimeError("boom")
        return JSONResponse({}, status_code=200 if ok else 400)

    app.add_middleware(RequestCountMiddleware)
    metrics = http_metrics()
    before = {
        c: _value(metrics, f'specflip_requests_total{{endpoint="/v1/completions",status="{c}"}}')
        for c in ("200", "400", "422", "500")
    }
    client = TestClient(app, raise_server_exceptions=False)
    for ok in ("1", "0", "0", "x", "2"):
        client.post(f"/v1/completions?ok={ok}")
    client.get("/metrics")  # not counted
    after = {
        c: _value(metrics, f'specflip_requests_total{{endpoint="/v1/completions",status="{c}"}}')
        for c in before
    }
    assert {c: after[c] - before[c] for c in before} == {"200": 1, "400": 2, "422": 1, "500": 1}


async def _sse(events: list[dict | str], gap_s: float) -> AsyncIterator[str]:
    for e in events:
        await asyncio.sleep(gap_s)
        yield "data: [DONE]\n\n" if e == "[DONE]" else f"data: {json.dumps(e)}\n\n"


def _chunk(text: str) -> dict:
    return {"object": "text_completion", "choices": [{"index": 0, "text": text, "finish_reason": None}]}


USAGE = {
    "object": "text_completion",
    "choices": [],
    "usage": {"prompt_tokens": 3, "completion_tokens": 9, "total_tokens": 12},
}


@pytest.mark.parametrize("client_asked_usage", [True, False])
def test_stream_timing_and_the_servers_token_count(client_asked_usage: bool) -> None:
    """Packets pass as they came (a usage chunk the client asked for included); the token count
    comes from the server's tally, read once the stream has ended."""
    metrics = HttpMetrics()
    events: list[dict | str] = [
        _chunk("a"),
        _chunk("bc"),
        _chunk("d"),
        *([USAGE] if client_asked_usage else []),
        "[DONE]",
    ]
    tally: dict[str, int | None] = {"tokens": None}

    async def run() -> list[str]:
        out = []
        async for p in observe_stream(
            _sse(events, 0.05),
            "/v1/completions",
            time.monotonic(),
            tokens=lambda: tally["tokens"],
            metrics=metrics,
        ):
            out.append(p)
            tally["tokens"] = 9  # the server counts as it streams; read only at the end
        return out

    out = "".join(asyncio.run(run()))
    assert ('"usage"' in out) is client_asked_usage
    assert out.endswith("data: [DONE]\n\n") and out.count('"choices": [{') == 3
    assert _value(metrics, 'specflip_ttft_seconds_count{endpoint="/v1/completions"}') == 1
    ttft = _value(metrics, 'specflip_ttft_seconds_sum{endpoint="/v1/completions"}')
    tpot = _value(metrics, 'specflip_tpot_seconds_sum{endpoint="/v1/completions"}')
    assert 0.04 < ttft < 1.0
    assert 0.1 / 8 * 0.8 < tpot < 1.0 / 8  # 2 gaps of ~50 ms over 8 tokens after the first
    assert _value(metrics, 'specflip_output_tokens_total{endpoint="/v1/completions"}') == 9


def test_a_stream_the_server_counted_no_tokens_for_has_no_tpot() -> None:
    metrics = HttpMetrics()

    async def run() -> None:
        async for _ in observe_stream(
            _sse([_chunk("a"), _chunk("b"), "[DONE]"], 0.0),
            "/v1/completions",
            time.monotonic(),
            tokens=lambda: None,
            metrics=metrics,
        ):
            pass

    asyncio.run(run())
    assert _value(metrics, 'specflip_ttft_seconds_count{endpoint="/v1/completions"}') == 1
    assert _value(metrics, 'specflip_tpot_seconds_count{endpoint="/v1/completions"}') == 0
