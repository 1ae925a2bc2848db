"""A replica's API metrics: request counts by status, latency, TTFT/TPOT, output tokens.

Measured at the HTTP boundary of each replica (its API edge) and recorded with Ray Serve's
metrics API (`ray.serve.metrics`, which tags each series with the replica's `deployment`,
`replica` and `application`): Ray's per-node metrics agent exports them on its metrics export port
with Ray's `ray_` prefix, beside Ray Serve's own `ray_serve_*` series (docs/metrics.md). Nothing of
them goes to the policy actor. Outside a Ray worker (no `ray.init`) recording does nothing.

- `RequestCountMiddleware` (ASGI) counts every API/control response by endpoint and status code,
  and times successful ones to the last byte.
- `observe_stream` wraps an SSE body: TTFT is the time from the handler's entry to the first
  chunk carrying a choice; TPOT is (last choice chunk - first) / (completion tokens - 1), the
  token count from the server's own tally of the request (deployments.http.request_report.Tally):
  no usage chunk is asked for or parsed back.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ray.serve import metrics as serve_metrics

from deployments.http.errors import client_gone
from deployments.http.routes import ENDPOINTS

if TYPE_CHECKING:
    from deployments.http.request_report import Report

__all__ = [
    "CLIENT_CLOSED",
    "FAMILIES",
    "RAY_PREFIX",
    "HttpMetrics",
    "RequestCountMiddleware",
    "endpoint_of",
    "http_metrics",
    "observe_stream",
]

PREFIX = "specflip_"
RAY_PREFIX = "ray_"  # Ray's metrics agent exports every application metric under it
# endpoint labels: the served routes but /metrics (a model's path counts as /v1/models), and three
# the app does not serve, the 404s clients most often meet
_ENDPOINTS = tuple(r.path for r in ENDPOINTS.values() if r.path != "/metrics" and "{" not in r.path) + (
    "/tokenize",
    "/detokenize",
    "/v1/embeddings",
)
# seconds; CPU engines are ~100x slower than GPU ones, so the range is wide
_LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 60, 120)
_TPOT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.08, 0.15, 0.3, 0.6, 1.2, 2.5)
# tokens per decode step of one request; 1 is a request decoded OFF throughout
_ACCEPT_BUCKETS = (1, 1.25, 1.5, 1.75, 2, 2.5, 3, 3.5, 4, 5, 6, 8)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


@dataclass(frozen=True)
class Family:
    """One metric of the HTTP edge: its name as recorded (Ray exports `ray_` + name, counters with
    `_total`), Prometheus type, own tags (Serve adds deployment, replica, application) and buckets."""

    name: str
    kind: str  # "counter" | "histogram" | "gauge"
    tags: tuple[str, ...]
    help: str
    buckets: tuple[float, ...] = ()


_E = ("endpoint",)
# name without PREFIX, kind, tags, buckets, help
_TABLE: tuple[tuple[str, str, tuple[str, ...], tuple[float, ...], str], ...] = (
    ("requests", "counter", ("endpoint", "status"), (), "HTTP responses by endpoint and status"),
    ("request_duration_seconds", "histogram", _E, _LATENCY_BUCKETS,
     "Successful requests, arrival to last byte"),
    ("ttft_seconds", "histogram", _E, _LATENCY_BUCKETS,
     "Streamed requests: time to the first generated chunk"),
    ("tpot_seconds", "histogram", _E, _TPOT_BUCKETS,
     "Streamed requests: time per output token after the first"),
    ("output_tokens", "counter", _E, (), "Completion tokens returned"),
    ("request_modes", "counter", ("modes",), (),
     "Chat and completions requests answered, by the speculation modes they ran under"),
    ("request_accept_length", "histogram", (), _ACCEPT_BUCKETS,
     "Requests decoded ON throughout: tokens per decode step"),
    ("streams_windowed", "counter", (), (),
     "Streams that switched to one packet per stream_batching_interval_ms (the loop ran behind)"),
    ("served_requests", "counter", ("class", "mode"), (),
     "Requests this replica took, by request class and its speculation mode when it took them"),
    ("http_policy_reachable", "gauge", (), (),
     "1 if the policy actor answered the last status/metrics call of this replica"),
    ("http_policy_restarts", "gauge", (), (),
     "Times Ray restarted the policy actor, as of this replica's last status/metrics call"),
)  # fmt: skip
FAMILIES = {
    PREFIX + n: Family(PREFIX + n, kind, tags, help, buckets) for n, kind, tags, buckets, help in _TABLE
}


class _Series:
    """One family's series of given tag values (prometheus_client's `labels(...)` shape)."""

    __slots__ = ("_metric", "_tags")

    def __init__(self, metric: Any, tags: dict[str, str]) -> None:
        self._metric, self._tags = metric, tags

    def inc(self, value: float = 1.0) -> None:
        if value > 0:  # Ray refuses an increment of 0
            self._metric.inc(value, dict(self._tags))

    def observe(self, value: float) -> None:
        self._metric.observe(value, dict(self._tags))

    def set(self, value: float) -> None:
        self._metric.set(value, dict(self._tags))


class _Metric:
    def __init__(self, family: Family) -> None:
        self.family = family
        tags: Any = family.tags  # Ray annotates a 1-tuple; any length is taken
        if family.kind == "histogram":
            self._metric: Any = serve_metrics.Histogram(family.name, family.help, list(family.buckets), tags)
        else:
            kind = serve_metrics.Counter if family.kind == "counter" else serve_metrics.Gauge
            self._metric = kind(family.name, family.help, tags)

    def labels(self, *values: str) -> _Series:
        return _Series(self._metric, dict(zip(self.family.tags, values, strict=True)))

    def inc(self, value: float = 1.0) -> None:
        self.labels().inc(value)

    def observe(self, value: float) -> None:
        self.labels().observe(value)

    def set(self, value: float) -> None:
        self.labels().set(value)


class HttpMetrics:
    """The families of a replica's HTTP edge (FAMILIES; docs/metrics.md), recorded through Ray."""

    def __init__(self) -> None:
        m = {name: _Metric(family) for name, family in FAMILIES.items()}
        self.requests = m[PREFIX + "requests"]
        self.duration = m[PREFIX + "request_duration_seconds"]
        self.ttft = m[PREFIX + "ttft_seconds"]
        self.tpot = m[PREFIX + "tpot_seconds"]
        self.output_tokens = m[PREFIX + "output_tokens"]
        self.request_modes = m[PREFIX + "request_modes"]
        self.request_accept_length = m[PREFIX + "request_accept_length"]
        self.streams_windowed = m[PREFIX + "streams_windowed"]
        self.served = m[PREFIX + "served_requests"]
        self.policy_reachable = m[PREFIX + "http_policy_reachable"]
        self.policy_restarts = m[PREFIX + "http_policy_restarts"]

    def observe_report(self, report: Report) -> None:
        """A request answered by this replica (deployments.http.request_report), whether or not its
        response carries the report (serve.request_report)."""
        self.request_modes.labels(report.modes_label).inc()
        if report.modes_label == "on" and report.accept_length is not None:
            self.request_accept_length.observe(report.accept_length)


_METRICS: HttpMetrics | None = None


def http_metrics() -> HttpMetrics:
    """This process's HTTP metrics (one set per process, shared by handlers and middleware)."""
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

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
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


async def _disconnected(receive: Receive, wait_s: float = 0.2) -> bool:
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
    the stream's completion tokens once it has ended (the server's tally: request_report.Tally).
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
