"""ASGI middleware in front of the OpenAI POST routes: the raw body must pass a check (by default
`validation.check_json_body`: a JSON object with JSON-typed numbers) and not be larger than a
limit. Anything else gets a 400 (413) with the reason before FastAPI and the request models see
it. The direct data path's replicas pass their own check (deployments.direct)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from starlette.responses import JSONResponse

from deployments.validation import check_json_body

__all__ = ["MAX_BODY_BYTES", "BodyCheck", "JsonBodyGuard"]

MAX_BODY_BYTES = 32 * 1024 * 1024
_GUARDED = ("/v1/chat/completions", "/v1/completions")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
BodyCheck = Callable[[str, bytes], str | None]  # (path, raw body) -> why it is refused, or None


def _json_body(path: str, body: bytes) -> str | None:
    return check_json_body(body)


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse(
        {"error": {"message": message, "type": "BadRequestError", "param": None, "code": status}},
        status_code=status,
    )


class JsonBodyGuard:
    def __init__(
        self, app: Callable[[Scope, Receive, Send], Awaitable[None]], check: BodyCheck = _json_body
    ) -> None:
        self.app, self.check = app, check

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope.get("method") != "POST"
            or not scope.get("path", "").endswith(_GUARDED)
        ):
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                await _error(413, f"request body exceeds {MAX_BODY_BYTES} bytes")(scope, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        reason = self.check(scope["path"], body)
        if reason is not None:
            await _error(400, reason)(scope, receive, send)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)
