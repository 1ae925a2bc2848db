"""A small schema language for JSON request bodies: checking a parsed body against it,
normalizing it on the way (written as JSON Schema for the OpenAPI document by `json_schema.py`).

A schema is a tree of frozen nodes. `conform(node, value)` returns the value normalized, or
raises `Refused` with a `Problem` (HTTP status, one line naming the field, the field's path):

- JSON's types, strictly: no "1" for 1, no 1 for true, no "yes" for true;
- an integral number is an integer (JSON Schema's own rule: 4.0 is the integer 4) and comes out
  as one;
- a `null` in a nullable property means "the default": the property is dropped (or set to the
  property's `null_means`);
- unknown properties of an object are refused by name;
- `Served(node, served, why)`: a value OpenAI's schema (`node`) allows but this app serves only
  in part (`served`); other values are refused with `why`.

Pure: no I/O, no app imports.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from typing import Any, Union

__all__ = [
    "AnyJson",
    "Array",
    "Boolean",
    "Const",
    "Integer",
    "Never",
    "Node",
    "Number",
    "Object",
    "OneOf",
    "Problem",
    "Prop",
    "Refused",
    "Served",
    "Text",
    "conform",
    "join",
    "kind_of",
]


@dataclasses.dataclass(frozen=True)
class Problem:
    status: int
    message: str
    param: str | None = None


class Refused(Exception):
    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.message)
        self.problem = problem


@dataclasses.dataclass(frozen=True)
class Text:
    enum: tuple[str, ...] | None = None
    pattern: str | None = None
    max_length: int | None = None


@dataclasses.dataclass(frozen=True)
class Integer:
    minimum: int | None = None
    maximum: int | None = None


@dataclasses.dataclass(frozen=True)
class Number:
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: bool = False


@dataclasses.dataclass(frozen=True)
class Boolean:
    pass


@dataclasses.dataclass(frozen=True)
class Const:
    value: Any


@dataclasses.dataclass(frozen=True)
class Never:
    """No value: what OpenAI's schema allows here, this app serves not at all."""


@dataclasses.dataclass(frozen=True)
class AnyJson:
    pass


@dataclasses.dataclass(frozen=True)
class Array:
    items: Node
    min_items: int | None = None
    max_items: int | None = None


@dataclasses.dataclass(frozen=True)
class Prop:
    node: Node
    required: bool = False
    nullable: bool = False
    null_means: Any = None  # with nullable: what a null becomes (None: the property is dropped)
    ignored: bool = False  # accepted (type-checked), then dropped: it has no effect on the answer
    extra: bool = False  # an SGLang extra, not a field of OpenAI's schema
    doc: str = ""


@dataclasses.dataclass(frozen=True)
class Object:
    props: Mapping[str, Prop] = dataclasses.field(default_factory=dict)
    values: Node | None = None  # a map: any key, each value this node
    keys: Text | None = None  # a map's keys
    open: bool = False  # any properties, unchecked (a JSON schema, template variables)
    hints: Mapping[str, str] = dataclasses.field(default_factory=dict)  # unknown key -> what to do


@dataclasses.dataclass(frozen=True)
class OneOf:
    """One of the branches: told apart by the value's JSON type, then (objects) by the `tag`
    property's value; untagged branches of one type are tried in order."""

    branches: tuple[Node, ...]
    tag: str | None = None


@dataclasses.dataclass(frozen=True)
class Served:
    node: Node
    served: Node
    why: str


Node = Union[Text, Integer, Number, Boolean, Const, Never, AnyJson, Array, Object, OneOf, Served]  # noqa: UP007


