"""Request bodies generated from OpenAI's request schemas, as deployments.http.openai_request declares
them (fields, types, nullability, ranges, written from OpenAI's field list and checked against
its SDK in test_openai_request.py), for the conformance test against the real app.

Three kinds, all from a seeded `random.Random` (the same bodies every run):

- `valid(...)`: OpenAI-valid bodies within what the app serves (each `Served` node generates from
  its served part; the cross-field rules below hold). The app must answer these 200.
- `unserved(...)`: OpenAI-valid bodies with exactly one value the app refuses by design (a
  `Served` node's value outside its served part). The app must answer 400 naming that field.
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

from deployments.http.openai_request import CHAT_REQUEST, COMPLETION_REQUEST, STRUCTURAL_TAG
from deployments.http.schema import (
    AnyJson,
    Array,
    Boolean,
    Const,
    Integer,
    Never,
    Node,
    Number,
    Object,
    OneOf,
    Refused,
    Served,
    Text,
    conform,
    join,
)

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


class _Gen:
    def __init__(self, rng: random.Random, served: bool) -> None:
        self.rng, self.served = rng, served

    def value(self, node: Node, name: str) -> Any:
        rng = self.rng
        if isinstance(node, Served):
            return self.value(node.served if self.served else node.node, name)
        if isinstance(node, Text):
            if node.enum:
                return rng.choice(node.enum)
            if node.pattern:
                return rng.choice(NAMES)
            return rng.choice(WORDS)[: node.max_length]
        if isinstance(node, Integer):
            return self._integer(node, name)
        if isinstance(node, Number):
            low = node.minimum if node.minimum is not None else -10.0
            high = node.maximum if node.maximum is not None else 10.0
            bounds = [high] if node.exclusive_minimum else [low, high]
            return rng.choice(bounds) if rng.random() < 0.3 else round(rng.uniform(low, high), 3)
        if isinstance(node, Boolean):
            return rng.random() < 0.5
        if isinstance(node, Const):
            return node.value
        if isinstance(node, AnyJson | Never):
            return {}
        if isinstance(node, Array):
            return self._array(node, name)
        if isinstance(node, OneOf):  # OpenAI's branches (not SGLang's structural_tag)
            return self.value(rng.choice([b for b in node.branches if b is not STRUCTURAL_TAG]), name)
        return self._object(node)

    def _integer(self, node: Integer, name: str) -> Any:
        rng = self.rng
        low = node.minimum if node.minimum is not None else 0
        high = node.maximum if node.maximum is not None else low + 1000
        if name in ("max_tokens", "max_completion_tokens"):
            high = min(high, MAX_NEW)
        if name == "prompt":  # token ids
            high = VOCAB - 1
        value = rng.choice([low, high]) if rng.random() < 0.3 else rng.randint(low, high)
        # JSON Schema's integers include integral numbers: OpenAI's SDKs and JSON tools send 4.0
        return float(value) if rng.random() < 0.15 and abs(value) < 2**53 else value

    def _array(self, node: Array, name: str) -> list[Any]:
        low = node.min_items or 0
        high = min(node.max_items if node.max_items is not None else 3, 3)
        return [self.value(node.items, name) for _ in range(self.rng.randint(max(low, 0), max(low, high)))]

    def _object(self, node: Object) -> dict[str, Any]:
        rng = self.rng
        if node.open:
            return dict(rng.choice(JSON_SCHEMAS))
        if node.values is not None:  # a map: logit_bias (token ids) or metadata
            keys = [str(rng.randrange(VOCAB)) for _ in range(rng.randint(0, 3))]
            return {k: self.value(node.values, "") for k in keys}
        out: dict[str, Any] = {}
        for key, prop in node.props.items():
            if prop.extra or (self.served and _never(prop.node)):
                continue
            if not prop.required and rng.random() > P_OPTIONAL:
                continue
            if prop.nullable and rng.random() < P_NULL:
                out[key] = None
                continue
            out[key] = self.value(prop.node, key)
        return out


def _never(node: Node) -> bool:
    return isinstance(node, Served) and isinstance(node.served, Never)


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


def _endpoint(chat: bool) -> tuple[str, Object]:
    return ("/v1/chat/completions", CHAT_REQUEST) if chat else ("/v1/completions", COMPLETION_REQUEST)


def _model(body: dict[str, Any], model: str) -> dict[str, Any]:
    return {**body, "model": model}


def valid(rng: random.Random, *, chat: bool, model: str) -> Case:
    path, schema = _endpoint(chat)
    body = _cross_field_rules(_Gen(rng, served=True)._object(schema), chat)
    return Case(path, _model(body, model))


def _served_paths(node: Node, path: str = "") -> list[tuple[str, Served]]:
    """Every top-level field's Served node, and those of its first message / part (one level)."""
    if isinstance(node, Served):
        return [(path, node)]
    if isinstance(node, Object) and not node.open and node.values is None:
        found = []
        for key, prop in node.props.items():
            if not prop.extra:
                found += _served_paths(prop.node, join(path, key))
        return found
    if isinstance(node, Array):
        return _served_paths(node.items, join(path, 0))
    if isinstance(node, OneOf):
        return [p for b in node.branches for p in _served_paths(b, path)]
    return []


def unserved(rng: random.Random, *, chat: bool, model: str) -> list[Case]:
    """For every Served field of the request: a valid body with that field set to a value OpenAI
    allows and the app does not serve."""
    path, schema = _endpoint(chat)
    cases = []
    for where, served in _served_paths(schema):
        for _ in range(50):  # a value of OpenAI's node the served node refuses
            value = _Gen(rng, served=False).value(served.node, where.rsplit(".", 1)[-1])
            try:
                conform(served.served, value, where)
            except Refused:
                break
        else:
            continue
        body = _Gen(rng, served=True)._object(schema)
        body = _cross_field_rules({k: v for k, v in body.items() if k != "tools"}, chat)
        body.pop("tool_choice", None)
        cases.append(Case(path, _model(_set(body, where, value, chat), model), where, served.why))
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


WRONG_TYPES: dict[type, list[Any]] = {
    Text: [5, True, ["x"]],
    Integer: ["5", True, 2.5, [1]],
    Number: ["0.5", False, {}],
    Boolean: ["yes", 1, "true", None],
    Array: ["x", 3, {}],
    Object: ["x", 1, []],
}


def invalid(rng: random.Random, *, chat: bool, model: str) -> list[Case]:
    """A valid body with one top-level field of the wrong type, for every typed field; and with
    unknown fields."""
    path, schema = _endpoint(chat)
    cases = []
    for key, prop in schema.props.items():
        node = prop.node.node if isinstance(prop.node, Served) else prop.node
        wrong = WRONG_TYPES.get(type(node))
        if not wrong or key == "model":
            continue
        value = rng.choice([w for w in wrong if not (w is None and prop.nullable)])
        base = valid(rng, chat=chat, model=model).body
        cases.append(Case(path, {**base, key: value}, key, f"{key} as {json.dumps(value)}"))
    for unknown in ("foo", "stream_mode", "max_length", "functions_list"):
        base = valid(rng, chat=chat, model=model).body
        cases.append(Case(path, {**base, unknown: 1}, unknown, "an unknown field"))
    return cases
