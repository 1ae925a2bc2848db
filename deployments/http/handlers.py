"""`SpecFlipIngress`: Ray Serve LLM's `OpenAiIngress` handlers plus request checks, control,
status and metrics, run inside every replica (deployments.replica.http_app binds them to the replica's own
HTTP app and hands them the replica's server in-process).

The OpenAI routes are Ray's (`deployments.http.routes.ENDPOINTS`: those this app serves), plus:

- `GET  /specflip/status`   fleet status from the policy actor (public)
- `POST /specflip/override` force a replica (or `*`) on/off/auto; `Authorization: Bearer <token>`
- `GET  /metrics`           Prometheus text: every replica's HTTP-edge metrics and the policy
                            actor's, from the actor (`deployments.http.control_routes`)

Chat and completions bodies are checked (`deployments.http.validation`, and `deployments.http.structured`
for structured-output fields) before they reach the engine.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any, cast

from fastapi import HTTPException, Request
from ray.serve.llm.ingress import OpenAiIngress
from starlette.responses import JSONResponse, Response, StreamingResponse

from deployments.config import SpecFlipConfig
from deployments.http.control_routes import ControlRoutes
from deployments.http.errors import error_response, fault_response, request_id_of, safe_stream
from deployments.http.guard import checked_body
from deployments.http.metrics import ingress_metrics, observe_stream
from deployments.http.openai_shape import shape_chat_response, shape_completion_response
from deployments.http.request_report import TALLY_SLOT, TallySlot
from deployments.http.routes import ENDPOINTS, NOT_SERVED
from deployments.http.structured import check_structured, misplaced_fields
from deployments.http.validation import check_chat, check_completion
from deployments.ray_compat import (
    ChatCompletionRequest,
    CompletionRequest,
    OpenAIHTTPException,
)
from deployments.routing.journal import SERVED_CLASS
from policy.routing import classify

__all__ = ["ENDPOINTS", "SpecFlipIngress", "context_limit", "error_response", "model_config_int"]

log = logging.getLogger(__name__)

CLASS_HEADER = "x-specflip-class"  # on every response: the request's class (the replica's middleware
# adds x-specflip-replica and x-specflip-mode)


def context_limit(config: SpecFlipConfig) -> int | None:
    """Largest max_tokens worth sending: the configured context length, else the model's own."""
    if config.engine.context_length is not None:
        return config.engine.context_length
    return model_config_int(config, "max_position_embeddings")


def model_config_int(config: SpecFlipConfig, key: str) -> int | None:
    """A positive integer of the model's config.json (e.g. vocab_size), None if absent or unreadable."""
    try:
        with open(f"{config.model.path}/config.json") as f:
            value = json.load(f).get(key)
    except (OSError, ValueError):
        return None  # model not visible from the ingress's node: replicas still answer 400
    return int(value) if isinstance(value, int) and value > 0 else None


