"""The CRD-to-JSON-Schema converter means what the Kubernetes schema means, and is strict about unknown fields.

Each case is a tiny openAPIV3Schema in the Kubernetes dialect plus documents it must accept or
reject; the manifest tests then rely on the converter for the real KubeRay CRD.
"""

from __future__ import annotations

import pytest

from tests.k8s import crdschema
from tests.k8s.manifests import load_crd

OBJ = {"type": "object"}


def _schema(spec: dict) -> dict:
    """A CRD root schema whose spec is `spec`."""
    return {
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": OBJ,
            "spec": spec,
        },
    }


def _ok(spec_schema: dict, spec: object) -> bool:
    v = crdschema.strict_validator(_schema(spec_schema))
    return not crdschema.errors(
        v, {"apiVersion": "x/v1", "kind": "X", "metadata": {"name": "a"}, "spec": spec}
    )


CASES = [
    # (what it shows, spec schema, spec value, accepted?)
    ("declared field accepted", {**OBJ, "properties": {"a": {"type": "string"}}}, {"a": "x"}, True),
    (
        "undeclared field rejected (strict, not pruned)",
        {**OBJ, "properties": {"a": {"type": "string"}}},
        {"b": "x"},
        False,
    ),
    ("wrong type rejected", {**OBJ, "properties": {"a": {"type": "integer"}}}, {"a": "1"}, False),
    (
        "missing required rejected",
        {**OBJ, "properties": {"a": {"type": "string"}}, "required": ["a"]},
        {},
        False,
    ),
    (
        "int-or-string takes an int",
        {**OBJ, "properties": {"p": {"x-kubernetes-int-or-string": True}}},
        {"p": 8000},
        True,
    ),
    (
        "int-or-string takes a string",
        {**OBJ, "properties": {"p": {"x-kubernetes-int-or-string": True}}},
        {"p": "serve"},
        True,
    ),
    (
        "int-or-string rejects a bool",
        {**OBJ, "properties": {"p": {"x-kubernetes-int-or-string": True}}},
        {"p": True},
        False,
    ),
    (
        "int-or-string with anyOf and a quantity pattern",
        {
            **OBJ,
            "properties": {
                "q": {
                    "anyOf": [{"type": "integer"}, {"type": "string"}],
                    "pattern": "^[0-9]+(Gi|Mi)?$",
                    "x-kubernetes-int-or-string": True,
                }
            },
        },
        {"q": "16Gi"},
        True,
    ),
    (
        "pattern still applies to the string form",
        {
            **OBJ,
            "properties": {
                "q": {
                    "anyOf": [{"type": "integer"}, {"type": "string"}],
                    "pattern": "^[0-9]+(Gi|Mi)?$",
                    "x-kubernetes-int-or-string": True,
                }
            },
        },
        {"q": "16 gigs"},
        False,
    ),
    (
        "preserve-unknown-fields keeps undeclared fields",
        {**OBJ, "properties": {"a": {"type": "string"}}, "x-kubernetes-preserve-unknown-fields": True},
        {"a": "x", "anything": {"nested": 1}},
        True,
    ),
    (
        "preserve-unknown-fields with no type takes any value",
        {**OBJ, "properties": {"blob": {"x-kubernetes-preserve-unknown-fields": True}}},
        {"blob": [1, "two"]},
        True,
    ),
    ("bare object without preserve holds nothing", {**OBJ, "properties": {"o": OBJ}}, {"o": {"k": 1}}, False),
    (
        "map values checked",
        {**OBJ, "properties": {"m": {**OBJ, "additionalProperties": {"type": "string"}}}},
        {"m": {"k": 1}},
        False,
    ),
    ("null rejected unless nullable", {**OBJ, "properties": {"a": {"type": "string"}}}, {"a": None}, False),
    (
        "nullable takes null",
        {**OBJ, "properties": {"a": {"type": "string", "nullable": True}}},
        {"a": None},
        True,
    ),
    (
        "set list rejects duplicates",
        {
            **OBJ,
            "properties": {
                "s": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"}
            },
        },
        {"s": ["a", "a"]},
        False,
    ),
    (
        "map list rejects two items with the same key",
        {
            **OBJ,
            "properties": {
                "env": {
                    "type": "array",
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["name"],
                    "items": {**OBJ, "properties": {"name": {"type": "string"}}},
                }
            },
        },
        {"env": [{"name": "A"}, {"name": "A"}]},
        False,
    ),
    (
        "map list keys fall back to their default (ports: containerPort + protocol TCP)",
        {
            **OBJ,
            "properties": {
                "ports": {
                    "type": "array",
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["containerPort", "protocol"],
                    "items": {
                        **OBJ,
                        "properties": {
                            "containerPort": {"type": "integer"},
                            "protocol": {"type": "string", "default": "TCP"},
                        },
                    },
                }
            },
        },
        {"ports": [{"containerPort": 80}, {"containerPort": 80, "protocol": "TCP"}]},
        False,
    ),
    (
        "format and CEL rules are not evaluated offline",
        {
            **OBJ,
            "properties": {
                "n": {
                    "type": "integer",
                    "format": "int32",
                    "x-kubernetes-validations": [{"rule": "self > 100"}],
                }
            },
        },
        {"n": 1},
        True,
    ),
]


@pytest.mark.parametrize(("what", "schema", "spec", "accepted"), CASES, ids=[c[0] for c in CASES])
def test_converter_semantics(what: str, schema: dict, spec: object, accepted: bool) -> None:
    assert _ok(schema, spec) is accepted, what


@pytest.mark.parametrize(
    ("metadata", "accepted"),
    [
        ({"name": "specflip", "labels": {"a": "b"}}, True),
        ({"name": "specflip", "lables": {"a": "b"}}, False),
        ({"name": "Not_A_DNS_Name"}, False),
        ({"name": "specflip", "labels": {"a": 1}}, False),
    ],
)
def test_root_metadata_is_checked_as_object_meta(metadata: dict, accepted: bool) -> None:
    """CRDs declare `metadata` as a bare object; the converter substitutes ObjectMeta rules."""
    v = crdschema.strict_validator(_schema({**OBJ, "properties": {}}))
    doc = {"apiVersion": "x/v1", "kind": "X", "metadata": metadata, "spec": {}}
    assert (not crdschema.errors(v, doc)) is accepted


def test_unknown_schema_keyword_raises() -> None:
    """A keyword the converter does not know must stop it, not be dropped silently."""
    with pytest.raises(crdschema.UnknownKeyword, match=r"\.spec\.a.*x-kubernetes-new-thing"):
        crdschema.to_json_schema(
            _schema({**OBJ, "properties": {"a": {"type": "string", "x-kubernetes-new-thing": True}}})
        )


@pytest.mark.parametrize("name", ["ray.io_rayservices.yaml", "ray.io_rayclusters.yaml"])
def test_converter_knows_every_keyword_of_the_kuberay_crds(name: str) -> None:
    crdschema.strict_validator(
        crdschema.crd_version_schema(load_crd(name), "v1")
    )  # raises on an unknown keyword
