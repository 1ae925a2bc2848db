"""The schema language's nodes (`deployments.http.schema`) written as JSON Schema, for the OpenAPI
document (`routes.py`): what is accepted, `Served` nodes as served. Pure."""

from __future__ import annotations

from typing import Any

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
    Text,
)

__all__ = ["json_schema"]


def json_schema(node: Node) -> dict[str, Any]:
    if isinstance(node, Text):
        out: dict[str, Any] = {"type": "string"}
        if node.enum is not None:
            out["enum"] = list(node.enum)
        if node.pattern is not None:
            out["pattern"] = f"^{node.pattern}$"
        if node.max_length is not None:
            out["maxLength"] = node.max_length
        return out
    if isinstance(node, Integer | Number):
        out = {"type": "integer" if isinstance(node, Integer) else "number"}
        if node.minimum is not None:
            exclusive = isinstance(node, Number) and node.exclusive_minimum
            out["exclusiveMinimum" if exclusive else "minimum"] = node.minimum
        if node.maximum is not None:
            out["maximum"] = node.maximum
        return out
    if isinstance(node, Boolean):
        return {"type": "boolean"}
    if isinstance(node, Const):
        return {"const": node.value}
    if isinstance(node, Never):
        return {"not": {}}
    if isinstance(node, AnyJson):
        return {}
    if isinstance(node, Array):
        out = {"type": "array", "items": json_schema(node.items)}
        if node.min_items is not None:
            out["minItems"] = node.min_items
        if node.max_items is not None:
            out["maxItems"] = node.max_items
        return out
    if isinstance(node, Object):
        return _object_schema(node)
    if isinstance(node, OneOf):
        return {"anyOf": [json_schema(b) for b in node.branches]}
    return {**json_schema(node.served), "description": node.why}


def _object_schema(node: Object) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object"}
    if node.open:
        return out
    if node.values is not None:
        out["additionalProperties"] = json_schema(node.values)
        if node.keys is not None:
            out["propertyNames"] = json_schema(node.keys)
        return out
    props = {}
    for key, prop in node.props.items():
        schema = json_schema(prop.node)
        if prop.nullable:
            described = schema.pop("description", None)
            schema = {"anyOf": [schema, {"type": "null"}]}
            if described:
                schema["description"] = described
        doc = " ".join(d for d in (schema.get("description"), prop.doc) if d)
        if prop.ignored:
            doc = " ".join(d for d in (doc, "Accepted; no effect on the answer.") if d)
        if doc:
            schema["description"] = doc
        props[key] = schema
    out["properties"] = props
    required = [k for k, p in node.props.items() if p.required]
    if required:
        out["required"] = required
    out["additionalProperties"] = False
    return out
