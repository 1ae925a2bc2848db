"""Every YAML document under k8s/ is validated, each by the schema that owns its kind.

- core Kubernetes kinds (Secret, PersistentVolumeClaim, ...): kubernetes-validate's bundled
  strict schemas (unknown fields are errors), for each version in KUBERNETES_VERSIONS;
- RayService: the KubeRay CRD (tests/k8s/test_rayservice.py);
- PodMonitor: tests/k8s/schemas/podmonitor-v1-subset.yaml, our own subset of the Prometheus
  Operator CRD written in the CRD dialect and checked by the same strict converter. (No PyPI
  package ships that CRD's schema strictly: cloudcoil's generated models ignore unknown fields.)
A document of any other kind fails the suite until someone says how it is validated.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.k8s import crdschema
from tests.k8s.manifests import K8S, KUBERNETES_VERSIONS, edited, load_all, load_one, rayservice

SCHEMAS = Path(__file__).parent / "schemas"
CORE_KINDS = {"Secret", "PersistentVolumeClaim", "Service", "ConfigMap"}
CRD_KINDS = {"RayService", "PodMonitor"}


def _documents() -> list[tuple[str, dict[str, Any]]]:
    return [(p.name, d) for p in sorted(K8S.glob("*.yaml")) for d in load_all(p.name)]


def test_every_manifest_has_a_validator() -> None:
    kinds = {(name, d["kind"]) for name, d in _documents()}
    assert kinds, "no manifests found under k8s/"
    unknown = {k for k in kinds if k[1] not in CORE_KINDS | CRD_KINDS}
    assert not unknown, f"add a validator for {unknown}"


@functools.cache
def _podmonitor_validator() -> Any:
    with open(SCHEMAS / "podmonitor-v1-subset.yaml") as f:
        return crdschema.strict_validator(yaml.safe_load(f))


def _core_error(doc: dict[str, Any], version: str) -> str | None:
    try:
        kubernetes_validate.validate(doc, version, strict=True)
    except kubernetes_validate.ValidationError as e:
        return str(e).splitlines()[0]
    return None


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize(
    ("name", "doc"),
    [d for d in _documents() if d[1]["kind"] in CORE_KINDS],
    ids=lambda x: x if isinstance(x, str) else x["kind"],
)
def test_core_manifest_validates(name: str, doc: dict[str, Any], version: str) -> None:
    assert _core_error(doc, version) is None, name


@pytest.mark.parametrize(
    ("name", "doc"),
    [d for d in _documents() if d[1]["kind"] == "PodMonitor"],
    ids=lambda x: x if isinstance(x, str) else x["metadata"]["name"],
)
def test_podmonitor_validates(name: str, doc: dict[str, Any]) -> None:
    assert crdschema.errors(_podmonitor_validator(), doc) == [], name


@pytest.mark.parametrize(
    ("what", "file", "kind", "edit", "needle"),
    [
        (
            "misspelled field",
            "control-secret.yaml",
            "Secret",
            dict(path="stringData", rename="strinData"),
            "strinData",
        ),
        (
            "wrong type",
            "models-pvc.yaml",
            "PersistentVolumeClaim",
            dict(path="spec.accessModes", value="ReadWriteMany"),
            "is not of type",
        ),
        (
            "misspelled nested field",
            "models-pvc.yaml",
            "PersistentVolumeClaim",
            dict(path="spec.resources.request", value={"storage": "1Gi"}),
            "request",
        ),
    ],
)
def test_core_validation_rejects_a_wrong_manifest(
    what: str, file: str, kind: str, edit: dict[str, Any], needle: str
) -> None:
    bad = edited(load_one(file, kind), **edit)
    for version in KUBERNETES_VERSIONS:
        err = _core_error(bad, version)
        assert err is not None and needle in err, (what, version, err)


@pytest.mark.parametrize(
    ("what", "edit", "needle"),
    [
        ("misspelled endpoint field", dict(path="spec.podMetricsEndpoints.0.paht", value="/metrics"), "paht"),
        ("bad duration", dict(path="spec.podMetricsEndpoints.0.interval", value="15 seconds"), "interval"),
        ("wrong type", dict(path="spec.podMetricsEndpoints.0.port", value=8000), "port"),
        ("missing required selector", dict(path="spec.selector", delete=True), "selector"),
    ],
)
def test_podmonitor_validation_rejects_a_wrong_manifest(what: str, edit: dict[str, Any], needle: str) -> None:
    doc = [d for d in load_all("podmonitor.yaml") if d["metadata"]["name"] == "specflip"][0]
    errs = crdschema.errors(_podmonitor_validator(), edited(doc, **edit))
    assert any(needle in e for e in errs), (what, errs)


def test_specflip_metrics_are_scraped_once_from_the_head() -> None:
    """The fleet-wide /metrics would be stored once per pod if every pod were scraped."""
    doc = [d for d in load_all("podmonitor.yaml") if d["metadata"]["name"] == "specflip"][0]
    assert doc["spec"]["selector"]["matchLabels"]["ray.io/node-type"] == "head"
    (ep,) = doc["spec"]["podMetricsEndpoints"]
    assert (ep["port"], ep["path"]) == ("serve", "/metrics")


def test_podmonitors_select_the_ray_pods_of_the_rayservice() -> None:
    spec = rayservice()["spec"]["rayClusterConfig"]
    templates = [spec["headGroupSpec"]["template"]] + [g["template"] for g in spec["workerGroupSpecs"]]
    ports = [{p["name"] for p in t["spec"]["containers"][0]["ports"]} for t in templates]
    for pm in load_all("podmonitor.yaml"):
        want = {k: v for k, v in pm["spec"]["selector"]["matchLabels"].items() if not k.startswith("ray.io/")}
        for t in templates:
            assert want.items() <= t["metadata"]["labels"].items(), pm["metadata"]["name"]
        for ep in pm["spec"]["podMetricsEndpoints"]:
            assert all(ep["port"] in p for p in ports), f"port {ep['port']} not named on every Ray container"


def test_secret_and_claim_names_match_the_rayservice() -> None:
    assert load_one("control-secret.yaml", "Secret")["metadata"]["name"] == "specflip-control"
    assert load_one("control-secret.yaml", "Secret")["stringData"] == {"token": ""}, "no real token in git"
    assert load_one("models-pvc.yaml", "PersistentVolumeClaim")["metadata"]["name"] == "specflip-models"
