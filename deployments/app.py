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

from ray import serve
from ray.serve.deployment import Application
from ray.serve.llm import LLMConfig, build_llm_deployment
from ray.serve.llm.ingress import make_fastapi_ingress

from deployments.config import ConfigError, DataPath, Device, SpecFlipConfig, load_config
from deployments.engine import EngineFactory, build_specflip_engine
from deployments.errors import install_handlers
from deployments.guard import add_guard_and_cors
from deployments.ingress import SpecFlipIngress
from deployments.metrics import RequestCountMiddleware
from deployments.ray_compat import (
    direct_streaming_app,
    openai_fastapi_app,
    strip_ray_error_and_cors_middleware,
    to_model_metadata,
)
from deployments.routes import ENDPOINTS, install_openapi
from deployments.server import SpecFlipServer

__all__ = [
    "CPU_ENV",
    "CONFIG_ENV",
    "ROUTER_CLASS",
    "assemble",
    "build_app",
    "config_from_args",
    "llm_config_for",
]

CONFIG_ENV = "SPECFLIP_CONFIG"
# the replica deployment's request router (an import path: Serve imports it where handles route)
ROUTER_CLASS = "deployments.router.SpecFlipRouter"
# what every process that builds a CPU engine needs before sglang's kernels load (patched_worker.cpu)
CPU_ENV = {"SPECFLIP_CPU": "1", "SGLANG_USE_CPU_ENGINE": "1", "TORCHDYNAMO_DISABLE": "1"}


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
    if config.class_routing:
        deployment_config["request_router_config"] = {
            "request_router_class": ROUTER_CLASS,
            "request_router_kwargs": config.routing.router_kwargs(),
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
    """The replicas' environment: the CPU engine's switches on cpu, plus `replicas.env`."""
    env = {} if config.engine.device is Device.CUDA else dict(CPU_ENV)
    env.update(config.replicas.env)
    return {"env_vars": env} if env else None


def _ingress_app(config: SpecFlipConfig) -> Any:
    app = openai_fastapi_app()  # Ray's FastAPI app with its middleware
    strip_ray_error_and_cors_middleware(app)  # replaced: errors.install_handlers, CORS below
    install_handlers(app)
    install_openapi(app)
    add_guard_and_cors(app, config)
    app.add_middleware(RequestCountMiddleware)  # outermost: sees the final status of every response
    return app


def assemble(config: SpecFlipConfig, *, engine_factory: EngineFactory = build_specflip_engine) -> Application:
    """The application graph: SpecFlipIngress -> SpecFlipServer x replicas.count (`serve.data_path:
    ingress`), or SpecFlipServer x replicas.count as the ingress behind HAProxy (`direct`)."""
    llm_config = llm_config_for(config)
    bind_kwargs = {"config": config, "engine_factory": engine_factory}
    if config.serve.data_path is DataPath.DIRECT:
        app: Application = direct_streaming_app(llm_config, bind_kwargs)
        return app
    server = build_llm_deployment(llm_config, bind_kwargs=bind_kwargs)
    ingress_cls = make_fastapi_ingress(SpecFlipIngress, endpoint_map=ENDPOINTS, app=_ingress_app(config))
    # one ingress replica: its metrics stay monotonic for Prometheus; it does no heavy work
    ingress: Any = serve.deployment(
        ingress_cls,
        name="SpecFlipIngress",
        num_replicas=1,
        max_ongoing_requests=100_000,
        ray_actor_options={"num_cpus": 0},
        graceful_shutdown_timeout_s=config.serve.graceful_shutdown_s,
        graceful_shutdown_wait_loop_s=1.0,
    )
    return ingress.bind(
        llm_deployments={config.model.id: server},
        model_cards={config.model.id: to_model_metadata(config.model.id, llm_config)},
        config=config,
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
