"""Shared helpers for the k8s/ tests: where things are, and loading manifests."""

from __future__ import annotations

import copy
import functools
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "k8s"

# Kubernetes versions the core manifests are checked against (oldest still common, newest bundled).
KUBERNETES_VERSIONS = ("1.30", "1.37")


def crd_dir() -> Path:
    """KubeRay CRDs: $SPECFLIP_KUBERAY_CRDS, else ../shared/kuberay next to the repository."""
    env = os.environ.get("SPECFLIP_KUBERAY_CRDS")
    return Path(env) if env else REPO.parent / "shared" / "kuberay"


def crd_file(name: str) -> Path:
    """Path of a KubeRay CRD file; skips the test (saying where it looked) if it is absent."""
    path = crd_dir() / name
    if not path.is_file():
        pytest.skip(
            f"KubeRay CRD {name} not found at {path}: set SPECFLIP_KUBERAY_CRDS to the directory "
            f"holding ray-operator/config/crd/bases/{name} to run the CRD schema checks"
        )
    return path


@functools.cache
def load_crd(name: str) -> dict[str, Any]:
    """A KubeRay CRD, parsed once per test session (1 MB of YAML: the C loader when present)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with open(crd_file(name)) as f:
        return yaml.load(f, Loader=loader)  # noqa: S506 (a safe loader)


def load_all(name: str) -> list[dict[str, Any]]:
    """Every YAML document of a file under k8s/, empty documents dropped."""
    with open(K8S / name) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def load_one(name: str, kind: str) -> dict[str, Any]:
    docs = [d for d in load_all(name) if d.get("kind") == kind]
    assert len(docs) == 1, f"k8s/{name}: expected one {kind}, found {len(docs)}"
    return docs[0]


def rayservice() -> dict[str, Any]:
    return load_one("rayservice.yaml", "RayService")


def serve_config(rs: dict[str, Any] | None = None) -> dict[str, Any]:
    """serveConfigV2 of the RayService, parsed (it is a YAML string inside the manifest)."""
    text = (rs or rayservice())["spec"]["serveConfigV2"]
    assert isinstance(text, str), "serveConfigV2 must be a YAML string (a block scalar), not a mapping"
    return yaml.safe_load(text)


def app_args(rs: dict[str, Any] | None = None) -> dict[str, Any]:
    apps = serve_config(rs)["applications"]
    (app,) = [a for a in apps if a["import_path"] == "deployments.app:build_app"]
    return app["args"]


def gpu_group(rs: dict[str, Any]) -> dict[str, Any]:
    (group,) = [g for g in rs["spec"]["rayClusterConfig"]["workerGroupSpecs"] if g["groupName"] == "gpu"]
    return group


def edited(
    doc: dict[str, Any], path: str, value: Any = None, *, delete: bool = False, rename: str | None = None
) -> dict[str, Any]:
    """A deep copy of `doc` with one field set, deleted or renamed. `path` is dotted; digits index lists."""
    out = copy.deepcopy(doc)
    *parents, last = path.split(".")
    node: Any = out
    for p in parents:
        node = node[int(p)] if isinstance(node, list) else node[p]
    key: Any = int(last) if isinstance(node, list) else last
    if rename is not None:
        node[rename] = node.pop(key)
    elif delete:
        del node[key]
    else:
        node[key] = value
    return out
