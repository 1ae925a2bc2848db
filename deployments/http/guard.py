"""ASGI middleware in front of the OpenAI POST routes of each replica's HTTP app: the raw body must be a
JSON object no larger than `serve.max_body_bytes`, and pass `deployments.http.body`'s checks (strict JSON, the
request's whole cost, the one validation into specflip's request models, prompt sizes against the
model's context). Anything else gets a 400 (413) with the reason before any route sees it, and
before any replica spends anything on it.

A body that passes is handed on as its request model (`deployments.http.openai_models`: nulls as
defaults, integral floats as integers, message content as text) in the request's state: the routes
take that model (`with_checked_body`), so a body is parsed once and validated once, whatever content
type the client sent (curl's default form type, `text/plain`), and never serialized again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, cast

from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import Response

from deployments.config import SpecFlipConfig
from deployments.http.body import Endpoint, Problem, check_request, parse_body
from deployments.http.errors import error_response
from deployments.http.limits import ModelLimits, limits_for
from deployments.http.openai_models import OpenAIRequest
from deployments.http.routes import ENDPOINTS

__all__ = ["MAX_BODY_BYTES", "JsonBodyGuard", "add_guard_and_cors", "checked_request", "with_checked_body"]

MAX_BODY_BYTES = 16 * 1024 * 1024  # without a config; else serve.max_body_bytes
# the routes whose body is checked here, by path: their endpoint name is their handler's
_ENDPOINTS = {route.path: cast(Endpoint, name) for name, route in ENDPOINTS.items() if route.body}
# the validated request's key in the ASGI scope's state (Starlette's request.state)
_STATE_KEY = "specflip_request"

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


class JsonBodyGuard:
    def __init__(
        self,
        app: Callable[[Scope, Receive, Send], Awaitable[None]],
        config: SpecFlipConfig | None = None,
        limits: ModelLimits | None = None,
    ) -> None:
        self.app = app
        self._config = config
        self._limits = limits  # None: read on first use, on the replica's node

    @property
    def limits(self) -> ModelLimits:
        if self._limits is None:
            self._limits = limits_for(self._config)
        return self._limits

    def _check(self, endpoint: Endpoint, body: dict[str, Any]) -> OpenAIRequest | Problem:
        model_id = None if self._config is None else self._config.model.id
        return check_request(endpoint, body, self.limits, model_id=model_id)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        endpoint = None
        if scope["type"] == "http" and scope.get("method") == "POST":
            path = scope.get("path", "")
            endpoint = next((e for route, e in _ENDPOINTS.items() if path.endswith(route)), None)
        if endpoint is None:
            await self.app(scope, receive, send)
            return
        limit = MAX_BODY_BYTES if self._config is None else self._config.serve.max_body_bytes
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                why = f"request body exceeds {limit} bytes (serve.max_body_bytes)"
                await _refuse(Problem(413, why), scope, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        parsed = parse_body(b"".join(chunks))
        del chunks
        checked = parsed if isinstance(parsed, Problem) else self._check(endpoint, parsed)
        if isinstance(checked, Problem):
            await _refuse(checked, scope, receive, send)
            return
        # the routes take the model, never the body: `receive` is left with what comes after it
        await self.app({**scope, "state": {**scope.get("state", {}), _STATE_KEY: checked}}, receive, send)


def checked_request(request: Request) -> OpenAIRequest | None:
    """The request model the guard validated for this request (None where no guard ran)."""
    return request.scope.get("state", {}).get(_STATE_KEY)


def with_checked_body(
    handler: Callable[[Any, Request], Awaitable[Response]], model: type[OpenAIRequest]
) -> Any:
    """A route taking the request alone: the guard's validated request model (of `model`, the type
    `handler` takes) is handed to `handler`: no second JSON parse, no second validation. Only
    behind the guard (`add_guard_and_cors`): a route without one is a fault, not a silent check."""

    async def endpoint(request: Request) -> Response:
        checked = checked_request(request)
        if not isinstance(checked, model):
            raise RuntimeError(f"{request.url.path}: no body guard in front of this route")
        return await handler(checked, request)

    endpoint.__name__ = getattr(handler, "__name__", "endpoint")  # FastAPI's operation id
    endpoint.__doc__ = handler.__doc__
    return endpoint


async def _refuse(problem: Problem, scope: Scope, receive: Receive, send: Send) -> None:
    await error_response(problem.status, problem.message, param=problem.param)(scope, receive, send)


def add_guard_and_cors(app: Any, config: SpecFlipConfig, limits: ModelLimits | None = None) -> None:
    """The body guard, and CORS for the configured origins only, never with credentials (a bearer
    token authenticates, not cookies), on a FastAPI app that has not started. Any CORS middleware
    the app came with (Ray's, SGLang's: any origin, with credentials) is removed first."""
    app.user_middleware[:] = [m for m in app.user_middleware if m.cls is not CORSMiddleware]
    # raw-body checks before the request models see it
    app.add_middleware(JsonBodyGuard, config=config, limits=limits)
    app.add_middleware(
        CORSMiddleware,
        allow_origins=list(config.serve.cors_allow_origins),
        allow_credentials=False,
        allow_methods=["GET", "POST"],
        allow_headers=["Authorization", "Content-Type", "X-Request-Id"],
    )
