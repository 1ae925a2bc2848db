"""The outermost layer of a replica's HTTP app (deployments.replica.server adds it): what every response
of the replica says about it, the drain refusal, and the abort of what a client stopped reading.

The engine requests of one HTTP request are known by the ids the server gives them
(`request_rids()`, a list per HTTP request in a context variable: the tasks a handler starts, such
as a stream's reader, see the same list)."""

from __future__ import annotations

import contextvars
from typing import Any, Protocol

from deployments.http.errors import error_response

__all__ = ["DRAIN_RETRY_AFTER_S", "EdgeServer", "ReplicaEdge", "request_rids"]


class EdgeServer(Protocol):
    """What the edge needs of deployments.replica.server.SpecFlipServer."""

    replica_id: str

    def current_mode(self) -> str: ...

    def draining(self) -> bool: ...

    def abort(self, rids: list[str]) -> None: ...


# the engine request ids of the HTTP request being served (a list per request, shared by the tasks
# its handler starts: a stream's reader task copies the context): what ReplicaEdge aborts
_REQUEST_RIDS: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar(
    "specflip_rids", default=None
)


_GENERATING = ("/v1/chat/completions", "/v1/completions")  # what a draining replica refuses
DRAIN_RETRY_AFTER_S = 5


class ReplicaEdge:
    """Every response says which replica answered and the mode it ran; while the app drains (it is
    shutting down, deployments.local) new generation requests get an OpenAI-shaped 503 with
    Retry-After while the streams in flight finish; a response the client cut (it went away
    mid-stream: Starlette stops sending and leaves the stream's generators suspended, their reader
    task still pulling tokens) aborts its engine requests here, at once, instead of when the
    garbage collector closes those generators."""

    def __init__(self, app: Any, server: EdgeServer) -> None:
        self.app, self.server = app, server

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rids: list[str] = []
        finished = False

        async def send_with_headers(message: Any) -> None:
            nonlocal finished
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers.append((b"x-specflip-replica", self.server.replica_id.encode()))
                headers.append((b"x-specflip-mode", self.server.current_mode().encode()))
                message = {**message, "headers": headers}
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                finished = True
            await send(message)

        if self.server.draining() and scope.get("path", "").endswith(_GENERATING):
            refusal = error_response(
                503,
                "this app is shutting down: retry after Retry-After seconds",
                headers={"Retry-After": str(DRAIN_RETRY_AFTER_S)},
            )
            await refusal(scope, receive, send_with_headers)
            return
        token = _REQUEST_RIDS.set(rids)
        try:
            await self.app(scope, receive, send_with_headers)
        finally:
            _REQUEST_RIDS.reset(token)
            if rids and not finished:
                self.server.abort(rids)


def request_rids() -> list[str] | None:
    """The engine request ids of the HTTP request being served (None outside one): the server
    appends the ids it gives the engine, the edge aborts them if the client went away."""
    return _REQUEST_RIDS.get()
