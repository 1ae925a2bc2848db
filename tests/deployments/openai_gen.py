"""Request bodies generated from OpenAI's request schemas, as the app's request models declare them
(deployments.http.openai_models: fields, types, nullability, ranges, written from OpenAI's field
list and checked against its SDK in test_openai_request.py), read from the models' JSON schema
(what /openapi.json serves), for the conformance test against the real app.

Three kinds, all from a seeded `random.Random` (the same bodies every run):

- `valid(...)`: OpenAI-valid bodies within what the app serves (a field served in part generates
  from its served schema; the cross-field rules below hold). The app must answer these 200.
- `unserved(...)`: OpenAI-valid bodies with exactly one value the app refuses by design (a value
  of the field's OpenAI schema, `x-openai`, outside its served schema). The app must answer 400
  naming that field.
- `invalid(...)`: a valid body with one field given the wrong JSON type, or an unknown field
  added. OpenAI answers 400; the app must too, naming the field.

Only OpenAI's own fields are generated (no SGLang extras). Bounded for CPU: `max_tokens` and
`max_completion_tokens` at most 8, at most 3 messages, short texts, token ids below the tiny
model's vocabulary.

Cross-field rules OpenAI (or the app, by design: docs/structured_output.md) holds a body to,
which a schema cannot say: `stream_options` only with `stream: true`; a named `tool_choice`
names a function in `tools`, and "required" needs tools; the app serves tools with tool_choice
"none", "required" or a named function, not "auto" (the default when tools are sent), and one
output constraint per request (tools or a JSON response_format); `logit_bias` keys are token ids.
"""

from __future__ import annotations

import dataclasses
import json
import random
from typing import Any

from jsonschema import Draft202012Validator

from deployments.http.openai_models import ChatCompletionRequest, CompletionRequest

__all__ = ["Case", "invalid", "unserved", "valid"]

WORDS = ["def", "add", "(a, b):", "return", "class Stack:", "x", "hello world", "", "é", "{", "\n"]
NAMES = ["get_weather", "f", "lookup_2", "A-b"]
VOCAB = 4096
MAX_NEW = 8
JSON_SCHEMAS = [
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    {"type": "object", "properties": {"n": {"type": "integer"}, "ok": {"type": "boolean"}}},
    {"type": "object", "properties": {}},
    {"type": "array", "items": {"type": "integer"}},
]
P_OPTIONAL, P_NULL = 0.3, 0.2


@dataclasses.dataclass(frozen=True)
class Case:
    path: str  # /v1/chat/completions or /v1/completions
    body: dict[str, Any]
    field: str | None = None  # the field the app must name in its refusal (unserved, invalid)
    why: str = ""


Schema = dict[str, Any]


def _schema(model: Any) -> tuple[Schema, Schema]:
    schema = model.model_json_schema()
    return schema, schema.pop("$defs", {})


CHAT_SCHEMA, CHAT_DEFS = _schema(ChatCompletionRequest)
COMPLETION_SCHEMA, COMPLETION_DEFS = _schema(CompletionRequest)
_DEFS = {**CHAT_DEFS, **COMPLETION_DEFS}


def _resolve(node: Schema) -> Schema:
    while "$ref" in node:
        node = {**_DEFS[node["$ref"].rsplit("/", 1)[-1]], **{k: v for k, v in node.items() if k != "$ref"}}
    return node


def _branches(node: Schema) -> list[Schema]:
    """A node's alternatives other than null."""
    node = _resolve(node)
    alternatives = node.get("anyOf") or node.get("oneOf")
    if alternatives is None or "x-openai" in node:  # a field served in part is one alternative
        return [node]
    return [b for alt in alternatives if alt != {"type": "null"} for b in _branches(alt)]


def _nullable(node: Schema) -> bool:
    return {"type": "null"} in (node.get("anyOf") or [])


def _never(node: Schema) -> bool:
    return any("not" in b for b in _branches(node))


def _openai(node: Schema) -> Schema:
    """OpenAI's own schema of a field served in part (else the node itself)."""
    served = next((b for b in _branches(node) if "x-openai" in b), None)
    return node if served is None else served["x-openai"]


def _sglang(node: Schema) -> bool:
    return bool(_resolve(node).get("x-sglang"))


