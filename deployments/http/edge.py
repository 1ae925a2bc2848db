"""The HTTP app in front of the OpenAI handlers that every replica serves.

Ray Serve LLM's own FastAPI app (`ray_compat.openai_fastapi_app`, what `make_fastapi_ingress`
builds) with Ray's CORS and exception middleware replaced by specflip's: the error handlers
(`deployments.http.errors`), the served routes' OpenAPI document (`deployments.http.routes`), the raw-body
guard and CORS (`deployments.http.guard`), and the request counter (`deployments.http.metrics`, outermost:
it sees the final status of every response).

Every replica serves this app itself, its routes bound to an in-process `ReplicaApi` that
calls the replica's server without a Ray hop (`deployments.replica.api`). The chat and
completions routes take the request model the guard validated (`guard.with_checked_body`): one JSON
parse and one validation per request.
"""

from __future__ import annotations

from typing import Any

from deployments.config import SpecFlipConfig
from deployments.http.errors import install_handlers
from deployments.http.guard import add_guard_and_cors, with_checked_body
from deployments.http.limits import ModelLimits
from deployments.http.metrics import RequestCountMiddleware
from deployments.http.openai_models import ChatCompletionRequest, CompletionRequest, OpenAIRequest
from deployments.http.routes import ENDPOINTS, install_openapi
from deployments.ray_compat import openai_fastapi_app, strip_ray_error_and_cors_middleware

__all__ = ["bind_endpoints", "edge_app"]


def edge_app(config: SpecFlipConfig, limits: ModelLimits | None = None) -> Any:
    """A FastAPI app with specflip's middleware and error handlers, no routes yet. `limits`: the
    model's, read once by the replica (None: the guard reads them on first use)."""
    app = openai_fastapi_app()  # Ray's FastAPI app with its middleware
    strip_ray_error_and_cors_middleware(app)  # replaced: errors.install_handlers, CORS below
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
        model = _BODY_MODELS.get(name)
        route(app)(handler if model is None else with_checked_body(handler, model))
    return app


# the routes whose body the guard checks, and the request model each handler takes
_BODY_MODELS: dict[str, type[OpenAIRequest]] = {
    "chat": ChatCompletionRequest,
    "completions": CompletionRequest,
}
