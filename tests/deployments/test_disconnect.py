"""Clients that go away mid-stream, against the real app: 50 streams closed after 3 events, 20
rounds; 2 s after each round no request of it is still running or waiting on any engine (each
would otherwise generate to max_tokens for seconds), and every closed stream is counted as status
499 (client closed), none as a 5xx. The same for requests that are not streamed: a client that
stops waiting for one is a 499 too (they counted as 500)."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from deployments.local import LocalApp, wait_until
from tests.deployments.conftest import MODEL
from tests.prom import total
from tests.ray_metrics import RAY_REPORT_S, export_text
from tests.reporting import report

pytestmark = pytest.mark.serve

STREAMS, ROUNDS, EVENTS = 50, 20, 3
SETTLE_S = 2.0


async def _open_and_close(client: httpx.AsyncClient, url: str, i: int) -> int:
    """Stream a long completion, close it after EVENTS data events (or 5 s); events read."""
    body = {
        "model": MODEL,
        "prompt": f"def f{i}(x):",
        "max_tokens": 600,  # ~10 s of decoding at this load if nothing aborts it
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
    }
    seen = 0
    try:
        async with asyncio.timeout(5.0), client.stream("POST", url, json=body) as r:
            async for line in r.aiter_lines():
                if line.startswith("data: "):
                    seen += 1
                    if seen >= EVENTS:
                        break
    except TimeoutError:
        pass  # queued behind the others: closed before its first event, which counts too
    return seen


async def _round(base: str) -> list[int]:
    limits = httpx.Limits(max_connections=STREAMS, max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        url = f"{base}/v1/completions"
        return list(await asyncio.gather(*(_open_and_close(client, url, i) for i in range(STREAMS))))


def _busy(app: LocalApp) -> int:
    return sum(int(r["running"]) + int(r["waiting"]) for r in app.client.replicas())


def test_closed_streams_stop_generating_at_once_and_count_as_499(app: LocalApp) -> None:
    def metric(status: str) -> float:
        return total(export_text(), "ray_specflip_requests_total", endpoint="/v1/completions", status=status)

    wait_until(lambda: _busy(app) == 0, 60, why="no request running before the test")
    time.sleep(RAY_REPORT_S + 1)  # earlier requests' counts have reached Ray's export
    closed_before, failed_before = metric("499"), metric("500")
    still_busy: list[int] = []
    events: list[int] = []
    started = time.monotonic()
    for _ in range(ROUNDS):
        events += asyncio.run(_round(app.base))
        time.sleep(SETTLE_S)
        still_busy.append(_busy(app))
    took = time.monotonic() - started
    report(
        f"disconnects: {ROUNDS} rounds x {STREAMS} streams closed after {EVENTS} events in {took:.0f} s; "
        f"running+waiting {SETTLE_S:.0f} s later per round: {still_busy}"
    )
    assert sum(e >= EVENTS for e in events) >= STREAMS, "too few streams got going to test anything"
    assert still_busy == [0] * ROUNDS, still_busy

    wait_until(  # the replicas push their counts every second
        lambda: metric("499") - closed_before >= STREAMS * ROUNDS,
        15 + 2 * RAY_REPORT_S,
        why="every closed stream counted 499",
    )
    assert metric("499") - closed_before == STREAMS * ROUNDS
    assert metric("500") == failed_before


LEFT = 5  # non-streamed requests whose client stops waiting


async def _leave(base: str, i: int) -> None:
    """A non-streamed completion of ~10 s of decoding; the client stops waiting after 2 s."""
    body = {
        "model": MODEL,
        "prompt": f"def g{i}(x):",
        "max_tokens": 600,
        "temperature": 0,
        "ignore_eos": True,
    }
    async with httpx.AsyncClient(timeout=2.0) as client:
        try:
            r = await client.post(f"{base}/v1/completions", json=body)
        except httpx.TimeoutException:
            return
    raise AssertionError(f"answered before the client left: {r.status_code} {r.text[:200]}")


def test_a_client_that_stops_waiting_for_a_non_streamed_answer_counts_as_499(app: LocalApp) -> None:
    def metric(status: str) -> float:
        return total(export_text(), "ray_specflip_requests_total", endpoint="/v1/completions", status=status)

    wait_until(lambda: _busy(app) == 0, 60, why="no request running before the test")
    time.sleep(RAY_REPORT_S + 1)  # earlier requests' counts have reached Ray's export
    closed_before, failed_before = metric("499"), metric("500")

    async def leave_all() -> None:
        await asyncio.gather(*(_leave(app.base, i) for i in range(LEFT)))

    asyncio.run(leave_all())
    wait_until(lambda: _busy(app) == 0, 10, why="the abandoned requests stopped generating")
    wait_until(  # the replicas push their counts every second
        lambda: metric("499") - closed_before >= LEFT,
        15 + 2 * RAY_REPORT_S,
        why="every abandoned request counted 499",
    )
    assert metric("499") - closed_before == LEFT
    assert metric("500") == failed_before
