"""The HTTP app a replica serves itself on the direct data path (`serve.data_path: direct`).

SGLang's own OpenAI routes on the replica's engine (patched_worker.http_app), the models route
Ray's ingress would serve, specflip's `/specflip/*` and `/metrics` (deployments.control_routes),
and a guard in front of chat and completions for the structured-output fields SGLang's server
would drop or answer with a 200 anyway: a field the endpoint does not have, tools without a
tool-call parser (the call comes back as text), a grammar that does not compile (streamed, SGLang
sends the error inside a 200 stream). Everything else structured is SGLang's own handling; the
differences from the ingress path are listed in docs/structured_output.md.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from deployments import structured
from deployments.config import SpecFlipConfig
from deployments.control_routes import ControlRoutes
from deployments.guard import BodyCheck, JsonBodyGuard
from deployments.ingress import model_config_int
from deployments.ray_compat import ChatCompletionRequest, CompletionRequest, add_models_retrieve_route

__all__ = ["grammar_problem", "replica_app", "structured_check"]

_CHAT = "/v1/chat/completions"
_XGRAMMAR_PREFIX = re.compile(r"^\[[^\]]*\]\s*\S+:\d+:\s*")  # "[12:00:00] /project/cpp/x.cc:75: "


def replica_app(engine: Any, llm_config: Any, config: SpecFlipConfig) -> Any:
    """The FastAPI app of one direct-path replica (one per process: SGLang's app is a module global)."""
    from patched_worker.http_app import native_openai_app

    app = native_openai_app(engine)
    add_models_retrieve_route(app, llm_config)
    ControlRoutes(config).add_to(app)
    app.add_middleware(JsonBodyGuard, check=structured_check(config))
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
