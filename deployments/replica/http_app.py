"""The HTTP app a replica serves itself on the direct data path (`serve.data_path: direct`, the
default).

Ray Serve's direct streaming: HAProxy asks an ingress request router (Ray's `LLMRouter`, picking
through the replica deployment's request router) for a replica, then connects the client to that
replica's own HTTP server, which serves this app. It is the app the ingress deployment serves on
the `ingress` path (`deployments.http.edge`: the raw-body guard, CORS, error bodies, request metrics,
the OpenAPI document) with the same `SpecFlipIngress` handlers (input checks, structured-output
checks, defaults, TTFT/TPOT metrics, control routes), but those handlers run in the replica's
own process and call its `SpecFlipServer` directly (`LocalServerHandle`): no Serve proxy, no
ingress process, no Ray hop per request or per streamed chunk.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from deployments.config import SpecFlipConfig
from deployments.http.edge import bind_endpoints, edge_app
from deployments.http.handlers import SpecFlipIngress
from deployments.ray_compat import to_model_metadata

__all__ = ["LocalServerHandle", "direct_app"]


class _LocalMethod:
    def __init__(self, server: Any, name: str) -> None:
        self._call = getattr(server, name)

    def remote(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        return self._call(*args, **kwargs)  # the server's async generator, in this process


class LocalServerHandle:
    """What `OpenAiIngress` uses of a `DeploymentHandle` to its model's server, served by a server
    object in this process: `handle.options(stream=True, session_id=...)` (routing options: there
    is one server here) and `getattr(handle, "chat" | "completions").remote(body, raw_request_info)`
    iterated as a stream. The ingress's own shape of the call (Ray 2.60's
    `OpenAiIngress._get_response`): every request of tests/deployments/test_serve_app.py goes through it."""

    def __init__(self, server: Any) -> None:
        self._server = server

    def options(self, **_: Any) -> LocalServerHandle:
        return self

    def __getattr__(self, name: str) -> _LocalMethod:
        if name.startswith("_"):
            raise AttributeError(name)
        return _LocalMethod(self._server, name)


def direct_app(server: Any, config: SpecFlipConfig, llm_config: Any) -> Any:
    """The replica's HTTP app: the edge app with the ingress handlers bound to this replica's server."""
    model_id = config.model.id
    handlers = SpecFlipIngress(
        {model_id: LocalServerHandle(server)},
        {model_id: to_model_metadata(model_id, llm_config)},
        config=config,
        replica_id=server.replica_id,
    )
    return bind_endpoints(edge_app(config), handlers)
