"""ASGI middleware in front of the OpenAI POST routes, on every data path: the raw body must be a
JSON object no larger than `serve.max_body_bytes`, and pass `deployments.http.body`'s checks (strict JSON, the
request's whole cost, OpenAI's request schema as this app serves it, prompt sizes against the
model's context). Anything else gets a 400 (413) with the reason before FastAPI and the request
models see it, and before any replica spends anything on it.

A body that passes is handed on normalized (nulls as defaults, integral floats as integers,
message content as text: `deployments.http.openai_request`), as `application/json` whatever content
type the client sent (curl's default form type, `text/plain`): the route reads JSON either way.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from starlette.middleware.cors import CORSMiddleware

from deployments.config import SpecFlipConfig
from deployments.http.body import Endpoint, Problem, check_body, parse_body
from deployments.http.errors import error_response
from deployments.http.limits import ModelLimits, limits_for

__all__ = ["MAX_BODY_BYTES", "BodyCheck", "JsonBodyGuard", "add_guard_and_cors"]

MAX_BODY_BYTES = 16 * 1024 * 1024  # without a config; else serve.max_body_bytes
_ENDPOINTS: dict[str, Endpoint] = {"/v1/chat/completions": "chat", "/v1/completions": "completions"}

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
BodyCheck = Callable[[str, bytes], str | None]  # (path, raw body) -> why it is refused (a 400), or None


class JsonBodyGuard:
    def __init__(
        self,
        app: Callable[[Scope, Receive, Send], Awaitable[None]],
        config: SpecFlipConfig | None = None,
        extra_check: BodyCheck | None = None,
    ) -> None:
        self.app = app
        self._config = config
        self._extra = extra_check  # after the shared checks (the direct path's structured-output check)
        self._limits: ModelLimits | None = None  # read on first use, on the ingress's node

    @property
    def limits(self) -> ModelLimits:
        if self._limits is None:
            self._limits = limits_for(self._config)
        return self._limits

    def _check(self, endpoint: Endpoint, body: dict[str, Any]) -> dict[str, Any] | Problem:
        config = self._config
        return check_body(
            endpoint,
            body,
            self.limits,
            model_id=None if config is None else config.model.id,
        )

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
        body = json.dumps(checked, ensure_ascii=False).encode("utf-8")
        if self._extra is not None:
            reason = self._extra(scope.get("path", ""), body)
            if reason is not None:
                await _refuse(Problem(400, reason), scope, receive, send)
                return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        headers = [(k, v) for k, v in scope.get("headers", []) if k.lower() != b"content-type"]
        scope = {**scope, "headers": [*headers, (b"content-type", b"application/json")]}
        await self.app(scope, replay, send)


async def _refuse(problem: Problem, scope: Scope, receive: Receive, send: Send) -> None:
    await error_response(problem.status, problem.message, param=problem.param)(scope, receive, send)


def add_guard_and_cors(app: Any, config: SpecFlipConfig, extra_check: BodyCheck | None = None) -> None:
    """The body guard, and CORS for the configured origins only, never with credentials (a bearer
    token authenticates, not cookies), on a FastAPI app that has not started. Any CORS middleware
    the app came with (Ray's, SGLang's: any origin, with credentials) is removed first."""
    app.user_middleware[:] = [m for m in app.user_middleware if m.cls is not CORSMiddleware]
    app.add_middleware(
        JsonBodyGuard, config=config, extra_check=extra_check
    )  # raw-body checks before the request models parse it
    app.add_middleware(
        CORSMiddleware,
        allow_origins=list(config.serve.cors_allow_origins),
        allow_credentials=False,
        allow_methods=["GET", "POST"],
        allow_headers=["Authorization", "Content-Type", "X-Request-Id"],
    )
