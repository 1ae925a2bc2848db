"""serveConfigV2 in k8s/rayservice.yaml is a Serve config Ray 2.60 accepts, and its args are a specflip config.

Ray's schema (`ray.serve.schema.ServeDeploySchema`, pydantic v2 in Ray 2.60) is what
`serve deploy` and the KubeRay operator's PUT /api/serve/applications/ apply. It ignores
unknown keys on purpose (forward compatibility), so a misspelled option would silently do
nothing: the strict key walk below rejects those too. The application args go through the
project's own config model (`SpecFlipConfig.parse`), so a field renamed on the deployments
side fails here rather than at pod start.
"""

from __future__ import annotations

import copy
import importlib
import typing
from typing import Any

import pytest
import yaml
from pydantic import BaseModel
from ray.serve.schema import ServeDeploySchema

from deployments.config import ConfigError, SpecFlipConfig
from tests.k8s.manifests import app_args, edited, rayservice, serve_config


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside an annotation such as Optional[M] or List[M], if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def unknown_keys(model: type[BaseModel], data: Any, path: str = "") -> list[str]:
    """Keys of `data` that `model` (recursively) does not declare: what Serve would silently ignore."""
    if not isinstance(data, dict):
        return []
    fields = {(f.alias or name): f for name, f in model.model_fields.items()}
    found = []
    for key, value in data.items():
        where = f"{path}.{key}" if path else key
        if key not in fields:
            found.append(where)
            continue
        inner = _model_in(fields[key].annotation)
        if inner is None:
            continue  # a plain value or dict (e.g. `args`, checked by SpecFlipConfig)
        items = value if isinstance(value, list) else [value]
        for i, item in enumerate(items):
            found += unknown_keys(inner, item, f"{where}.{i}" if isinstance(value, list) else where)
    return found


def test_serve_config_parses_with_ray_serve_schema() -> None:
    cfg = serve_config()
    schema = ServeDeploySchema.model_validate(cfg)
    (app,) = schema.applications
    assert app.import_path == "deployments.app:build_app"
    assert schema.http_options.port == 8000, "the probes, the PodMonitor and the Service expect Serve on 8000"
    assert unknown_keys(ServeDeploySchema, cfg) == []


def test_app_args_are_a_valid_specflip_config() -> None:
    config = SpecFlipConfig.parse(app_args(), source="k8s/rayservice.yaml serveConfigV2 args")
    assert config.engine.device.value == "cuda"
    assert config.replicas.num_gpus == 1
    assert config.model.draft_path, "EAGLE-3 needs a draft"
    assert config.serve.control_token is None, "the token comes from the Secret, not the manifest"


def _serve_edit(path: str, **edit: Any) -> dict[str, Any]:
    """serveConfigV2 (parsed) with one edit applied."""
    return edited(serve_config(), path, **edit)


@pytest.mark.parametrize(
    ("what", "cfg", "needle"),
    [
        (
            "misspelled app field",
            _serve_edit("applications.0.import_path", rename="import_pth"),
            "import_path",
        ),
        ("wrong type", _serve_edit("http_options.port", value="eight thousand"), "port"),
        ("missing required", _serve_edit("applications", delete=True), "applications"),
        ("bad import path", _serve_edit("applications.0.import_path", value="deployments"), "import path"),
    ],
)
def test_serve_schema_rejects_a_wrong_config(what: str, cfg: dict[str, Any], needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        ServeDeploySchema.model_validate(cfg)


@pytest.mark.parametrize(
    ("cfg", "unknown"),
    [
        (_serve_edit("http_options.keep_alive_timeout", value=75), "http_options.keep_alive_timeout"),
        (_serve_edit("applications.0.route_prefx", value="/"), "applications.0.route_prefx"),
        (_serve_edit("proxy_locaton", value="EveryNode"), "proxy_locaton"),
    ],
)
def test_keys_serve_would_silently_ignore_are_reported(cfg: dict[str, Any], unknown: str) -> None:
    ServeDeploySchema.model_validate(cfg)  # Serve itself accepts these ...
    assert unknown_keys(ServeDeploySchema, cfg) == [unknown]  # ... the test does not


@pytest.mark.parametrize(
    ("what", "path", "edit", "needle"),
    [
        ("unknown section", "speculation.stepz", dict(value=3), "stepz"),
        ("wrong type", "replicas.count", dict(value="two"), "replicas.count"),
        ("missing required model path", "model.path", dict(delete=True), "model.path"),
        ("inconsistent speculation shape", "speculation.draft_tokens", dict(value=9), "draft_tokens"),
    ],
)
def test_specflip_config_rejects_wrong_args(what: str, path: str, edit: dict[str, Any], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        SpecFlipConfig.parse(edited(app_args(), path, **edit))


def test_app_args_build_the_serve_application() -> None:
    """The exact args KubeRay hands to `deployments.app:build_app` build an app (on CPU: building binds, starts nothing)."""
    from ray.serve import Application

    module = importlib.import_module("deployments.app")
    args = copy.deepcopy(app_args())
    args.setdefault("engine", {})["device"] = "cpu"
    app = module.build_app(args)
    assert isinstance(app, Application)


def test_manifest_serve_config_is_a_yaml_string() -> None:
    """KubeRay wants serveConfigV2 as a string; a mapping would fail the CRD (type: string)."""
    assert isinstance(rayservice()["spec"]["serveConfigV2"], str)
    assert yaml.safe_load(rayservice()["spec"]["serveConfigV2"]) == serve_config()
