"""Structured output over the OpenAI API: which request fields constrain generation, what SGLang
receives for each, and tool calls.

Ray's `SGLangServer` passes SGLang only temperature, top_p, max_tokens and stop; the fields here
would otherwise be dropped with a 200. The replica's API runs `check_structured` (a 400 naming the
field for what cannot be honoured); its server adds `sampling_params(request)` to SGLang's sampling
params, where xgrammar enforces the constraint on every decode step, with speculation ON
(verify) and OFF alike. The table of fields and their behaviour is in docs/structured_output.md.

Tool calls use SGLang's own format for an engine without a tool-call parser: with `tool_choice`
"required" or a named function the output is constrained to a JSON array of
`{"name": ..., "parameters": {...}}` (SGLang's `get_json_schema_constraint`), which
`parse_tool_calls` turns into OpenAI `tool_calls`. "auto" (free text that may hold a call in the
model's own format, found by a model-specific parser) is refused with a 400.

Pure: plain data in and out, no SGLang import (request objects are read by attribute).
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

from deployments.http.limits import explain_context_overflow

__all__ = [
    "calls_tools",
    "check_structured",
    "explain_refusal",
    "parse_tool_calls",
    "sampling_params",
    "template_tools",
    "tool_call",
    "tool_call_message",
    "tool_call_schema",
]


def _tool_choice_name(choice: Any) -> str | None:
    """The function a named tool_choice asks for ("" for a named choice without a name); None otherwise."""
    if choice is None or isinstance(choice, str):
        return None
    function = choice.get("function") if isinstance(choice, dict) else getattr(choice, "function", None)
    name = function.get("name") if isinstance(function, dict) else getattr(function, "name", None)
    return name or ""


def calls_tools(request: Any) -> bool:
    """The request's output is a tool call: tools given and tool_choice "required" or a named function."""
    if not getattr(request, "tools", None):
        return False
    choice = getattr(request, "tool_choice", None)
    return choice == "required" or _tool_choice_name(choice) is not None


def _tools_active(request: Any) -> bool:
    return bool(getattr(request, "tools", None)) and getattr(request, "tool_choice", "none") != "none"


def _response_format_type(request: Any) -> str | None:
    fmt = getattr(request, "response_format", None)
    return None if fmt is None else str(getattr(fmt, "type", None))


def _constraints(request: Any) -> list[str]:
    """The output constraints a request sets, by field name."""
    found = [name for name in ("regex", "ebnf", "json_schema") if getattr(request, name, None) is not None]
    if _response_format_type(request) not in (None, "text"):
        found.append("response_format")
    if _tools_active(request):
        found.append("tools")
    return found


def check_structured(request: Any, *, vocab_size: int | None = None) -> str | None:
    """Reason the request's structured-output fields cannot be honoured (a 400), or None."""
    constraints = _constraints(request)
    if len(constraints) > 1:
        return (
            f"{' and '.join(constraints)} each constrain the output: send one of them per request "
            "(tools count unless tool_choice is 'none')"
        )
    for name in ("regex", "ebnf", "json_schema"):
        value = getattr(request, name, None)
        if value is not None and not value.strip():
            return f"{name} must not be empty"
    json_schema = getattr(request, "json_schema", None)
    if json_schema is not None and not _is_json_object(json_schema):
        return "json_schema must be a JSON schema: a JSON object as a string"
    reason = _check_tools(request)
    if reason:
        return reason
    reason = _check_logit_bias(getattr(request, "logit_bias", None), vocab_size)
    if reason:
        return reason
    return _check_stop_regex(getattr(request, "stop_regex", None))


def _is_json_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


def _check_tools(request: Any) -> str | None:
    """The replica answers a tool call itself, as SGLang's JSON array (`tool_call_schema`): only
    tool_choice "required" or a named function (or "none") can be honoured."""
    tools = getattr(request, "tools", None) or []
    choice = getattr(request, "tool_choice", None)
    named = _tool_choice_name(choice)
    if (choice == "required" or named is not None) and not tools:
        return "tool_choice requires tools: send the functions in tools"
    if named == "":
        return "tool_choice.function.name is required"
    names = [tool.function.name for tool in tools]  # function tools (the request model serves no others)
    if len(set(names)) != len(names):
        return "tools must have unique function names"
    if named is not None and named not in names:
        return f"tool_choice names function {named!r}, which is not in tools {names}"
    if tools and choice in (None, "auto"):  # OpenAI's default with tools is "auto"
        return (
            "tool_choice 'auto' (the default when tools are sent) is not supported: this server does "
            "not parse calls out of free text in the model's own format; send tool_choice 'required' "
            "or {'type': 'function', 'function': {'name': ...}} (the output is then a call), or 'none'"
        )
    return None


def _check_logit_bias(bias: Any, vocab_size: int | None) -> str | None:
    """Token ids within the vocabulary (the request model holds keys to digits, values to [-100, 100])."""
    for key in bias or {}:
        if vocab_size is not None and int(key) >= vocab_size:
            return f"logit_bias token id {key} is outside the vocabulary (size {vocab_size})"
    return None