# -- checking --------------------------------------------------------------------------------
def join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def kind_of(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    names: dict[type, str] = {str: "a string", list: "a list", dict: "an object"}
    return names.get(type(value), type(value).__name__)


def _short(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)[:40]


def _refuse(path: str, message: str) -> Refused:
    return Refused(Problem(400, f"{path or 'body'} {message}"[:500], path or None))


def describe(node: Node) -> str:
    """What a node takes, for a message ("an integer", "a string or a list")."""
    if isinstance(node, Text):
        return "one of " + ", ".join(repr(e) for e in node.enum) if node.enum else "a string"
    if isinstance(node, Served):
        return describe(node.node)
    if isinstance(node, OneOf):
        seen: list[str] = []
        for b in node.branches:
            d = "an object" if isinstance(b, Object) else describe(b)
            if d not in seen:
                seen.append(d)
        return " or ".join(seen)
    names: dict[type, str] = {
        Integer: "an integer",
        Number: "a number",
        Boolean: "true or false",
        Array: "a list",
        Object: "an object",
        Const: "a constant",
        Never: "nothing",
        AnyJson: "any JSON value",
    }
    return names[type(node)]


def _integral(value: Any) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool)) or (
        isinstance(value, float) and value.is_integer()
    )


def _takes(node: Node, value: Any) -> bool:
    """Whether `value` has a JSON type the node takes (for choosing a OneOf branch)."""
    if isinstance(node, Text):
        return isinstance(value, str)
    if isinstance(node, Integer):
        return _integral(value)
    if isinstance(node, Number):
        return isinstance(value, int | float) and not isinstance(value, bool)
    if isinstance(node, Boolean):
        return isinstance(value, bool)
    if isinstance(node, Array):
        return isinstance(value, list)
    if isinstance(node, Object):
        return isinstance(value, dict)
    if isinstance(node, Served):
        return _takes(node.node, value)
    if isinstance(node, OneOf):
        return any(_takes(b, value) for b in node.branches)
    if isinstance(node, Const):
        return type(value) is type(node.value)
    return isinstance(node, AnyJson)


def conform(node: Node, value: Any, path: str = "") -> Any:
    """`value` checked against `node` and normalized; raises Refused naming the field."""
    if isinstance(node, Text):
        if not isinstance(value, str):
            raise _refuse(path, f"must be {describe(node)}, got {kind_of(value)}")
        if node.enum is not None and value not in node.enum:
            raise _refuse(path, f"must be {describe(node)}; got {_short(value)}")
        if node.max_length is not None and len(value) > node.max_length:
            raise _refuse(path, f"must be at most {node.max_length} characters")
        if node.pattern is not None and re.fullmatch(node.pattern, value) is None:
            raise _refuse(path, f"{_short(value)} must match {node.pattern}")
        return value
    if isinstance(node, Integer | Number):
        if isinstance(node, Integer) and not _integral(value):
            raise _refuse(
                path,
                f"must be an integer, got {_short(value) if _takes(Number(), value) else kind_of(value)}",
            )
        if not _takes(Number(), value):
            raise _refuse(path, f"must be a number, got {kind_of(value)}")
        if isinstance(node, Integer):
            value = int(value)
        _range(node, value, path)
        return value
    if isinstance(node, Boolean):
        if not isinstance(value, bool):
            raise _refuse(path, f"must be true or false, got {_short(value)}")
        return value
    if isinstance(node, Const):
        if not (type(value) is type(node.value) and value == node.value):
            raise _refuse(path, f"must be {_short(node.value)}, got {_short(value)}")
        return value
    if isinstance(node, Never):
        raise _refuse(path, "is not accepted")
    if isinstance(node, AnyJson):
        return value
    if isinstance(node, Array):
        return _array(node, value, path)
    if isinstance(node, Object):
        return _object(node, value, path)
    if isinstance(node, OneOf):
        return _one_of(node, value, path)
    value = conform(node.node, value, path)
    try:
        conform(node.served, value, path)
    except Refused:
        raise _refuse(path, f"{_short(value)} is not supported: {node.why}") from None
    return value


def _range(node: Integer | Number, value: float, path: str) -> None:
    low, high = node.minimum, node.maximum
    below = low is not None and (
        value < low or (isinstance(node, Number) and node.exclusive_minimum and value == low)
    )
    if below or (high is not None and value > high):
        if low is not None and high is not None:
            opener = "(" if isinstance(node, Number) and node.exclusive_minimum else "["
            raise _refuse(path, f"must be in {opener}{low}, {high}], got {value}")
        bound = f"> {low}" if isinstance(node, Number) and node.exclusive_minimum else f">= {low}"
        raise _refuse(path, f"must be {bound if low is not None else f'<= {high}'}, got {value}")


