"""The app graph as Serve builds it from args, a specflip YAML, and Serve config YAMLs (no cluster)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from ray.serve._private.api import call_user_app_builder_with_args_if_necessary
from ray.serve._private.utils import import_attr
from ray.serve.schema import ServeDeploySchema

import deployments.app as app_module
from deployments.app import (
    CPU_ENV,
    LOAD_ROUTER_CLASS,
    REPLICA_ENV,
    ROUTER_CLASS,
    assemble,
    build_app,
    config_from_args,
)
from deployments.config import FORWARD_BODY, ConfigError, SpecFlipConfig, required_env, serve_env

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "deployments" / "examples"
GPU_ARGS = {"model": {"path": "/m/target", "draft_path": "/m/draft"}, "replicas": {"count": 3, "num_gpus": 1}}


def _graph(app: Any) -> tuple[Any, Any]:
    """(ingress request router deployment, replica deployment) of a built application: the
    replicas are the app's ingress (each serves the API), Ray's LLMRouter picks one per request."""
    router = app._ingress_request_router._bound_deployment  # noqa: SLF001 - Serve keeps the graph here
    return router, app._bound_deployment  # noqa: SLF001


def _bundles(server: Any) -> list[dict[str, float]]:
    return server._replica_config.placement_group_bundles  # noqa: SLF001


def test_gpu_replicas_each_get_one_bundle_with_their_gpu_and_the_actor_sees_it() -> None:
    router, server = _graph(build_app(GPU_ARGS))
    assert router.name == "LLMRouter" and router.ray_actor_options["num_cpus"] == 0
    assert server.name == "SpecFlipServer:specflip" and server.num_replicas == 3
    assert _bundles(server) == [{"CPU": 1.0, "GPU": 1.0}]
    assert server.ray_actor_options["num_gpus"] == 1.0  # the in-process engine needs CUDA_VISIBLE_DEVICES
    assert server.ray_actor_options["runtime_env"]["env_vars"] == REPLICA_ENV  # no CPU switches


def test_cpu_replicas_ask_for_no_gpu_and_switch_the_cpu_shim_on() -> None:
    args = {**GPU_ARGS, "engine": {"device": "cpu"}, "replicas": {"count": 2, "num_gpus": 0, "num_cpus": 2}}
    _, server = _graph(build_app(args))
    assert _bundles(server) == [{"CPU": 2.0}] and "num_gpus" not in server.ray_actor_options
    assert server.ray_actor_options["runtime_env"]["env_vars"] == {**REPLICA_ENV, **CPU_ENV}


def test_replica_env_reaches_the_replicas_on_gpu_and_adds_to_the_cpu_switches() -> None:
    env = {"SGLANG_SIMULATE_ACC_LEN": "3"}
    _, server = _graph(build_app({**GPU_ARGS, "replicas": {"count": 2, "env": env}}))
    assert server.ray_actor_options["runtime_env"]["env_vars"] == {**REPLICA_ENV, **env}
    cpu = {**GPU_ARGS, "engine": {"device": "cpu"}, "replicas": {"count": 1, "env": env}}
    _, server = _graph(build_app(cpu))
    assert server.ray_actor_options["runtime_env"]["env_vars"] == {**REPLICA_ENV, **CPU_ENV, **env}


def test_the_config_and_the_factory_reach_the_replicas() -> None:
    config = SpecFlipConfig.parse(GPU_ARGS)

    def failing_factory(cfg: SpecFlipConfig) -> Any:  # never called here: only bound
        raise RuntimeError("injected")

    _, server = _graph(assemble(config, engine_factory=failing_factory))
    assert server.init_kwargs["config"] == config
    assert server.init_kwargs["engine_factory"] is failing_factory
    assert _graph(build_app(GPU_ARGS))[1].init_kwargs["engine_factory"].__name__ == "build_specflip_engine"


def test_args_are_a_config_path_or_inline_sections_but_not_both(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("model: {path: rel/target, draft_path: /abs/draft}\n")
    from_file = config_from_args({"config": str(path)})
    assert from_file.model.path == str(tmp_path / "rel" / "target")  # relative to the file
    assert from_file.model.draft_path == "/abs/draft"
    assert config_from_args(GPU_ARGS).replicas.count == 3
    with pytest.raises(ConfigError, match="not both"):
        config_from_args({"config": str(path), "policy": {}})
    with pytest.raises(
        ConfigError, match=r"args: replicas.count: Input should be greater than or equal to 1"
    ):
        build_app({**GPU_ARGS, "replicas": {"count": 0}})


@pytest.mark.parametrize("serve_yaml", ["serve-cpu.yaml", "serve-inline.yaml"])
def test_serve_config_files_validate_and_build_through_the_import_path(
    serve_yaml: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)  # serve run resolves args.config against its working directory
    schema = ServeDeploySchema.model_validate(yaml.safe_load((EXAMPLES / serve_yaml).read_text()))
    for app_schema in schema.applications:
        builder = import_attr(app_schema.import_path)
        app = call_user_app_builder_with_args_if_necessary(builder, app_schema.args)
        assert _graph(app)[1].num_replicas >= 1


@pytest.mark.parametrize("example", ["cpu-tiny.yaml", "h200-llama8b.yaml"])
def test_example_configs_are_valid(example: str) -> None:
    config = config_from_args({"config": str(EXAMPLES / example)})
    assert config.model.path.startswith("/") and config.speculative


def test_an_app_built_without_serves_haproxy_switched_on_says_how_in_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("RAY_SERVE_ENABLE_HA_PROXY")
    with pytest.raises(
        ConfigError, match="RAY_SERVE_ENABLE_HA_PROXY=1 in the environment of Ray's processes"
    ):
        build_app(GPU_ARGS)


def _router_class(server: Any) -> str:
    return str(server._deployment_config.request_router_config.request_router_class)  # noqa: SLF001


@pytest.mark.parametrize("forward", [None, "0", "1"], ids=["unset", "off", "on"])
def test_without_class_routing_the_app_builds_whether_the_body_is_forwarded_or_not(
    forward: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default router (power of two by load) reads no body: the app needs no forwarding, and
    one exported for another app does no harm (it only costs HAProxy's wait for the body)."""
    if forward is None:
        monkeypatch.delenv(FORWARD_BODY, raising=False)
    else:
        monkeypatch.setenv(FORWARD_BODY, forward)
    _, server = _graph(build_app(GPU_ARGS))
    assert _router_class(server) == LOAD_ROUTER_CLASS