def _check_stop_regex(stop_regex: Any) -> str | None:
    patterns = [stop_regex] if isinstance(stop_regex, str) else (stop_regex or [])
    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as err:
            return f"stop_regex {pattern!r} is not a valid regular expression: {err}"
    return None


# -- replica side -----------------------------------------------------------------------------
def template_tools(request: Any) -> list[dict[str, Any]] | None:
    """The tools the chat template shows the model, as JSON-schema dicts (what transformers takes):
    none under tool_choice "none", only the named one for a named choice (as SGLang's server does)."""
    tools = getattr(request, "tools", None)
    if not tools or getattr(request, "tool_choice", None) == "none":
        return None
    named = _tool_choice_name(request.tool_choice)
    return [t.model_dump(exclude_none=True) for t in tools if named is None or t.function.name == named]


def explain_refusal(request: Any, message: str) -> tuple[str, str | None]:
    """SGLang's refusal with the request field that carried it, and that field (None where SGLang
    names none): a grammar ("Failed to compile json grammar: ...") with that field in front; a
    request beyond the context restated with the prompt's own token count
    (deployments.http.limits.explain_context_overflow), so the 400 names what the client sent."""
    field = "messages" if getattr(request, "messages", None) is not None else "prompt"
    restated = explain_context_overflow(message, field=field)
    if restated is not None:
        return restated, field
    constraints = _constraints(request)
    if constraints and message.startswith("Failed to compile"):
        return f"{constraints[0]}: {message}", constraints[0]
    return message, None


def sampling_params(request: Any) -> dict[str, Any]:
    """SGLang sampling params for the request's structured-output fields (only those it sets)."""
    params: dict[str, Any] = {}
    for name in ("regex", "ebnf", "json_schema", "stop_regex", "logit_bias"):
        value = getattr(request, name, None)
        if value is not None:
            params[name] = value
    fmt = getattr(request, "response_format", None)
    fmt_type = _response_format_type(request)
    if fmt_type == "json_object":
        params["json_schema"] = '{"type": "object"}'
    elif fmt_type == "json_schema":
        params["json_schema"] = json.dumps(fmt.json_schema.schema_)  # type: ignore[union-attr]
    elif fmt_type == "structural_tag":
        params["structural_tag"] = json.dumps(fmt.model_dump(by_alias=True))  # type: ignore[union-attr]
    if calls_tools(request):
        parallel = getattr(request, "parallel_tool_calls", True)
        params["json_schema"] = json.dumps(tool_call_schema(request.tools, request.tool_choice, parallel))
    return params


def _parameters_schema(tool: Any) -> dict[str, Any]:
    params = tool.function.parameters
    return params if params else {"type": "object", "properties": {}}


def tool_call_schema(tools: Any, tool_choice: Any, parallel: bool = True) -> dict[str, Any]:
    """SGLang's JSON-array tool-call schema (function_call/utils.py `get_json_schema_constraint`)."""
    named = _tool_choice_name(tool_choice)
    chosen = [t for t in tools if named is None or t.function.name == named]
    items = [
        {
            "properties": {
                "name": {"type": "string", "enum": [t.function.name]},
                "parameters": _parameters_schema(t),
            },
            "required": ["name", "parameters"],
        }
        for t in chosen
    ]
    schema: dict[str, Any] = {
        "type": "array",
        "minItems": 1,
        "items": items[0] if named is not None else {"type": "object", "anyOf": items},
    }
    if not parallel:
        schema["maxItems"] = 1
    defs: dict[str, Any] = {}  # $refs in a tool's parameters point at the root
    for t in chosen:
        defs.update(_parameters_schema(t).get("$defs", {}))
    if defs:
        schema["$defs"] = defs
    return schema


def tool_call(name: str, arguments: str) -> dict[str, Any]:
    """One OpenAI tool call: {"id", "type": "function", "function": {"name", "arguments"}}."""
    return {
        "id": f"call_{uuid.uuid4().hex[:24]}",
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }


def parse_tool_calls(text: str) -> list[dict[str, Any]] | None:
    """The calls in a JSON-array tool-call output, or None if it is not one (e.g. cut off at max_tokens)."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if not isinstance(value, list) or not value:
        return None
    calls = []
    for item in value:
        if not (isinstance(item, dict) and isinstance(item.get("name"), str) and "parameters" in item):
            return None
        calls.append(tool_call(item["name"], json.dumps(item["parameters"], ensure_ascii=False)))
    return calls


def tool_call_message(
    text: str, finish_reason: str, calls: list[dict[str, Any]] | None
) -> tuple[dict[str, Any], str]:
    """The assistant message and finish_reason of a tool-call answer. Without parsed calls (the
    output was cut off, e.g. at max_tokens) the text comes back as content, as generated."""
    if calls is None:
        return {"role": "assistant", "content": text}, finish_reason
    return {"role": "assistant", "content": None, "tool_calls": calls}, (
        "tool_calls" if finish_reason == "stop" else finish_reason
    )
