"""`SpecFlipIngress`: Ray Serve LLM's `OpenAiIngress` plus request checks, control, status, metrics.

The OpenAI routes are Ray's (`DEFAULT_ENDPOINTS`); `ENDPOINTS` adds ours through the supported
`make_fastapi_ingress(cls, endpoint_map=...)`:

- `GET  /specflip/status`   fleet status from the policy actor (public)
- `POST /specflip/override` force a replica (or `*`) on/off/auto; `Authorization: Bearer <token>`
- `GET  /metrics`           Prometheus text: the ingress's registry, then the policy actor's

The ingress creates the named policy actor (it owns it: the actor lives as long as the app).
Chat and completions bodies are checked (`deployments.validation`) before they reach a replica.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any, cast, get_args

from fastapi import HTTPException, Request
from ray.serve.llm.ingress import OpenAiIngress
from starlette.responses import JSONResponse, Response, StreamingResponse

from deployments.config import SpecFlipConfig
from deployments.control_routes import ControlRoutes, error_response
from deployments.metrics import ingress_metrics, observe_stream, usage_tokens
from deployments.ray_compat import (
    DEFAULT_ENDPOINTS,
    ChatCompletionRequest,
    CompletionRequest,
    OpenAIHTTPException,
    current_internal_request_id,
)
from deployments.routing_journal import JOURNAL
from deployments.validation import check_chat, check_completion

__all__ = ["ENDPOINTS", "SpecFlipIngress", "context_limit", "error_response"]

log = logging.getLogger(__name__)

ENDPOINTS = {
    **DEFAULT_ENDPOINTS,
    "specflip_status": lambda app: app.get("/specflip/status"),
    "specflip_override": lambda app: app.post("/specflip/override"),
    "prometheus_metrics": lambda app: app.get("/metrics"),
}


def context_limit(config: SpecFlipConfig) -> int | None:
    """Largest max_tokens worth sending: the configured context length, else the model's own."""
    if config.engine.context_length is not None:
        return config.engine.context_length
    try:
        with open(f"{config.model.path}/config.json") as f:
            value = json.load(f).get("max_position_embeddings")
    except (OSError, ValueError):
        return None  # model not visible from the ingress's node: replicas still answer 400
    return int(value) if isinstance(value, int) and value > 0 else None


class SpecFlipIngress(OpenAiIngress):
    def __init__(
        self, llm_deployments: Any, model_cards: Any, *, lora_paths: Any = None, config: SpecFlipConfig
    ) -> None:
        super().__init__(llm_deployments, model_cards, lora_paths=lora_paths)
        self._config = config
        self._token = config.serve.resolved_token()
        self._limit = context_limit(config)
        self._metrics = ingress_metrics()
        self._control = ControlRoutes(config, self._metrics)
        log.info(
            "specflip ingress: policy actor %s, control %s",
            config.policy.actor_name,
            "enabled" if self._token else "disabled (no token)",
        )

    # -- OpenAI routes: checks, then Ray's handling, timed -------------------------------------
    async def chat(self, body: ChatCompletionRequest, request: Request) -> Response:
        reason = check_chat(body, self._limit)
        if reason:
            return error_response(400, reason)
        return await self._timed("/v1/chat/completions", body, super().chat(body, request))

    async def completions(self, body: CompletionRequest, request: Request) -> Response:
        reason = check_completion(body, self._limit)
        if reason:
            return error_response(400, reason)
        return await self._timed("/v1/completions", body, super().completions(body, request))

    async def _timed(self, endpoint: str, body: Any, respond: Any) -> Response:
        started = time.monotonic()
        keep_usage = True
        if body.stream:  # ask the replica for a usage chunk: TPOT needs the token count
            options = body.stream_options
            keep_usage = bool(options is not None and options.include_usage)
            if not keep_usage:
                body.stream_options = _stream_options_with_usage(body)
        try:
            response = await respond
        except Exception as err:
            client_error = _client_error(err)
            if client_error is None:
                raise  # Ray's exception middleware answers (5xx)
            return client_error
        _add_routing_headers(response)
        if isinstance(response, StreamingResponse):
            response.body_iterator = observe_stream(
                cast(AsyncIterator[str | bytes], response.body_iterator),
                endpoint,
                started,
                keep_usage=keep_usage,
                metrics=self._metrics,
            )
        elif isinstance(response, JSONResponse):
            tokens = usage_tokens(_json_body(response))
            if tokens is not None:
                self._metrics.output_tokens.labels(endpoint).inc(tokens)
        return response

    # -- control, status, metrics (shared with the direct data path: deployments.control_routes) --
    async def specflip_status(self) -> Response:
        return await self._control.status()

    async def specflip_override(self, request: Request) -> Response:
        return await self._control.override(request)

    async def prometheus_metrics(self) -> Response:
        return await self._control.metrics_text()


ROUTING_HEADERS = ("x-specflip-replica", "x-specflip-mode", "x-specflip-class")


def _add_routing_headers(response: Response) -> None:
    """Where this request's handle call was routed (the router wrote it before the replica's first
    chunk reached here): replica id, its mode when routed, the request's class."""
    request_id = current_internal_request_id()
    routed = JOURNAL.pop(request_id) if request_id else None
    if routed is not None:
        replica, mode, cls = ROUTING_HEADERS
        response.headers[replica] = routed.replica_id
        response.headers[mode] = routed.mode
        response.headers[cls] = routed.request_class.value


def _client_error(err: Exception) -> JSONResponse | None:
    """A clean 4xx for a client error raised here or in a replica (Ray wraps those); None otherwise."""
    code = getattr(err, "status_code", None)
    if not isinstance(code, int) or not 400 <= code < 500:
        return None
    if isinstance(err, HTTPException):
        return error_response(code, str(err.detail), "NotFoundError" if code == 404 else "BadRequestError")
    if isinstance(err, OpenAIHTTPException):
        return error_response(code, err.message, err.type)
    cause = getattr(err, "cause", None) or err  # RayTaskError(EngineInputError) from a replica
    return error_response(code, (str(cause).splitlines() or ["invalid request"])[0][:500])


def _stream_options_with_usage(body: Any) -> Any:
    field = type(body).model_fields["stream_options"]
    options_cls = next(a for a in get_args(field.annotation) if a is not type(None))
    return options_cls(include_usage=True)


def _json_body(response: JSONResponse) -> dict[str, Any]:
    try:
        value = json.loads(bytes(response.body))
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
