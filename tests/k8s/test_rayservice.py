"""k8s/rayservice.yaml is a valid KubeRay RayService and has the shape the design needs.

Schema: the RayService CRD's openAPIV3Schema (../shared/kuberay or $SPECFLIP_KUBERAY_CRDS),
strict about unknown fields like `kubectl apply --validate=strict` (tests/k8s/crdschema.py).
The pod templates are also checked against Kubernetes' own PodTemplate schema, so a field the
CRD's embedded copy of corev1 knows but a real cluster does not is caught too.
"""

from __future__ import annotations

import functools
from typing import Any

import kubernetes_validate
import pytest

from tests.k8s import crdschema
from tests.k8s.manifests import KUBERNETES_VERSIONS, app_args, edited, gpu_group, load_crd, rayservice

W0 = "spec.rayClusterConfig.workerGroupSpecs.0"
HEAD = "spec.rayClusterConfig.headGroupSpec"
WORKER_C = f"{W0}.template.spec.containers.0"


@functools.cache
def _validator() -> Any:
    return crdschema.strict_validator(crdschema.crd_version_schema(load_crd("ray.io_rayservices.yaml"), "v1"))


def _errors(doc: dict[str, Any]) -> list[str]:
    return crdschema.errors(_validator(), doc)


def test_rayservice_validates_against_the_kuberay_crd() -> None:
    rs = rayservice()
    assert rs["apiVersion"] == "ray.io/v1"
    assert _errors(rs) == []


# Each edit must be rejected by the same validation, with an error naming the field.
NEGATIVE = [
    ("misspelled field (replicas -> replica)", dict(path=f"{W0}.replicas", rename="replica"), "replica"),
    (
        "misspelled spec field (serveConfigV2 -> serveConfig)",
        dict(path="spec.serveConfigV2", rename="serveConfig"),
        "serveConfig",
    ),
    ("unknown container field", dict(path=f"{WORKER_C}.readinesProbe", value={}), "readinesProbe"),
    ("wrong type: maxReplicas as a string", dict(path=f"{W0}.maxReplicas", value="2"), "maxReplicas"),
    (
        "wrong type: rayStartParams value as a number",
        dict(path=f"{W0}.rayStartParams.object-store-memory", value=4294967296),
        "object-store-memory",
    ),
    (
        "wrong type: probe port as a list",
        dict(path=f"{HEAD}.template.spec.containers.0.readinessProbe.httpGet.port", value=[52365]),
        "port",
    ),
    ("missing required: groupName", dict(path=f"{W0}.groupName", delete=True), "groupName"),
    ("missing required: container image name", dict(path=f"{WORKER_C}.name", delete=True), "name"),
    (
        "missing required: rayClusterConfig",
        dict(path="spec.rayClusterConfig", delete=True),
        "rayClusterConfig",
    ),
    ("bad metadata field", dict(path="metadata.lables", value={"a": "b"}), "lables"),
]


@pytest.mark.parametrize(("what", "edit", "needle"), NEGATIVE, ids=[n[0] for n in NEGATIVE])
def test_a_wrong_manifest_is_rejected(what: str, edit: dict[str, Any], needle: str) -> None:
    errs = _errors(edited(rayservice(), **edit))
    assert errs, f"{what}: accepted"
    assert any(needle in e for e in errs), errs


def _templates(rs: dict[str, Any]) -> list[dict[str, Any]]:
    spec = rs["spec"]["rayClusterConfig"]
    return [spec["headGroupSpec"]["template"]] + [g["template"] for g in spec["workerGroupSpecs"]]


@pytest.mark.parametrize("k8s_version", KUBERNETES_VERSIONS)
def test_pod_templates_validate_as_kubernetes_pod_templates(k8s_version: str) -> None:
    for template in _templates(rayservice()):
        doc = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": template}
        kubernetes_validate.validate(doc, k8s_version, strict=True)


def test_head_has_no_gpus_and_no_replica_cpus() -> None:
    head = rayservice()["spec"]["rayClusterConfig"]["headGroupSpec"]
    assert head["rayStartParams"]["num-gpus"] == "0"
    assert head["rayStartParams"]["num-cpus"] == "0", (
        "Serve replicas and the engine must not land on the head"
    )
    (c,) = head["template"]["spec"]["containers"]
    for part in ("requests", "limits"):
        assert "nvidia.com/gpu" not in c["resources"].get(part, {})


