"""The OpenAI API a replica serves itself, behind Serve's HAProxy (direct streaming: HAProxy asks
Ray's ingress request router for a replica, then connects the client to that replica's own HTTP
server, which serves this app; no Serve proxy, no ingress process, no Ray hop per request or per
streamed chunk).

A request's way: the edge app (deployments.http.edge: the raw-body guard's one parse and checks,
CORS, error bodies, the request counter) -> these handlers (the request's remaining checks, its
class read once, its tally and engine request ids made here) -> the server's `generate`, called
in-process with all of them as arguments -> the engine. The answer is built here from what the
server yields: a JSON response from its dict, or an SSE stream of its chunks (timed for TTFT and
TPOT, ended with `[DONE]`, an error event on a failure mid-stream). A client that goes away
(a stream it closed, an answer it stopped waiting for) has its engine requests aborted at once.

Routes (`deployments.http.routes.ENDPOINTS`): `/v1/chat/completions`, `/v1/completions`,
`/v1/models`, `/v1/models/{model}`; `/specflip/status`, `/specflip/override` (bearer token) and
`/metrics` (deployments.http.control_routes); any other path answers 404 naming these.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from fastapi import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from deployments.config import SpecFlipConfig
from deployments.http.control_routes import ControlRoutes
from deployments.http.edge import bind_endpoints, edge_app
from deployments.http.errors import error_response, fault_response, request_id_of, safe_stream
from deployments.http.metrics import http_metrics, observe_stream
from deployments.http.openai_models import ChatCompletionRequest, CompletionRequest, OpenAIRequest
from deployments.http.structured import check_structured
from deployments.ray_compat import to_model_metadata
from policy.routing import classify

__all__ = ["CLASS_HEADER", "ReplicaApi", "replica_app"]

log = logging.getLogger(__name__)

CLASS_HEADER = "x-specflip-class"  # on every answer: the request's class (the replica's envelope
# adds x-specflip-replica and x-specflip-mode)


def replica_app(server: Any, config: SpecFlipConfig, llm_config: Any) -> Any:
    """The replica's HTTP app: the edge app with this module's handlers bound to `server`."""
    return bind_endpoints(edge_app(config, server.limits), ReplicaApi(server, config, llm_config))


class ReplicaApi:
    """The handlers of one replica, calling its server (deployments.replica.server) in-process."""

    def __init__(self, server: Any, config: SpecFlipConfig, llm_config: Any) -> None:
        self._server = server
        self._model_id = config.model.id
        self._card = to_model_metadata(self._model_id, llm_config)
        self._class_rule = config.routing.class_rule()
        self._vocab_size = server.limits.vocab_size
        self._metrics = http_metrics()
        self._control = ControlRoutes(config, self._metrics, replica_id=server.replica_id)

    # -- generation ----------------------------------------------------------------------------
    async def chat(self, body: ChatCompletionRequest, request: Request) -> Response:
        return await self._answer("chat", "/v1/chat/completions", body, request)

    async def completions(self, body: CompletionRequest, request: Request) -> Response:
        return await self._answer("completions", "/v1/completions", body, request)

    async def _answer(self, endpoint: str, path: str, body: OpenAIRequest, request: Request) -> Response:
        reason = check_structured(body, vocab_size=self._vocab_size)
        if reason:
            return error_response(400, reason)
        started = time.monotonic()
        if body.model != self._model_id:  # the body guard made it required
            why = f"model {body.model[:100]!r} is not served here: this app serves {self._model_id!r}"
            return error_response(404, why, "NotFoundError", param="model")
        # the class the router and this replica read from the request (header, service_tier, ...)
        request_class = classify(self._class_rule, body, request.headers)
        tally = self._server.new_tally()  # this request's counts: its tokens, for TPOT
        rids: list[str] = []  # its engine requests, to abort if the client goes away
        items = self._server.generate(endpoint, body, request_class=request_class, tally=tally, rids=rids)
        try:
            first = await anext(items)
        except BaseException as err:  # a refusal, a fault, or the client gone (cancelled)
            self._server.abort(rids)
            if not isinstance(err, Exception):
                raise
            return _client_error(err) or fault_response(err, request_id_of(request))
        headers = {CLASS_HEADER: request_class.value}
        if isinstance(first, dict):  # not streamed: the whole answer
            await items.aclose()
            if tally.completion_tokens:
                self._metrics.output_tokens.labels(path).inc(tally.completion_tokens)
            return JSONResponse(first, headers=headers)
        observed = observe_stream(
            _packets(first, items),
            path,
            started,
            tokens=lambda: tally.completion_tokens or None,
            metrics=self._metrics,
        )
        return _Stream(
            safe_stream(observed, request_id_of(request)),
            on_cut=lambda: self._server.abort(rids),
            headers=headers,
            media_type="text/event-stream",
        )

    # -- models ----------------------------------------------------------------------------------
    async def models(self) -> Any:
        return {"object": "list", "data": [self._card]}

    async def model_data(self, model: str) -> Any:
        if model.replace("--", "/") == self._model_id:  # `--` stands for `/` in a path segment
            return self._card
        return error_response(404, f"model {model[:100]!r} is not served here", "InvalidModel")

    # -- control, status, metrics (deployments.http.control_routes) ------------------------------
    async def specflip_status(self) -> Response:
        return await self._control.status()

    async def specflip_override(self, request: Request) -> Response:
        return await self._control.override(request)

    async def prometheus_metrics(self) -> Response:
        return await self._control.metrics_text()


async def _packets(first: Any, items: AsyncGenerator[Any, None]) -> AsyncIterator[str]:
    """The stream's SSE text: one write per chunk, or per list of chunks (coalesced)."""
    yield "".join(first) if isinstance(first, list) else first
    async for item in items:
        yield "".join(item) if isinstance(item, list) else item


class _Stream(StreamingResponse):
    """An SSE response that calls `on_cut` when it ends before its last byte (the client went away:
    Starlette stops sending and leaves the stream's generators suspended, their engine requests
    still running, until the garbage collector closes them)."""

    def __init__(self, content: AsyncIterator[str], *, on_cut: Any, **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self._on_cut = on_cut

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        finished = False

        async def watched(message: Any) -> None:
            nonlocal finished
            await send(message)
            finished = finished or (message["type"] == "http.response.body" and not message.get("more_body"))

        try:
            await super().__call__(scope, receive, watched)
        finally:
            if not finished:
                self._on_cut()


def _client_error(err: Exception) -> JSONResponse | None:
    """A clean 4xx for a client error the server raised (EngineInputError, PromptTooLarge,
    PromptTooLong: each has a status_code and may name its param); None otherwise."""
    code = getattr(err, "status_code", None)
    if not isinstance(code, int) or not 400 <= code < 500:
        return None
    param = getattr(err, "param", None)
    message = (str(err).splitlines() or ["invalid request"])[0][:500]
    return error_response(code, message, param=param if isinstance(param, str) else None)
