"""The Ray Serve application: `build_app(args)` for Serve import paths, `app` for `serve run`.

    serve run deployments.app:build_app config=specflip.yaml   # a specflip config file
    serve run deployments.app:app                              # $SPECFLIP_CONFIG, else the CPU demo
    serve deploy serve.yaml    # import_path: deployments.app:build_app, args: {config: ...} or inline

`args` is either `{"config": "<path to a specflip YAML>"}` or the config sections inline
(`{"model": {...}, "policy": {...}, ...}`). `assemble(config, engine_factory=...)` is the one
place the engine factory can be swapped (tests inject failures there).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ray.serve.deployment import Application
from ray.serve.llm import LLMConfig

from deployments.config import (
    CPU_ENV,
    FORWARD_BODY,
    POLICY_NAMESPACE,
    ConfigError,
    Device,
    SpecFlipConfig,
    load_config,
    required_env,
)
from deployments.ray_compat import direct_streaming_app
from deployments.replica.engine import EngineFactory, build_specflip_engine
from deployments.replica.server import SpecFlipServer

__all__ = [
    "CPU_ENV",
    "CONFIG_ENV",
    "REPLICA_ENV",
    "LOAD_ROUTER_CLASS",
    "ROUTER_CLASS",
    "assemble",
    "build_app",
    "config_from_args",
    "llm_config_for",
]

CONFIG_ENV = "SPECFLIP_CONFIG"
# the replica deployment's request router (an import path: Serve imports it where handles route)
ROUTER_CLASS = "deployments.routing.router.SpecFlipRouter"
LOAD_ROUTER_CLASS = "deployments.routing.power_of_two.PowerOfTwoRouter"
# Ray Serve's throughput settings, in the replicas (which serve the HTTP app and the engine's
# tokenizer manager in one process): user code on the replica's one event loop, request logs
# buffered, no per-request log line on stderr. Not in the driver: there it would forbid blocking
# handle calls. On CPU the replica's cores per streamed token fell by about a third (docs/benchmarks.md).
REPLICA_ENV = {"RAY_SERVE_THROUGHPUT_OPTIMIZED": "1"}


def config_from_args(args: SpecFlipConfig | Mapping[str, Any]) -> SpecFlipConfig:
    """Serve builder args -> a validated config (ConfigError with a one-line reason otherwise)."""
    if isinstance(args, SpecFlipConfig):
        return args
    if not isinstance(args, Mapping):
        raise ConfigError(f"args: expected a mapping, got {type(args).__name__}")
    if "config" in args:
        extra = sorted(k for k in args if k != "config")
        if extra:
            raise ConfigError(
                f"args: pass either config=<path> or the sections inline, not both (also got {extra})"
            )
        return load_config(str(args["config"]))
    return SpecFlipConfig.parse(dict(args), source="args")


def llm_config_for(config: SpecFlipConfig) -> LLMConfig:
    """Ray Serve LLM's view of the replicas: SpecFlipServer, fixed count, one bundle each."""
    r, cuda = config.replicas, config.engine.device is Device.CUDA
    bundle: dict[str, float] = {"CPU": r.num_cpus, **({"GPU": r.num_gpus} if cuda else {})}
    actor_options: dict[str, Any] = {"num_cpus": r.num_cpus, **({"num_gpus": r.num_gpus} if cuda else {})}
    deployment_config: dict[str, Any] = {
        "num_replicas": r.count,
        "max_ongoing_requests": r.max_ongoing_requests,
        "health_check_period_s": 10,
        "health_check_timeout_s": r.health_timeout_s + 5,
        "graceful_shutdown_timeout_s": config.serve.graceful_shutdown_s,
        "graceful_shutdown_wait_loop_s": 1.0,
        "ray_actor_options": actor_options,
    }
    # class routing: specflip's router; else Serve's power of two, ordered by the load replicas
    # publish (Ray's direct-streaming builder would pin round robin: deployments.routing.power_of_two)
    deployment_config["request_router_config"] = {
        "request_router_class": ROUTER_CLASS if config.class_routing else LOAD_ROUTER_CLASS,
        "request_router_kwargs": config.routing.router_kwargs(config.policy.actor_name, POLICY_NAMESPACE)
        if config.class_routing
        else {},
        "request_routing_stats_period_s": config.routing.stats_period_s,
        "request_routing_stats_timeout_s": max(1.0, 4 * config.routing.stats_period_s),
    }
    return LLMConfig(
        model_loading_config={"model_id": config.model.id, "model_source": config.model.path},
        server_cls=SpecFlipServer,
        engine_kwargs={},  # the engine factory builds the engine from the specflip config
        placement_group_config={"bundles": [bundle], "strategy": "STRICT_PACK"},
        deployment_config=deployment_config,
        runtime_env=_runtime_env(config),
        log_engine_metrics=False,
    )


def _runtime_env(config: SpecFlipConfig) -> dict[str, Any] | None:
    """The replicas' environment: Serve's throughput settings, the CPU engine's switches on cpu,
    then `replicas.env` (which can override either)."""
    env = dict(REPLICA_ENV) if config.engine.device is Device.CUDA else {**REPLICA_ENV, **CPU_ENV}
    env.update(config.replicas.env)
    return {"env_vars": env}


def assemble(config: SpecFlipConfig, *, engine_factory: EngineFactory = build_specflip_engine) -> Application:
    """The application: SpecFlipServer x replicas.count, each serving the API itself (deployments.replica.http_app)
    behind Serve's HAProxy, which asks Ray's ingress request router (LLMRouter, routing through the
    replicas' request router) for a replica per request."""
    _require_direct_streaming_env(config)
    bind_kwargs = {"config": config, "engine_factory": engine_factory}
    app: Application = direct_streaming_app(llm_config_for(config), bind_kwargs)
    return app


def _require_direct_streaming_env(config: SpecFlipConfig) -> None:
    """The app needs Serve's HAProxy (direct streaming), switched on in the environment of every Ray
    process before Ray starts, and with class routing the body forwarded to the request router: say
    so in one line instead of Serve's error at deploy time (or a class router that sees no body)."""
    missing = [f"{k}={v}" for k, v in required_env(config).items() if os.environ.get(k) != v]
    if missing:
        why = (
            " (routing.class_routing routes on the request body)" if missing == [f"{FORWARD_BODY}=1"] else ""
        )
        raise ConfigError(
            f"specflip needs {' '.join(missing)}{why} in the environment of Ray's processes and of the "
            "process building the app: export it before `ray start` / `serve run` (`specflip serve` "
            "sets it; a KubeRay RayService sets it in its containers' env, k8s/rayservice.yaml)"
        )


def build_app(args: dict[str, Any]) -> Application:
    """Serve application builder (`import_path: deployments.app:build_app`)."""
    return assemble(config_from_args(args))


def _default_app() -> Application:
    path = os.environ.get(CONFIG_ENV)
    if path:
        return build_app({"config": path})
    from deployments.defaults import cpu_demo_config, require_pair

    return assemble(cpu_demo_config(require_pair()))


def __getattr__(name: str) -> Any:
    if name == "app":  # built on first access only: importing this module starts nothing
        return _default_app()
    raise AttributeError(f"module 'deployments.app' has no attribute {name!r}")