def test_gpu_group_is_one_replica_per_gpu_and_sized_like_the_app() -> None:
    rs = rayservice()
    g, args = gpu_group(rs), app_args(rs)
    (c,) = g["template"]["spec"]["containers"]
    gpus_per_pod = int(c["resources"]["limits"]["nvidia.com/gpu"])
    assert c["resources"]["requests"]["nvidia.com/gpu"] == c["resources"]["limits"]["nvidia.com/gpu"]
    assert gpus_per_pod == 1 and args["replicas"]["num_gpus"] == 1
    # No autoscaling: the fleet size is replicas.count, and every GPU pod hosts one replica.
    assert g["replicas"] == g["minReplicas"] == g["maxReplicas"] == args["replicas"]["count"]
    assert rs["spec"]["rayClusterConfig"].get("enableInTreeAutoscaling") is False


def test_gpu_pods_mount_shared_memory_and_the_models_read_only() -> None:
    rs = rayservice()
    spec = gpu_group(rs)["template"]["spec"]
    (c,) = spec["containers"]
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes[mounts["/dev/shm"]["name"]]["emptyDir"]["medium"] == "Memory"
    models = mounts["/models"]
    assert models.get("readOnly") is True
    assert volumes[models["name"]]["persistentVolumeClaim"]["claimName"] == "specflip-models"
    model = app_args(rs)["model"]
    for key in ("path", "draft_path"):
        assert model[key].startswith("/models/"), f"model.{key} must be on the /models volume"


def _env(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container.get("env", [])}


def test_control_token_comes_from_the_secret_on_every_ray_container() -> None:
    rs = rayservice()
    for template in _templates(rs):
        (c,) = template["spec"]["containers"]
        ref = _env(c)["SPECFLIP_CONTROL_TOKEN"]["valueFrom"]["secretKeyRef"]
        assert ref == {"name": "specflip-control", "key": "token"}
    assert "control_token" not in app_args(rs).get("serve", {}), "the token must not sit in serveConfigV2"


def test_every_ray_container_switches_serves_direct_streaming_on() -> None:
    """Serve reads these at import in every Ray process: without them the app refuses to build. The
    body goes to the request router only where class routing reads it (here off: HAProxy then
    routes without waiting for the body)."""
    from deployments.app import config_from_args
    from deployments.config import FORWARD_BODY, required_env

    needed = required_env(config_from_args(app_args(rayservice())))
    assert FORWARD_BODY not in needed  # the manifest's app routes by load, not by class
    for template in _templates(rayservice()):
        (c,) = template["spec"]["containers"]
        env = _env(c)
        assert {k: env.get(k, {}).get("value") for k in needed} == needed
        assert FORWARD_BODY not in env


def test_worker_probes_catch_a_stuck_replica() -> None:
    """KubeRay 4685: liveness must look at the Serve replica, not only at the raylet."""
    (c,) = gpu_group(rayservice())["template"]["spec"]["containers"]
    assert c["readinessProbe"]["exec"]["command"][-2:] == ["/opt/specflip/probe.py", "ready"]
    assert c["livenessProbe"]["exec"]["command"][-2:] == ["/opt/specflip/probe.py", "live"]
    env = _env(c)
    assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    assert float(env["SPECFLIP_PROBE_STUCK_AFTER_S"]["value"]) >= 300
    # The probe's own HTTP timeouts (3 s + 8 s) fit inside the kubelet's.
    assert c["livenessProbe"]["timeoutSeconds"] > 11 and c["readinessProbe"]["timeoutSeconds"] > 11
    assert "startupProbe" in c, "liveness must not run before the raylet is up"


def test_head_probes_do_not_depend_on_serve() -> None:
    """A head readiness failure would cut workers off the GCS (KubeRay PR 1808): raylet+GCS only."""
    (c,) = rayservice()["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]["containers"]
    for probe in ("readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"] == {"path": "/api/healthz", "port": 52365}
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports["dashboard"] == 8265, "the worker liveness probe reads Serve state from the head dashboard"
    assert ports["serve"] == 8000, "the PodMonitor scrapes /metrics through the head's Serve proxy"


def test_upgrade_strategy_is_new_cluster() -> None:
    assert rayservice()["spec"]["upgradeStrategy"] == {"type": "NewCluster"}


def test_every_ray_container_runs_the_same_image_and_ray_version_matches_the_pin() -> None:
    rs = rayservice()
    images = {c["image"] for t in _templates(rs) for c in t["spec"]["containers"]}
    assert len(images) == 1, images
    assert rs["spec"]["rayClusterConfig"]["rayVersion"] == "2.60.0"
