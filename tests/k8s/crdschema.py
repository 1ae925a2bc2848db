"""Strict offline validation of custom resources against a CRD's openAPIV3Schema.

The API server *prunes* fields a structural schema does not declare; it does not
reject them. `kubectl apply --validate=strict` (the default since kubectl 1.27)
reports them as errors instead, and that is the behaviour these tests want: a
typo in a manifest must fail here, not be silently dropped in the cluster.

`to_json_schema` converts the Kubernetes dialect of OpenAPI v3 into a JSON Schema
(draft 2020-12) that `strict_validator` checks:

- objects that declare `properties` get `additionalProperties: false` unless they
  carry `x-kubernetes-preserve-unknown-fields: true`; an object with neither
  properties nor a map schema accepts anything only if it preserves unknown fields;
- `x-kubernetes-int-or-string: true` accepts an integer or a string;
- `nullable: true` also accepts null (otherwise null is a type error);
- `x-kubernetes-list-type: set` means unique items; `x-kubernetes-list-map-keys`
  means no two items share the same key values (missing keys take the schema's
  default, as the API server defaults them before checking);
- the root `metadata` (declared as a bare object in every CRD) is checked against
  a small ObjectMeta schema written here;
- not evaluated: CEL rules (`x-kubernetes-validations`) and `format`, which the API
  server checks with state (oldSelf) or a Go parser we do not have offline.

Every keyword the converter meets must be known: an unknown one raises, so a newer
CRD cannot silently weaken the check.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import jsonschema
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

__all__ = [
    "OBJECT_META",
    "UnknownKeyword",
    "crd_version_schema",
    "errors",
    "strict_validator",
    "to_json_schema",
]

# Keywords copied as they are: their meaning is the same in JSON Schema.
_SAME = {
    "type",
    "enum",
    "pattern",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "uniqueItems",
    "minProperties",
    "maxProperties",
    "required",
    "description",
    "title",
    "default",  # an annotation in JSON Schema; kept so list-map keys can fall back to it
}
# Keywords that do not constrain a value offline (documentation, defaulting, CEL, formats, list/map strategy).
_DROP = {
    "format",
    "example",
    "externalDocs",
    "x-kubernetes-validations",
    "x-kubernetes-map-type",
    "x-kubernetes-embedded-resource",
}
_HANDLED = {
    "properties",
    "additionalProperties",
    "items",
    "anyOf",
    "allOf",
    "oneOf",
    "not",
    "nullable",
    "x-kubernetes-int-or-string",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
}

_DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}

# The part of metav1.ObjectMeta a manifest may set (the rest is written by the server).
OBJECT_META: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "maxLength": 253, "pattern": _DNS_SUBDOMAIN},
        "generateName": {"type": "string"},
        "namespace": {"type": "string", "maxLength": 63},
        "labels": _STRING_MAP,
        "annotations": _STRING_MAP,
        "finalizers": {"type": "array", "items": {"type": "string"}},
    },
}


class UnknownKeyword(ValueError):
    """The CRD uses a schema keyword this converter does not know how to treat."""


def crd_version_schema(crd: dict[str, Any], version: str) -> dict[str, Any]:
    """The openAPIV3Schema of one served version of a CustomResourceDefinition."""
    for v in crd["spec"]["versions"]:
        if v["name"] == version:
            return v["schema"]["openAPIV3Schema"]
    raise KeyError(f"{crd['metadata']['name']} has no version {version!r}")


def to_json_schema(node: dict[str, Any], *, root: bool = True, path: str = "") -> dict[str, Any]:
    """Convert an openAPIV3Schema node (Kubernetes dialect) into a strict JSON Schema."""
    unknown = set(node) - _SAME - _DROP - _HANDLED
    if unknown:
        raise UnknownKeyword(f"{path or '(root)'}: unknown schema keyword(s) {sorted(unknown)}")
    out: dict[str, Any] = {k: v for k, v in node.items() if k in _SAME or k.startswith("x-kubernetes-list")}
    preserve = bool(node.get("x-kubernetes-preserve-unknown-fields"))

    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    for comb in ("anyOf", "allOf", "oneOf"):
        if comb in node:
            branches = [to_json_schema(b, root=False, path=f"{path}|{comb}") for b in node[comb]]
            if comb == "anyOf" and "anyOf" in out and node.get("x-kubernetes-int-or-string"):
                # int-or-string fields list their alternatives in anyOf too: keep both constraints.
                out["allOf"] = [*out.get("allOf", []), {"anyOf": branches}]
            else:
                out[comb] = branches
    if "not" in node:
        out["not"] = to_json_schema(node["not"], root=False, path=f"{path}!")
    if "items" in node:
        out["items"] = to_json_schema(node["items"], root=False, path=f"{path}[]")
    if node.get("x-kubernetes-list-type") == "set":
        out["uniqueItems"] = True

    props = node.get("properties")
    if props is not None:
        out["properties"] = {
            k: (
                OBJECT_META
                if root and k == "metadata" and _is_bare_object(v)
                else to_json_schema(v, root=False, path=f"{path}.{k}")
            )
            for k, v in props.items()
        }
    addl = node.get("additionalProperties")
    if isinstance(addl, dict):
        out["additionalProperties"] = to_json_schema(addl, root=False, path=f"{path}{{}}")
    elif isinstance(addl, bool):
        out["additionalProperties"] = addl
    elif node.get("type") == "object" and not preserve:
        # Declared fields only; a bare `type: object` without preserve-unknown-fields holds nothing.
        out["additionalProperties"] = False

    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"] if isinstance(out["type"], str) else [*out["type"], "null"]
    return out


def _is_bare_object(node: dict[str, Any]) -> bool:
    return node.get("type") == "object" and "properties" not in node and "additionalProperties" not in node


def _list_map_keys(
    validator: Any, keys: list[str], instance: Any, schema: dict[str, Any]
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "array"):
        return
    item_props = (schema.get("items") or {}).get("properties", {})
    seen: dict[tuple[Any, ...], int] = {}
    for i, item in enumerate(instance):
        if not isinstance(item, dict):
            continue
        key = tuple(item.get(k, item_props.get(k, {}).get("default")) for k in keys)
        if key in seen:
            yield ValidationError(
                f"items {seen[key]} and {i} have the same map keys {dict(zip(keys, key, strict=True))}"
            )
        seen.setdefault(key, i)


_StrictValidator = jsonschema.validators.extend(
    Draft202012Validator, {"x-kubernetes-list-map-keys": _list_map_keys}
)


def strict_validator(openapi_schema: dict[str, Any]) -> Any:
    """A jsonschema validator for documents of the CRD whose openAPIV3Schema is given."""
    schema = to_json_schema(openapi_schema)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return _StrictValidator(schema)


def errors(validator: Any, document: dict[str, Any]) -> list[str]:
    """All violations, one line each, as `path: message`, sorted by path."""
    found = []
    for e in validator.iter_errors(document):
        where = ".".join(str(p) for p in e.absolute_path) or "(root)"
        found.append(f"{where}: {e.message}")
    return sorted(found)
