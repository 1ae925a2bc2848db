"""The outermost layer of a replica's HTTP app (deployments.replica.server adds it): what every response
of the replica says about it, and the drain refusal."""

from __future__ import annotations

from typing import Any, Protocol

from deployments.http.errors import error_response

__all__ = ["DRAIN_RETRY_AFTER_S", "EdgeServer", "ReplicaEdge"]


class EdgeServer(Protocol):
    """What the edge needs of deployments.replica.server.SpecFlipServer."""

    replica_id: str

    def current_mode(self) -> str: ...

    def draining(self) -> bool: ...


_GENERATING = ("/v1/chat/completions", "/v1/completions")  # what a draining replica refuses
DRAIN_RETRY_AFTER_S = 5


class ReplicaEdge:
    """Every response says which replica answered and the mode it ran; while the app drains (it is
    shutting down, deployments.local) new generation requests get an OpenAI-shaped 503 with
    Retry-After while the streams in flight finish."""

    def __init__(self, app: Any, server: EdgeServer) -> None:
        self.app, self.server = app, server

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers.append((b"x-specflip-replica", self.server.replica_id.encode()))
                headers.append((b"x-specflip-mode", self.server.current_mode().encode()))
                message = {**message, "headers": headers}
            await send(message)

        if self.server.draining() and scope.get("path", "").endswith(_GENERATING):
            refusal = error_response(
                503,
                "this app is shutting down: retry after Retry-After seconds",
                headers={"Retry-After": str(DRAIN_RETRY_AFTER_S)},
            )
            await refusal(scope, receive, send_with_headers)
            return
        await self.app(scope, receive, send_with_headers)