class _Gen:
    def __init__(self, rng: random.Random, served: bool) -> None:
        self.rng, self.served = rng, served

    def value(self, node: Schema, name: str) -> Any:
        rng = self.rng
        node = _resolve(node)
        if "x-openai" in node:  # a field served in part: OpenAI's values, or the served ones
            return self.value(node["x-openai"] if not self.served else _served_part(node), name)
        if "const" in node:
            return node["const"]
        if "enum" in node:
            return rng.choice(node["enum"])
        if "anyOf" in node or "oneOf" in node:  # OpenAI's branches (not SGLang's structural_tag)
            return self.value(rng.choice([b for b in _branches(node) if not _sglang(b)]), name)
        kind = node.get("type")
        if kind == "string":
            return rng.choice(NAMES) if "pattern" in node else rng.choice(WORDS)[: node.get("maxLength")]
        if kind == "integer":
            return self._integer(node, name)
        if kind == "number":
            exclusive = "exclusiveMinimum" in node
            low = node.get("exclusiveMinimum", node.get("minimum", -10.0))
            high = node.get("maximum", 10.0)
            bounds = [high] if exclusive else [low, high]
            return rng.choice(bounds) if rng.random() < 0.3 else round(rng.uniform(low, high), 3)
        if kind == "boolean":
            return rng.random() < 0.5
        if kind == "array":
            return self._array(node, name)
        return self._object(node)

    def _integer(self, node: Schema, name: str) -> Any:
        rng = self.rng
        low = node.get("minimum", 0)
        high = node.get("maximum", low + 1000)
        if name in ("max_tokens", "max_completion_tokens"):
            high = min(high, MAX_NEW)
        if name == "prompt":  # token ids
            high = VOCAB - 1
        value = rng.choice([low, high]) if rng.random() < 0.3 else rng.randint(low, high)
        # JSON Schema's integers include integral numbers: OpenAI's SDKs and JSON tools send 4.0
        return float(value) if rng.random() < 0.15 and abs(value) < 2**53 else value

    def _array(self, node: Schema, name: str) -> list[Any]:
        low = node.get("minItems", 0)
        high = min(node.get("maxItems", 3), 3)
        return [self.value(node["items"], name) for _ in range(self.rng.randint(low, max(low, high)))]

    def _object(self, node: Schema) -> dict[str, Any]:
        rng = self.rng
        values = next(iter(node.get("patternProperties", {}).values()), node.get("additionalProperties"))
        if "properties" not in node:
            if isinstance(values, dict):  # a map: logit_bias (token ids) or metadata
                keys = [str(rng.randrange(VOCAB)) for _ in range(rng.randint(0, 3))]
                return {k: self.value(values, "") for k in keys}
            return dict(rng.choice(JSON_SCHEMAS))  # any object: a JSON schema, template variables
        out: dict[str, Any] = {}
        required = set(node.get("required", ()))
        for key, prop in node["properties"].items():
            if _sglang(prop) or (self.served and _never(prop)):
                continue
            if key not in required and rng.random() > P_OPTIONAL:
                continue
            if _nullable(prop) and rng.random() < P_NULL:
                out[key] = None
                continue
            out[key] = self.value(prop, key)
        return out


def _cross_field_rules(body: dict[str, Any], chat: bool) -> dict[str, Any]:
    """The rules a schema cannot say (module docstring), applied to a generated valid body."""
    if body.get("stream_options") is not None:
        body["stream"] = True
    if not chat:
        return body
    tools = [t for t in body.get("tools") or [] if isinstance(t, dict)]
    names = list(dict.fromkeys(t["function"]["name"] for t in tools))
    body["tools"] = [next(t for t in tools if t["function"]["name"] == n) for n in names] or body.get("tools")
    choice = body.get("tool_choice")
    if names:
        if choice in (None, "auto") or (isinstance(choice, dict) and choice["function"]["name"] not in names):
            body["tool_choice"] = "required"
        if body.get("response_format") not in (None, {"type": "text"}) and body["tool_choice"] != "none":
            body.pop("response_format")  # one output constraint per request
    elif choice == "required" or isinstance(choice, dict):
        body["tool_choice"] = "none"
    return body


def _endpoint(chat: bool) -> tuple[str, Schema]:
    return ("/v1/chat/completions", CHAT_SCHEMA) if chat else ("/v1/completions", COMPLETION_SCHEMA)


def _model(body: dict[str, Any], model: str) -> dict[str, Any]:
    return {**body, "model": model}