def _array(node: Array, value: Any, path: str) -> list[Any]:
    if not isinstance(value, list):
        raise _refuse(path, f"must be a list, got {kind_of(value)}")
    if node.min_items is not None and len(value) < node.min_items:
        raise _refuse(
            path, "must not be empty" if node.min_items == 1 else f"needs at least {node.min_items} items"
        )
    if node.max_items is not None and len(value) > node.max_items:
        raise _refuse(path, f"has {len(value)} items: at most {node.max_items}")
    items = node.items
    if isinstance(items, Integer) and all(type(v) is int for v in value):  # token ids: fast path
        low = min(value, default=0)
        high = max(value, default=0)
        if (items.minimum is None or low >= items.minimum) and (
            items.maximum is None or high <= items.maximum
        ):
            return value
    if isinstance(items, Text) and items == Text() and all(type(v) is str for v in value):
        return value
    return [conform(items, v, join(path, i)) for i, v in enumerate(value)]


def _object(node: Object, value: Any, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _refuse(path, f"must be an object, got {kind_of(value)}")
    if node.open:
        return value
    out: dict[str, Any] = {}
    for key, item in value.items():
        where = join(path, key)
        prop = node.props.get(key)
        if prop is None:
            if node.values is None:
                hint = node.hints.get(key, "see /openapi.json for the fields this app accepts")
                raise _refuse(where, f"is not a field of this request: {hint}")
            if node.keys is not None:
                conform(node.keys, key, where)
            out[key] = conform(node.values, item, where)
            continue
        if item is None:
            if not prop.nullable:
                raise _refuse(where, f"must be {describe(prop.node)}, got null")
            if prop.null_means is not None:
                out[key] = prop.null_means
            continue
        checked = conform(prop.node, item, where)
        if not prop.ignored:
            out[key] = checked
    for key, prop in node.props.items():
        if prop.required and key not in value:
            raise _refuse(join(path, key), "is required")
    return out


def _one_of(node: OneOf, value: Any, path: str) -> Any:
    fitting = [b for b in node.branches if _takes(b, value)]
    if not fitting:
        raise _refuse(path, f"must be {describe(node)}, got {kind_of(value)}")
    if node.tag is not None and isinstance(value, dict):
        tagged = {t: b for b in fitting for t in _tags(b, node.tag)}
        tag = value.get(node.tag)
        if not isinstance(tag, str) or tag not in tagged:  # an object or list tag is unhashable
            where = join(path, node.tag)
            if tag is None:
                raise _refuse(where, f"is required: one of {', '.join(repr(t) for t in tagged)}")
            raise _refuse(where, f"must be one of {', '.join(repr(t) for t in tagged)}; got {_short(tag)}")
        return conform(tagged[tag], value, path)
    # untagged branches of one type: those whose first item has the right type go first
    # (`[[1], []]` is a list of token-id lists with an empty one, not a list of texts)
    fitting.sort(key=lambda b: not _takes_first_item(b, value))
    first: Refused | None = None
    for branch in fitting:
        try:
            return conform(branch, value, path)
        except Refused as refused:
            first = first or refused
    assert first is not None
    raise first


def _takes_first_item(node: Node, value: Any) -> bool:
    if isinstance(node, Served):
        return _takes_first_item(node.node, value)
    if isinstance(node, Array) and isinstance(value, list) and value:
        return _takes(node.items, value[0])
    return True


def _tags(node: Node, tag: str) -> tuple[str, ...]:
    if isinstance(node, Served):
        return _tags(node.node, tag)
    if isinstance(node, Object) and tag in node.props:
        prop = node.props[tag].node
        if isinstance(prop, Text) and prop.enum:
            return prop.enum
    return ()
