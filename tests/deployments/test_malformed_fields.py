"""Malformed values of any discriminator or enum field are a 4xx naming the field, never a 500
(`"tool_choice": {"type": {}}` was a 500, "unhashable type: 'dict'", and the same for
every tagged union: message roles, content part, tool, tool choice and response format types).

Every field whose schema is a fixed set of values (an `enum` or a `const`: the tags that tell
messages, content parts, tools, tool choices and response formats apart, and the enum fields) has
a place below: a valid body with that field in it. Hypothesis puts objects, arrays, numbers,
booleans, nulls and strings outside the set there, and the body check (`check_request`, the guard's
whole check, run directly: no app) must answer a 4xx whose `param` is that field or a field inside
it (a null is the default where OpenAI's schema makes the field nullable). The places are checked
against the app's own request schema (what /openapi.json serves), so a new enum field without a
place fails here. Places the app refuses by design (image parts, allowed_tools, ...) are listed
too: a malformed value must be blamed on the field, not on the design refusal. The same through
the real app: test_api_inputs.py ("wrongly typed fields").
"""

from __future__ import annotations

import copy
import dataclasses
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from deployments.http.body import Problem
from deployments.http.limits import ModelLimits
from deployments.http.routes import REQUEST_BODIES, request_schema
from tests.deployments.bodies import check_body

USER = [{"role": "user", "content": "hi"}]
TOOLS = [{"type": "function", "function": {"name": "f"}}]
CHAT, TEXT = "/v1/chat/completions", "/v1/completions"
ENDPOINTS = {CHAT: "chat", TEXT: "completions"}


@dataclasses.dataclass(frozen=True)
class Place:
    route: str
    body: dict[str, Any]  # a valid body holding the field
    path: str  # where the field is, as the error's `param` names it
    allowed: tuple[Any, ...]  # values OpenAI's schema takes there (not generated)
    nullable: bool = False  # a null is the default

    @property
    def schema_path(self) -> str:
        return re.sub(r"\[\d+\]", "[]", self.path)


def _chat(path: str, allowed: tuple[Any, ...], nullable: bool = False, **body: Any) -> Place:
    return Place(CHAT, {"model": "m", "messages": USER, **body}, path, allowed, nullable)


def _text(path: str, allowed: tuple[Any, ...], nullable: bool = False, **body: Any) -> Place:
    return Place(TEXT, {"model": "m", "prompt": "hi", **body}, path, allowed, nullable)


def _parts(role: str, *parts: dict[str, Any]) -> list[dict[str, Any]]:
    return [*USER, {"role": role, "content": list(parts)}]


ROLES = ("system", "developer", "user", "assistant", "tool", "function")
TEXT_PART = {"type": "text", "text": "hi"}
IMAGE_PART = {"type": "image_url", "image_url": {"url": "http://x", "detail": "low"}}
AUDIO_PART = {"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}
CALL = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
FORMATS = ("text", "json_object", "json_schema", "structural_tag")
TIERS = ("auto", "default", "flex", "scale", "priority")
CACHE_PART = {**TEXT_PART, "prompt_cache_breakpoint": {"mode": "explicit"}}
MODERATION = {"model": "omni-moderation-latest", "policy": {"input": {"mode": "score"}}}
PLACES = [
    _chat("messages[1].role", ROLES, messages=[*USER, {"role": "user", "content": "x"}]),
    _chat("messages[1].content[0].type", ("text", "image_url", "input_audio", "file"), messages=_parts("user", TEXT_PART)),
    _chat("messages[1].content[0].type", ("text",), messages=_parts("system", TEXT_PART)),
    _chat("messages[1].content[0].type", ("text", "refusal"), messages=_parts("assistant", TEXT_PART)),
    _chat("messages[1].content[0].image_url.detail", ("auto", "low", "high"), messages=_parts("user", IMAGE_PART)),
    _chat("messages[1].content[0].input_audio.format", ("wav", "mp3"), messages=_parts("user", AUDIO_PART)),
    _chat("messages[1].content[0].prompt_cache_breakpoint.mode", ("explicit",), messages=_parts("user", CACHE_PART)),
    _chat("messages[1].tool_calls[0].type", ("function", "custom"), messages=[*USER, {"role": "assistant", "tool_calls": [CALL]}]),
    _chat("n", (1,), nullable=True, n=1),
    _chat("logprobs", (False,), nullable=True, logprobs=False),
    _chat("top_logprobs", (0,), nullable=True, top_logprobs=0),
    _chat("modalities[0]", ("text", "audio"), modalities=["text"]),
    _chat("prediction.type", ("content",), prediction={"type": "content", "content": "x"}),
    _chat("prediction.content[0].type", ("text",), prediction={"type": "content", "content": [TEXT_PART]}),
    _chat("prediction.content[0].prompt_cache_breakpoint.mode", ("explicit",), prediction={"type": "content", "content": [CACHE_PART]}),
    _chat("response_format.type", FORMATS, response_format={"type": "text"}),
    _chat("tools[0].type", ("function", "custom"), tools=TOOLS),
    _chat("tool_choice", ("none", "auto", "required"), nullable=True, tools=TOOLS, tool_choice="none"),
    _chat("tool_choice.type", ("function", "allowed_tools", "custom"), tools=TOOLS, tool_choice={"type": "function", "function": {"name": "f"}}),
    _chat("tool_choice.allowed_tools.mode", ("auto", "required"), tools=TOOLS, tool_choice={"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": []}}),
    _chat("function_call", ("none", "auto"), nullable=True, function_call="none"),
    _chat("reasoning_effort", ("none", "minimal", "low", "medium", "high", "xhigh", "max"), nullable=True, reasoning_effort="low"),
    _chat("verbosity", ("low", "medium", "high"), nullable=True, verbosity="low"),
    _chat("service_tier", (*TIERS, "fast"), nullable=True, service_tier="auto"),
    _chat("prompt_cache_retention", ("in_memory", "in-memory", "24h"), nullable=True, prompt_cache_retention="24h"),
    _chat("prompt_cache_options.mode", ("implicit", "explicit"), prompt_cache_options={"mode": "implicit"}),
    _chat("prompt_cache_options.ttl", ("30m",), prompt_cache_options={"ttl": "30m"}),
    _chat("moderation.policy.input.mode", ("score", "block"), moderation=MODERATION),
    _text("n", (1,), nullable=True, n=1),
    _text("best_of", (1,), nullable=True, best_of=1),
    _text("echo", (False,), nullable=True, echo=False),
    _text("suffix", ("",), nullable=True, suffix=""),
    _text("response_format.type", FORMATS, response_format={"type": "text"}),
    _text("service_tier", (*TIERS, "fast"), nullable=True, service_tier="auto"),
]  # fmt: skip

