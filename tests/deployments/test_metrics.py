"""The replicas' HTTP metrics: status counting at the HTTP boundary, TTFT/TPOT from an SSE stream,
usage-chunk handling; recorded through Ray and read back from Ray's metrics export (a local Ray
started by this module: the recording process is this one, as a driver, so no Serve tags)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from starlette.responses import JSONResponse

from deployments.http.metrics import (
    RequestCountMiddleware,
    endpoint_of,
    observe_stream,
)
from tests.local_ray import local_ray
from tests.ray_metrics import export_text, total, wait_for_export


@pytest.fixture(scope="module")
def ray_metrics() -> Iterator[None]:
    """A local Ray whose metrics agent hears from this process every 0.5 s."""
    with local_ray(metrics_report_s=0.5):
        yield


Series = tuple[str, tuple[tuple[str, str], ...]]  # (sample name, labels)
COMPLETIONS = (("endpoint", "/v1/completions"),)


def _grew(before: str, expected: dict[Series, float], why: str) -> str:
    """Wait until each series grew by exactly its expected amount since `before` (the export's text)."""

    def grown(text: str) -> dict[Series, float]:
        return {k: total(text, k[0], **dict(k[1])) - total(before, k[0], **dict(k[1])) for k in expected}

    return wait_for_export(lambda text: grown(text) == expected, why=f"{why}: {expected}")


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


def test_middleware_counts_every_status_including_errors_raised_by_handlers(ray_metrics: None) -> None:
    app = FastAPI()

    @app.post("/v1/completions")
    async def completions(ok: int) -> JSONResponse:
        if ok == 2:
            raise RuntimeError("boom")
        return JSONResponse({}, status_code=200 if ok else 400)

    app.add_middleware(RequestCountMiddleware)
    before = export_text()
    client = TestClient(app, raise_server_exceptions=False)
    for ok in ("1", "0", "0", "x", "2"):
        client.post(f"/v1/completions?ok={ok}")
    client.get("/metrics")  # not counted
    expected = {"200": 1.0, "400": 2.0, "422": 1.0, "500": 1.0}
    _grew(
        before,
        {("ray_specflip_requests_total", (*COMPLETIONS, ("status", c))): n for c, n in expected.items()},
        "responses counted by status",
    )


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
def test_stream_timing_and_the_servers_token_count(ray_metrics: None, client_asked_usage: bool) -> None:
    """Packets pass as they came (a usage chunk the client asked for included); the token count
    comes from the server's tally, read once the stream has ended."""
    before = export_text()
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
        ):
            out.append(p)
            tally["tokens"] = 9  # the server counts as it streams; read only at the end
        return out

    out = "".join(asyncio.run(run()))
    assert ('"usage"' in out) is client_asked_usage
    assert out.endswith("data: [DONE]\n\n") and out.count('"choices": [{') == 3
    counts = {
        ("ray_specflip_ttft_seconds_count", COMPLETIONS): 1.0,
        ("ray_specflip_tpot_seconds_count", COMPLETIONS): 1.0,
        ("ray_specflip_output_tokens_total", COMPLETIONS): 9.0,
    }
    after = _grew(before, counts, "stream timed")
    # Ray's export sums a histogram from its buckets' midpoints: the bucket is what is exact
    grew = lambda name: total(after, name, **dict(COMPLETIONS)) - total(before, name, **dict(COMPLETIONS))  # noqa: E731
    assert 0.025 < grew("ray_specflip_ttft_seconds_sum") < 1.0  # ~50 ms: bucket (0.025, 0.05] or (0.05, 0.1]
    assert 0.005 < grew("ray_specflip_tpot_seconds_sum") < 0.06  # 2 gaps of ~50 ms over 8 tokens: ~12.5 ms


def test_a_stream_the_server_counted_no_tokens_for_has_no_tpot(ray_metrics: None) -> None:
    before = export_text()

    async def run() -> None:
        async for _ in observe_stream(
            _sse([_chunk("a"), _chunk("b"), "[DONE]"], 0.0),
            "/v1/completions",
            time.monotonic(),
            tokens=lambda: None,
        ):
            pass

    asyncio.run(run())
    _grew(before, {("ray_specflip_ttft_seconds_count", COMPLETIONS): 1.0}, "stream timed")
    time.sleep(1.5)  # three more reports of this process: a TPOT would be there by now
    after = export_text()
    assert total(after, "ray_specflip_tpot_seconds_count") == total(before, "ray_specflip_tpot_seconds_count")
