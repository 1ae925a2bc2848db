"""A replica's API metrics: request counts by status, latency, TTFT/TPOT, output tokens.

Measured at the HTTP boundary of each replica (its API edge), on a registry of its own (never the
global one). `GET /metrics` serves every replica's families, pushed to the policy actor, followed
by the actor's own (`specflip_policy_*`, per-replica modes, loads, accept length, flips);
docs/metrics.md lists every name.

- `RequestCountMiddleware` (ASGI) counts every API/control response by endpoint and status code,
  and times successful ones to the last byte.
- `observe_stream` wraps an SSE body: TTFT is the time from the handler's entry to the first
  chunk carrying a choice; TPOT is (last choice chunk - first) / (completion tokens - 1), the
  token count from the server's own tally of the request (deployments.http.request_report.TallySlot):
  no usage chunk is asked for or parsed back.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any

from prometheus_client import (
    CONTENT_TYPE_PLAIN_0_0_4,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from deployments.http.errors import client_gone

if TYPE_CHECKING:
    from deployments.http.request_report import Report

__all__ = [
    "CLIENT_CLOSED",
    "CONTENT_TYPE",
    "SERVED_FAMILY",
    "HttpMetrics",
    "RequestCountMiddleware",
    "endpoint_of",
    "http_metrics",
    "observe_stream",
]

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4  # the text format generate_latest writes
PREFIX = "specflip_"
SERVED_FAMILY = PREFIX + "served_requests"  # requests a replica took, by class and its mode
_ENDPOINTS = (
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/models",
    "/specflip/status",
    "/specflip/override",
    "/tokenize",
    "/detokenize",
    "/v1/embeddings",
)
# seconds; CPU engines are ~100x slower than GPU ones, so the range is wide
_LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 60, 120)
_TPOT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.08, 0.15, 0.3, 0.6, 1.2, 2.5)
# tokens per decode step of one request; 1 is a request decoded OFF throughout
_ACCEPT_BUCKETS = (1, 1.25, 1.5, 1.75, 2, 2.5, 3, 3.5, 4, 5, 6, 8)
_REQUEST_MODES = ("on", "off", "both", "unknown")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
ASGIApp = Callable[
    [Scope, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]], Awaitable[None]
]


class HttpMetrics:
    """The families of a replica's HTTP edge, on a registry of their own (docs/metrics.md)."""

    def __init__(self) -> None:
        disable_created_metrics()  # no *_created series: dashboards never use them (process-wide)
        self.registry = CollectorRegistry(auto_describe=False)
        r = self.registry
        self.requests = Counter(
            PREFIX + "requests",
            "HTTP responses of this replica's API by endpoint and status code",
            ["endpoint", "status"],
            registry=r,
        )
        self.duration = Histogram(
            PREFIX + "request_duration_seconds",
            "Successful requests, arrival to last byte",
            ["endpoint"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.ttft = Histogram(
            PREFIX + "ttft_seconds",
            "Streamed requests: time to the first generated chunk",
            ["endpoint"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.tpot = Histogram(
            PREFIX + "tpot_seconds",
            "Streamed requests: time per output token after the first",
            ["endpoint"],
            buckets=_TPOT_BUCKETS,
            registry=r,
        )
        self.output_tokens = Counter(
            PREFIX + "output_tokens", "Completion tokens returned", ["endpoint"], registry=r
        )
        self.request_modes = Counter(
            PREFIX + "request_modes",
            "Chat and completions requests answered, by the speculation modes they ran under",
            ["modes"],
            registry=r,
        )
        for modes in _REQUEST_MODES:  # series exist from 0
            self.request_modes.labels(modes)
        self.request_accept_length = Histogram(
            PREFIX + "request_accept_length",
            "Requests decoded ON throughout: tokens per decode step (usage.specflip.accept_length)",
            buckets=_ACCEPT_BUCKETS,
            registry=r,
        )
        self.streams_windowed = Counter(
            PREFIX + "streams_windowed",
            "Streams that switched to one packet per stream_batching_interval_ms because the "
            "replica's event loop ran behind (deployments.replica.coalesce)",
            registry=r,
        )
        r.register(_ServedCollector())
        self.policy_reachable = Gauge(
            PREFIX + "http_policy_reachable",
            "1 if the policy actor answered the last status/metrics call of this replica",
            registry=r,
        )
        self.policy_restarts = Gauge(
            PREFIX + "http_policy_restarts",
            "Times Ray restarted the policy actor, as of this replica's last status/metrics call",
            registry=r,
        )

    def observe_report(self, report: Report) -> None:
        """A request answered by this replica (deployments.http.request_report), whether or not its
        response carries the report (serve.request_report)."""
        self.request_modes.labels(report.modes_label).inc()
        if report.modes_label == "on" and report.accept_length is not None:
            self.request_accept_length.observe(report.accept_length)

    def text(self) -> str:
        return generate_latest(self.registry).decode()


class _ServedCollector(Collector):
    """`specflip_served_requests_total{class, mode}` of this replica (the routing journal's count)."""

    def collect(self) -> Any:
        from deployments.routing.journal import CLASS_MODES, JOURNAL

        family = CounterMetricFamily(
            SERVED_FAMILY,
            "Requests this replica took, by request class and its speculation mode when it took them",
            labels=["class", "mode"],
        )
        counts = dict.fromkeys(CLASS_MODES, 0) | JOURNAL.served_copy()
        for (cls, mode), n in sorted(counts.items()):
            family.add_metric([cls, mode], n)
        yield family


_METRICS: HttpMetrics | None = None


def http_metrics() -> HttpMetrics:
    """This process's HTTP metrics (one registry per process, shared by handlers and middleware)."""
    global _METRICS
    if _METRICS is None:
        _METRICS = HttpMetrics()
    return _METRICS


def endpoint_of(path: str) -> str | None:
    """The endpoint label of a request path (any route prefix), None for paths not counted."""
    for endpoint in _ENDPOINTS:
        if path.endswith(endpoint) or (endpoint == "/v1/models" and "/v1/models/" in path):
            return endpoint
    return None


class RequestCountMiddleware:
    """ASGI middleware: responses by endpoint and status, duration of successful ones. A response
    the client cut (it went away before the last byte: a stream it closed, or an answer it stopped
    waiting for) counts as status 499, nginx's "client closed request": client churn is not a
    server error."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(
        self,
        scope: Scope,
        receive: Callable[[], Awaitable[Message]],
        send: Callable[[Message], Awaitable[None]],
    ) -> None:
        endpoint = endpoint_of(scope.get("path", "")) if scope["type"] == "http" else None
        if endpoint is None:
            await self.app(scope, receive, send)
            return
        metrics, started = http_metrics(), time.monotonic()
        code: int | None = None
        finished = gone = False

        async def receive_watched() -> Message:
            nonlocal gone
            message = await receive()
            gone = gone or message["type"] == "http.disconnect"
            return message

        async def send_counted(message: Message) -> None:
            nonlocal code, finished
            if message["type"] == "http.response.start":
                code = int(message["status"])
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                finished = True
                metrics.requests.labels(endpoint, str(code)).inc()
                if code is not None and code < 400:
                    metrics.duration.labels(endpoint).observe(time.monotonic() - started)

        try:
            await self.app(scope, receive_watched, send_counted)
        except BaseException as err:
            if not finished:
                cut = gone or client_gone(err)
                if not cut and isinstance(err, asyncio.CancelledError):
                    cut = await _disconnected(receive)
                metrics.requests.labels(endpoint, CLIENT_CLOSED if cut else "500").inc()
            raise
        if not finished:  # Starlette stopped a stream whose client went away
            metrics.requests.labels(endpoint, CLIENT_CLOSED).inc()


CLIENT_CLOSED = "499"


async def _disconnected(receive: Callable[[], Awaitable[Message]], wait_s: float = 0.2) -> bool:
    """Whether the client has gone, for a request cancelled before its response ended: Ray Serve's
    replica cancels the request's task when the client disconnects (a non-streamed answer is never
    sent, so nothing in the app saw it), having queued the disconnect message for `receive`."""
    try:
        message = await asyncio.wait_for(receive(), wait_s)
    except Exception:  # noqa: BLE001 - nothing came (a timeout), or the channel is closed: not known gone
        return False
    return bool(message.get("type") == "http.disconnect")


_CHOICE = ('"choices":[{', '"choices": [{')  # a chunk that carries a choice (tokens or finish)


async def observe_stream(
    body: AsyncIterator[str | bytes],
    endpoint: str,
    started: float,
    *,
    tokens: Callable[[], int | None],
    metrics: HttpMetrics | None = None,
) -> AsyncIterator[str]:
    """Pass an SSE body through as it came, timing it: TTFT at the first packet carrying a choice,
    TPOT over the last one. Per packet one substring search; nothing is parsed. `tokens()` gives
    the stream's completion tokens once it has ended (the server's tally: request_report.TallySlot).
    """
    m = metrics or http_metrics()
    first: float | None = None
    last = started
    async for raw in body:
        packet = raw.decode() if isinstance(raw, bytes) else raw
        if any(mark in packet for mark in _CHOICE):
            last = time.monotonic()
            first = first if first is not None else last
        yield packet
    if first is not None:
        m.ttft.labels(endpoint).observe(first - started)
    n = tokens()
    if n is not None:
        m.output_tokens.labels(endpoint).inc(n)
        if first is not None and n >= 2:
            m.tpot.labels(endpoint).observe((last - first) / (n - 1))
