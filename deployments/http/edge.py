"""The HTTP app in front of the OpenAI handlers that every replica serves.

A plain FastAPI app with specflip's error handlers (`deployments.http.errors`), the served routes'
OpenAPI document (`deployments.http.routes`), the raw-body guard and CORS (`deployments.http.guard`),
and the request counter (`deployments.http.metrics`, outermost: it sees the final status of every
response). Nothing of Ray's OpenAI ingress app: a route the app does not serve is a 404 naming
what it serves.

Every replica serves this app itself, its routes bound to an in-process `ReplicaApi` that
calls the replica's server without a Ray hop (`deployments.replica.api`). The chat and
completions routes take the request model the guard validated (`guard.with_checked_body`): one JSON
parse and one validation per request.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from deployments.config import SpecFlipConfig
from deployments.http.errors import install_handlers
from deployments.http.guard import add_guard_and_cors, with_checked_body
from deployments.http.limits import ModelLimits
from deployments.http.metrics import RequestCountMiddleware
from deployments.http.routes import ENDPOINTS, install_openapi

__all__ = ["bind_endpoints", "edge_app"]


def edge_app(config: SpecFlipConfig, limits: ModelLimits | None = None) -> Any:
    """A FastAPI app with specflip's middleware and error handlers, no routes yet. `limits`: the
    model's, read once by the replica (None: the guard reads them on first use)."""
    app = FastAPI(title="specflip", description="OpenAI-compatible API with dynamic EAGLE-3 speculation")
    install_handlers(app)
    install_openapi(app)
    add_guard_and_cors(app, config, limits)
    app.add_middleware(RequestCountMiddleware)  # outermost: sees the final status of every response
    return app


def bind_endpoints(app: Any, handlers: Any) -> Any:
    """Register every served route of `ENDPOINTS` on `app`, handled by the bound methods of
    `handlers` (a `ReplicaApi` living in this process). Returns `app`."""
    for name, route in ENDPOINTS.items():
        handler = getattr(handlers, name)
        route.register(app)(handler if route.body is None else with_checked_body(handler, route.body))
    return app
