"""The HTTP app a replica serves itself on the direct data path (`serve.data_path: direct`).

SGLang's own OpenAI server app (patched_worker.http_app) on the replica's engine, cut down to
what the app serves and guarded as the ingress is:

- only the OpenAI chat and completions routes, the model routes, SGLang's health routes and the
  OpenAPI document stay; SGLang's other routes (weight updates, memory release, profiling,
  pausing, aborting, logging set-up, sessions, LoRA loading, ...) are administrative, have no
  authentication, and are removed;
- the same raw-body checks as the ingress (deployments.guard: strict JSON, messages, prompt sizes
  against the context, fields SGLang would crash on), so an oversized prompt never reaches
  SGLang's tokenizer, which tokenizes on the replica's event loop;
- CORS for the configured origins only, without credentials (SGLang's allows any origin, with
  credentials);
- specflip's /specflip/status, /specflip/override and /metrics (deployments.control_routes).

What the direct path does NOT share with the ingress (docs/architecture.md): everything past the
body checks is SGLang's own handling, so its error bodies are SGLang's shape and its 5xx carry
SGLang's messages; seed, min_tokens, token-id prompts and tools behave as SGLang's server defines
them; there are no ingress metrics, stream coalescing or graceful stream drain.
"""

from __future__ import annotations

from typing import Any

from deployments.config import SpecFlipConfig
from deployments.control_routes import ControlRoutes
from deployments.guard import add_guard_and_cors
from deployments.ray_compat import add_models_retrieve_route

__all__ = ["DIRECT_ROUTES", "direct_app", "restrict_and_guard"]

# SGLang's routes a direct-path replica keeps (FastAPI path templates)
DIRECT_ROUTES = frozenset(
    {
        "/v1/chat/completions",
        "/v1/completions",
        "/v1/models",
        "/v1/models/{model:path}",
        "/health",
        "/health_generate",
        "/openapi.json",
    }
)


def restrict_and_guard(app: Any, config: SpecFlipConfig) -> None:
    """Keep only `DIRECT_ROUTES` of a not yet started FastAPI app; add the body guard and CORS."""
    app.router.routes[:] = [r for r in app.router.routes if getattr(r, "path", None) in DIRECT_ROUTES]
    app.openapi_schema = None  # rebuilt from the routes left
    add_guard_and_cors(app, config)


def direct_app(engine: Any, config: SpecFlipConfig, llm_config: Any) -> Any:
    """The replica's whole HTTP app on the direct data path."""
    from patched_worker.http_app import native_openai_app

    app = native_openai_app(engine)
    restrict_and_guard(app, config)
    add_models_retrieve_route(app, llm_config)
    ControlRoutes(config).add_to(app)
    return app