def valid(rng: random.Random, *, chat: bool, model: str) -> Case:
    path, schema = _endpoint(chat)
    body = _cross_field_rules(_Gen(rng, served=True)._object(schema), chat)
    return Case(path, _model(body, model))


def _join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def _served_paths(node: Schema, path: str = "") -> list[tuple[str, Schema]]:
    """Every top-level field served in part, and those of its first message / part (one level)."""
    node = _resolve(node)
    if "x-openai" in node:
        return [(path, node)]
    if "properties" in node:
        found = []
        for key, prop in node["properties"].items():
            if not _sglang(prop):
                found += _served_paths(prop, _join(path, key))
        return found
    if node.get("type") == "array":
        return _served_paths(node["items"], _join(path, 0))
    if "anyOf" in node or "oneOf" in node:
        return [p for b in _branches(node) for p in _served_paths(b, path)]
    return []


def _served_part(served: Schema) -> Schema:
    return {k: v for k, v in served.items() if k not in ("x-openai", "description")}


def _served_by(served: Schema, value: Any) -> bool:
    """Whether the served part of a field's schema takes `value`."""
    return Draft202012Validator({**_served_part(served), "$defs": _DEFS}).is_valid(value)


def unserved(rng: random.Random, *, chat: bool, model: str) -> list[Case]:
    """For every field served in part: a valid body with that field set to a value OpenAI allows
    and the app does not serve."""
    path, schema = _endpoint(chat)
    cases = []
    for where, served in _served_paths(schema):
        for _ in range(50):  # a value of OpenAI's schema the served part refuses
            value = _Gen(rng, served=False).value(served["x-openai"], where.rsplit(".", 1)[-1])
            if not _served_by(served, value):
                break
        else:
            continue
        body = _Gen(rng, served=True)._object(schema)
        body = _cross_field_rules({k: v for k, v in body.items() if k != "tools"}, chat)
        body.pop("tool_choice", None)
        cases.append(Case(path, _model(_set(body, where, value, chat), model), where, served["description"]))
    return cases


def _set(body: dict[str, Any], where: str, value: Any, chat: bool) -> dict[str, Any]:
    """`body` with the field at `where` (e.g. "messages[0].content[0]") set, building the way there."""
    if where.startswith("messages[0]"):
        inner = where.removeprefix("messages[0]").lstrip(".")
        role = "assistant" if inner.startswith(("audio", "tool_calls")) else "user"
        message: dict[str, Any] = {"role": role, "content": "hi"}
        if inner.startswith("content[0]"):
            message["content"] = [value]
        elif inner.startswith("tool_calls[0]"):
            message["tool_calls"] = [value]
        else:
            message[inner] = value
        return {**body, "messages": [message, {"role": "user", "content": "x"}]}
    if where.startswith("tools[0]"):
        return {**body, "tools": [value], "tool_choice": "required"}
    return {**body, where: value}


WRONG_TYPES: dict[str, list[Any]] = {
    "string": [5, True, ["x"]],
    "integer": ["5", True, 2.5, [1]],
    "number": ["0.5", False, {}],
    "boolean": ["yes", 1, "true", None],
    "array": ["x", 3, {}],
    "object": ["x", 1, []],
}


def _json_type(node: Schema) -> str | None:
    """The JSON type OpenAI's schema gives a field (None: several)."""
    branches = _branches(_openai(node))
    kinds = {b.get("type", "object" if "properties" in b else None) for b in branches}
    return kinds.pop() if len(kinds) == 1 and len(branches) == 1 else None


def invalid(rng: random.Random, *, chat: bool, model: str) -> list[Case]:
    """A valid body with one top-level field of the wrong type, for every typed field; and with
    unknown fields."""
    path, schema = _endpoint(chat)
    cases = []
    for key, prop in schema["properties"].items():
        wrong = WRONG_TYPES.get(_json_type(prop) or "")
        if not wrong or key == "model":
            continue
        value = rng.choice([w for w in wrong if not (w is None and _nullable(prop))])
        base = valid(rng, chat=chat, model=model).body
        cases.append(Case(path, {**base, key: value}, key, f"{key} as {json.dumps(value)}"))
    for unknown in ("foo", "stream_mode", "max_length", "functions_list"):
        base = valid(rng, chat=chat, model=model).body
        cases.append(Case(path, {**base, unknown: 1}, unknown, "an unknown field"))
    return cases