def test_class_routing_without_the_body_forwarded_is_refused_in_one_line_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    args = {**GPU_ARGS, "routing": {"class_routing": True}}
    for forward in (None, "0"):
        if forward is None:
            monkeypatch.delenv(FORWARD_BODY, raising=False)
        else:
            monkeypatch.setenv(FORWARD_BODY, forward)
        with pytest.raises(ConfigError) as refused:
            build_app(args)
        assert str(refused.value).startswith(
            "specflip needs RAY_SERVE_INGRESS_REQUEST_ROUTER_FORWARD_BODY=1 (routing.class_routing routes "
            "on the request body) in the environment of Ray's processes"
        ) and "\n" not in str(refused.value)
    monkeypatch.setenv(FORWARD_BODY, "1")
    _, server = _graph(build_app(args))
    assert _router_class(server) == ROUTER_CLASS


def test_specflip_serve_forwards_the_body_to_the_router_only_with_class_routing() -> None:
    """What `specflip serve` (deployments.local) exports before Ray starts: forwarding on with class
    routing, and explicitly off without (not inherited from the shell), which the build check accepts."""
    off = SpecFlipConfig.parse(GPU_ARGS)
    on = SpecFlipConfig.parse({**GPU_ARGS, "routing": {"class_routing": True}})
    assert not off.class_routing and on.class_routing
    assert serve_env(off)[FORWARD_BODY] == "0" and FORWARD_BODY not in required_env(off)
    assert serve_env(on)[FORWARD_BODY] == "1" == required_env(on)[FORWARD_BODY]
    # without a draft nothing speculates, so class routing stays off whatever the routing section says
    plain = SpecFlipConfig.parse({"model": {"path": "/m/target"}, "routing": {"class_routing": True}})
    assert not plain.class_routing and serve_env(plain)[FORWARD_BODY] == "0"


def test_the_removed_data_path_setting_is_refused_with_the_reason() -> None:
    with pytest.raises(ConfigError, match="data_path was removed: every replica serves the API itself"):
        build_app({**GPU_ARGS, "serve": {"data_path": "ingress"}})


REAL_MODEL_EXAMPLES = {"h200-llama8b.yaml"}  # a trained model writes JSON without padding it


@pytest.mark.parametrize(
    "example",
    sorted(p.name for p in EXAMPLES.glob("*.yaml") if p.name not in ("serve-cpu.yaml", "serve-inline.yaml")),
)
def test_example_configs_serve_structured_output_that_completes(example: str) -> None:
    """The tiny pair (and random weights) pad grammar-constrained JSON with whitespace until
    max_tokens: 0 of 90 JSON and tool answers completed on cpu-tiny.yaml without SGLang's
    constrained_json_disable_any_whitespace (the reliability report). Every example on such a model sets it, as
    the CPU default does (whose JSON answers complete: test_serve_structured.py)."""
    config = config_from_args({"config": str(EXAMPLES / example)})
    flag = config.engine.extra.get("constrained_json_disable_any_whitespace")
    assert flag is (None if example in REAL_MODEL_EXAMPLES else True), (example, config.engine.extra)
    if example not in REAL_MODEL_EXAMPLES:
        from deployments.defaults import cpu_demo_config

        default = cpu_demo_config(("/t", "/d")).engine.extra
        assert default["constrained_json_disable_any_whitespace"] is True


def test_module_level_app_reads_specflip_config_else_needs_the_tiny_pair(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SPECFLIP_CONFIG", str(EXAMPLES / "h200-llama8b.yaml"))
    assert _graph(app_module.app)[1].num_replicas == 8
    monkeypatch.delenv("SPECFLIP_CONFIG")
    monkeypatch.setenv("SPECFLIP_PAIR_DIR", str(tmp_path / "no-pair"))
    with pytest.raises(ConfigError, match="specflip models build --out"):
        _ = app_module.app
    monkeypatch.setenv("SPECFLIP_PAIR_DIR", os.environ.get("SPECFLIP_MODELS", "/tmp/pair0"))
    if (Path(os.environ["SPECFLIP_PAIR_DIR"]) / "target" / "config.json").exists():
        assert _graph(app_module.app)[1].num_replicas == 2  # the embedded CPU default
