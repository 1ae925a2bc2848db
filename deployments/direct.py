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

Structured output: after the shared checks, `structured_check` refuses what SGLang's server would
drop or answer with a 200 anyway (a field the endpoint does not have, tools without a tool-call
parser, a grammar that does not compile); the rest is SGLang's own handling
(docs/structured_output.md lists the differences from the ingress path).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from deployments import structured
from deployments.config import SpecFlipConfig
from deployments.control_routes import ControlRoutes
from deployments.guard import BodyCheck, add_guard_and_cors
from deployments.ingress import model_config_int
from deployments.ray_compat import ChatCompletionRequest, CompletionRequest, add_models_retrieve_route

__all__ = ["DIRECT_ROUTES", "direct_app", "grammar_problem", "restrict_and_guard", "structured_check"]

_CHAT = "/v1/chat/completions"
_XGRAMMAR_PREFIX = re.compile(r"^\[[^\]]*\]\s*\S+:\d+:\s*")  # "[12:00:00] /project/cpp/x.cc:75: "

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


def restrict_and_guard(app: Any, config: SpecFlipConfig, extra_check: BodyCheck | None = None) -> None:
    """Keep only `DIRECT_ROUTES` of a not yet started FastAPI app; add the body guard and CORS."""
    app.router.routes[:] = [r for r in app.router.routes if getattr(r, "path", None) in DIRECT_ROUTES]
    app.openapi_schema = None  # rebuilt from the routes left
    add_guard_and_cors(app, config, extra_check)


def direct_app(engine: Any, config: SpecFlipConfig, llm_config: Any) -> Any:
    """The replica's whole HTTP app on the direct data path (one per process: SGLang's app is a
    module global)."""
    from patched_worker.http_app import native_openai_app

    app = native_openai_app(engine)
    restrict_and_guard(app, config, structured_check(config))
    add_models_retrieve_route(app, llm_config)
    ControlRoutes(config).add_to(app)
    return app


def structured_check(config: SpecFlipConfig) -> BodyCheck:
    """The guard's check: the ingress's structured-output checks (deployments.structured) on the raw
    body, with tool calls as SGLang's server makes them, plus a grammar compile. Bodies without a
    structured-output field cost one substring scan."""
    vocab_size = model_config_int(config, "vocab_size")
    tool_calls = (
        structured.ToolCalls.SGLANG_PARSER
        if config.engine.extra.get("tool_call_parser")
        else structured.ToolCalls.NONE
    )

    def check(path: str, raw: bytes) -> str | None:
        if not structured.carries_structured_fields(raw):
            return None
        chat = path.endswith(_CHAT)
        misplaced = structured.misplaced_fields(raw, chat=chat)
        if misplaced:
            return misplaced
        try:
            request = (ChatCompletionRequest if chat else CompletionRequest).model_validate_json(raw)
        except ValidationError:
            return None  # SGLang's own request model answers
        reason = structured.check_structured(request, vocab_size=vocab_size, tool_calls=tool_calls)
        return reason or grammar_problem(request)

    return check


def grammar_problem(request: Any) -> str | None:
    """Why xgrammar (SGLang's grammar backend) cannot parse the request's grammar, naming the field
    that carried it; None if it parses. Tokenizer-independent: a parse, not SGLang's full compile."""
    import xgrammar

    builders: dict[str, Callable[[str], Any]] = {
        "regex": xgrammar.Grammar.from_regex,
        "ebnf": xgrammar.Grammar.from_ebnf,
        "json_schema": xgrammar.Grammar.from_json_schema,
    }
    for key, value in structured.sampling_params(request).items():
        build = builders.get(key)
        if build is None:
            continue
        try:
            build(value)
        except Exception as err:  # xgrammar raises RuntimeError with its parser's message
            kind = "json" if key == "json_schema" else key
            detail = _XGRAMMAR_PREFIX.sub("", str(err).strip().splitlines()[0] if str(err).strip() else "")
            return structured.explain_refusal(request, f"Failed to compile {kind} grammar: {detail}")[:500]
    return None