class SpecFlipIngress(OpenAiIngress):
    def __init__(
        self,
        llm_deployments: Any,
        model_cards: Any,
        *,
        lora_paths: Any = None,
        config: SpecFlipConfig,
        replica_id: str,
    ) -> None:
        """The handlers of the replica `replica_id`, in its own process (deployments.replica.http_app)."""
        super().__init__(llm_deployments, model_cards, lora_paths=lora_paths)
        self._config = config
        self._class_rule = config.routing.class_rule()
        self._token = config.serve.resolved_token()
        self._limit = context_limit(config)
        self._vocab_size = model_config_int(config, "vocab_size")
        self._metrics = ingress_metrics()
        self._control = ControlRoutes(config, self._metrics, replica_id=replica_id)
        log.info(
            "specflip ingress: policy actor %s, control %s",
            config.policy.actor_name,
            "enabled" if self._token else "disabled (no token)",
        )

    # -- OpenAI routes: checks, then Ray's handling, timed -------------------------------------
    async def chat(self, body: ChatCompletionRequest, request: Request) -> Response:
        self._default_model(body)
        reason = check_chat(body, self._limit) or self._check_structured(body, request, chat=True)
        if reason:
            return error_response(400, reason)
        return await self._timed("/v1/chat/completions", body, request, super().chat)

    async def completions(self, body: CompletionRequest, request: Request) -> Response:
        self._default_model(body)
        reason = check_completion(body, self._limit) or self._check_structured(body, request, chat=False)
        if reason:
            return error_response(400, reason)
        return await self._timed("/v1/completions", body, request, super().completions)

    def _default_model(self, body: Any) -> None:
        """No `model` in the body: the one model this app serves (SGLang's models fill in
        "default", which no app serves)."""
        if "model" not in body.model_fields_set and len(self._model_cards) == 1:
            body.model = next(iter(self._model_cards))

    def _check_structured(self, body: Any, request: Request, *, chat: bool) -> str | None:
        # the checked body too: a field the endpoint's request model does not have is dropped silently
        misplaced = misplaced_fields(checked_body(request) or {}, chat=chat)
        return misplaced or check_structured(body, vocab_size=self._vocab_size)

    async def _timed(self, endpoint: str, body: Any, request: Request, handler: Any) -> Response:
        started = time.monotonic()
        # the class the router and this replica read from the request (header, service_tier, ...):
        # read once here; the server counts by it, the response says it
        request_class = classify(self._class_rule, body, request.headers)
        SERVED_CLASS.set(request_class)  # this request's task, and the stream's task it starts
        slot = TallySlot()  # the server's tally of this request: its token count, for TPOT
        TALLY_SLOT.set(slot)
        try:
            response = await handler(body, request)
        except Exception as err:
            client_error = _client_error(err)
            return client_error if client_error is not None else fault_response(err, request_id_of(request))
        response.headers[CLASS_HEADER] = request_class.value
        if isinstance(response, StreamingResponse):
            observed = observe_stream(
                cast(AsyncIterator[str | bytes], response.body_iterator),
                endpoint,
                started,
                tokens=slot.completion_tokens,
                metrics=self._metrics,
            )
            response.body_iterator = safe_stream(observed, request_id_of(request))
        elif isinstance(response, JSONResponse):
            payload = _json_body(response)  # to shape it as OpenAI's schema has it
            tokens = slot.completion_tokens()
            if tokens is not None:
                self._metrics.output_tokens.labels(endpoint).inc(tokens)
            shape = _SHAPES.get(str(payload.get("object")))
            if response.status_code == 200 and shape is not None:  # OpenAI's response schema
                headers = {k: v for k, v in response.headers.items() if k.lower() != "content-length"}
                return JSONResponse(shape(payload), headers=headers)
        return response

    async def model_data(self, model: str) -> Any:
        try:
            return await super().model_data(model)
        except OpenAIHTTPException as err:
            return error_response(err.status_code, f"model {model[:100]!r} is not served here", err.type)

    # -- Ray routes this app does not serve: 404 with the reason ---------------------------------
    async def embeddings(self, request: Request) -> Response:  # type: ignore[override]
        return _not_served("embeddings")

    async def transcriptions(self, request: Request) -> Response:  # type: ignore[override]
        return _not_served("transcriptions")

    async def score(self, request: Request) -> Response:  # type: ignore[override]
        return _not_served("score")

    async def tokenize(self, request: Request) -> Response:  # type: ignore[override]
        return _not_served("tokenize")

    async def detokenize(self, request: Request) -> Response:  # type: ignore[override]
        return _not_served("detokenize")

    # -- control, status, metrics (shared with the direct data path: deployments.http.control_routes) --
    async def specflip_status(self) -> Response:
        return await self._control.status()

    async def specflip_override(self, request: Request) -> Response:
        return await self._control.override(request)

    async def prometheus_metrics(self) -> Response:
        return await self._control.metrics_text()


# non-streamed answers as OpenAI's schema has them (Ray's models dump nulls it does not allow);
# streamed chunks are built without them (deployments.replica.server)
_SHAPES = {"chat.completion": shape_chat_response, "text_completion": shape_completion_response}


def _not_served(name: str) -> Response:
    path, why = NOT_SERVED[name]
    return error_response(404, f"{path} is not served: {why}")


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
    param = getattr(cause, "param", None)
    message = (str(cause).splitlines() or ["invalid request"])[0][:500]
    return error_response(code, message, param=param if isinstance(param, str) else None)


def _json_body(response: JSONResponse) -> dict[str, Any]:
    try:
        value = json.loads(bytes(response.body))
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