_KEY = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def _put(body: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(body)
    keys: list[str | int] = [k if k else int(i) for k, i in _KEY.findall(path)]
    node: Any = out
    for key in keys[:-1]:
        node = node[key]
    node[keys[-1]] = value
    return out


def _names(param: str | None, path: str) -> bool:
    return param is not None and (param == path or param.startswith((path + ".", path + "[")))


# JSON values of every kind; objects and arrays nest
_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6)
)
_JSON = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
MALFORMED = st.one_of(
    st.dictionaries(st.sampled_from(["type", "mode", "x", ""]) | st.text(max_size=6), _JSON, max_size=3),
    st.lists(_JSON, max_size=3),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.none(),
    st.text(max_size=12),
)


def _allowed(place: Place, value: Any) -> bool:
    if isinstance(value, str):  # roles are case-insensitive; skip case variants of any value
        return value.lower() in {a.lower() for a in place.allowed if isinstance(a, str)}
    return value in place.allowed


@pytest.mark.parametrize("place", PLACES, ids=[f"{ENDPOINTS[p.route]}:{p.path}" for p in PLACES])
@settings(
    max_examples=60, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck)
)
@given(value=MALFORMED)
@example(value={})
@example(value=[])
@example(value=[{}])
@example(value=None)
@example(value=2)
@example(value=0.5)
@example(value=True)
@example(value="no-such-value")
def test_a_malformed_value_is_a_4xx_naming_the_field(place: Place, value: Any) -> None:
    if _allowed(place, value):
        return
    base = check_body(ENDPOINTS[place.route], copy.deepcopy(place.body), ModelLimits())
    # the body is served, or refused by design at the field or around it (an image part, ...)
    assert not isinstance(base, Problem) or _names(place.path, base.param), base
    answer = check_body(ENDPOINTS[place.route], _put(place.body, place.path, value), ModelLimits())
    if value is None and place.nullable:
        return  # the default
    assert isinstance(answer, Problem), f"{place.path}={value!r} was accepted: {answer!r:.300}"
    assert 400 <= answer.status < 500 and _names(answer.param, place.path), (place.path, value, answer)


def _enum_fields(node: Any, path: str, out: dict[str, tuple[set[Any], bool]], nullable: bool = False) -> None:
    """Each field of a JSON Schema holding a fixed set of values: its path (`a.b[].c`), the values,
    whether it is nullable."""
    if not isinstance(node, dict):
        return
    if "enum" in node or "const" in node:
        values, was_nullable = out.get(path, (set(), False))
        values.update(node.get("enum", [node.get("const")]))
        out[path] = (values, was_nullable or nullable)
    branches = node.get("anyOf", [])
    null = {"type": "null"} in branches
    for branch in branches:
        _enum_fields(branch, path, out, nullable or null)
    for key, sub in node.get("properties", {}).items():
        _enum_fields(sub, f"{path}.{key}" if path else key, out)
    if isinstance(node.get("items"), dict):
        _enum_fields(node["items"], f"{path}[]", out)


def json_schema(model: Any) -> dict[str, Any]:
    """The request body's schema as /openapi.json serves it, its references inlined and its
    `oneOf`s (tagged unions) read as `anyOf`s (OpenAI's own schema of a field, `x-openai`, left out)."""
    schema, parts = request_schema(model)

    def inline(node: Any) -> Any:
        if isinstance(node, list):
            return [inline(n) for n in node]
        if not isinstance(node, dict):
            return node
        if "$ref" in node:
            return inline(
                {**parts[node["$ref"].rsplit("/", 1)[-1]], **{k: v for k, v in node.items() if k != "$ref"}}
            )
        return {("anyOf" if k == "oneOf" else k): inline(v) for k, v in node.items() if k != "x-openai"}

    return dict(inline(schema))


@pytest.mark.parametrize("route", sorted(REQUEST_BODIES))
def test_every_enum_field_of_the_served_request_schema_has_a_place(route: str) -> None:
    node = REQUEST_BODIES[route]
    fields: dict[str, tuple[set[Any], bool]] = {}
    _enum_fields(json_schema(node), "", fields)  # what /openapi.json serves
    assert len(fields) >= 6, fields
    for path, (values, nullable) in fields.items():
        places = [p for p in PLACES if p.route == route and p.schema_path == path]
        assert places, f"{route} {path}: no place in PLACES"
        assert all(p.nullable == nullable for p in places), (path, nullable)
        assert values <= {a for p in places for a in p.allowed}, (path, values)
