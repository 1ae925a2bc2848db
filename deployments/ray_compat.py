"""Every private Ray API specflip uses, in one place, checked against the one Ray release it was
written for (`ray[serve]==2.60.0`, pinned in pyproject.toml).

Importing this module on another Ray release raises `UnsupportedRayVersion` with the fix, before
any private name is touched. The rest of `deployments/` imports Ray's private names only from
here. Each one says what it is, why the public API does not do, and when it can go.
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import logging
import textwrap
import time
from collections.abc import Iterator
from typing import Any

import ray

__all__ = [
    "direct_streaming_app",
    "RAY_VERSION",
    "ChatCompletionResponse",
    "CompletionResponse",
    "ModelCard",
    "ModelList",
    "PowerOfTwoChoicesRequestRouter",
    "PrefixTree",
    "SGLangServer",
    "UnsupportedRayVersion",
    "actor_record",
    "actor_restarts",
    "check_ray_version",
    "standalone_request_router",
    "stop_serve",
    "init_sglang_server_without_engine",
    "sglang_server_state_not_set",
    "to_model_metadata",
]

RAY_VERSION = "2.60.0"


class UnsupportedRayVersion(RuntimeError):
    """The installed Ray is not the release specflip's use of Ray internals was written against."""


def check_ray_version(found: str | None = None) -> str:
    found = ray.__version__ if found is None else found
    if found != RAY_VERSION:
        raise UnsupportedRayVersion(
            f"specflip uses Ray Serve LLM internals of Ray {RAY_VERSION} exactly, found {found}: "
            f"run `pip install 'ray[serve]=={RAY_VERSION}'` (or a specflip release that supports {found})"
        )
    return found


check_ray_version()

# What each private name is for, and when it can go:
# - SGLangServer: base class of SpecFlipServer. Ray exports no server class for SGLang (ray.serve.llm
#   has only LLMServer, the vLLM one). Goes when ray.serve.llm exports an SGLang server class.
# - ChatCompletionResponse, CompletionResponse: document the routes' 200s in the OpenAPI schema
#   (the requests are specflip's own models, deployments.http.openai_models), and ModelList,
#   ModelCard the model routes'. ray.serve.llm.openai_api_models has public subclasses. Go when
#   specflip has its own.
# - to_model_metadata: the model card `/v1/models` answers (Ray's own docs example imports it from
#   here too). Goes when ray.serve.llm exports it.
# - Direct streaming (Ray 2.60, experimental in Ray): the server deployment becomes the ingress and
#   serves the engine's own OpenAI ASGI app (SGLangServer.__serve_build_asgi_app__); HAProxy asks an
#   ingress request router deployment (Ray's LLMRouter, which picks through the server deployment's
#   request router) for a replica and connects the client to it. Public only as
#   `build_openai_app` with RAY_SERVE_LLM_ENABLE_DIRECT_STREAMING=1, which cannot bind a server class's
#   constructor arguments. Goes when ray.serve.llm has a direct-streaming builder taking bind kwargs.
# - PrefixTree: the multi-tenant radix tree of Ray's own PrefixCacheAffinityRouter, which the
#   request router (deployments.routing.router) keeps in its own process for prefix-cache affinity (Ray's
#   router keeps it in a detached actor and calls it with a blocking ray.get per request).
#   ray.serve.llm.request_router exports the router, not the tree. Goes when the tree is public.
from ray.llm._internal.serve.core.configs.openai_api_models import (  # noqa: E402
    ChatCompletionResponse,
    CompletionResponse,
    ModelCard,
    ModelList,
    to_model_metadata,
)

# - PowerOfTwoChoicesRequestRouter: Serve's default request router, the base of the app's router
#   when class routing is off (deployments.routing.power_of_two): Ray's direct-streaming builder
#   pins RoundRobinRouter unless a router is configured, and ray.serve.request_router exports the
#   base class and mixins but not this policy. Goes when ray.serve.request_router exports it.
# - The builders' loggers: Ray's LLM builders log every deployment's options (a 20-line dict) at
#   INFO on the console of the process building the app; the app builds with them at WARNING.
#   Goes when Ray logs the options at DEBUG.
from ray.llm._internal.serve.core.ingress import builder as _ingress_builder  # noqa: E402
from ray.llm._internal.serve.core.ingress.builder import (  # noqa: E402
    _build_direct_streaming_llm_deployment,
    _build_openai_ingress_request_router,
)
from ray.llm._internal.serve.core.server import builder as _server_builder  # noqa: E402
from ray.llm._internal.serve.engines.sglang import SGLangServer  # noqa: E402
from ray.llm._internal.serve.routing_policies.prefix_aware.prefix_tree import PrefixTree  # noqa: E402
from ray.serve._private.request_router import PowerOfTwoChoicesRequestRouter  # noqa: E402


@contextlib.contextmanager
def _builders_quiet() -> Iterator[None]:
    loggers = [logging.getLogger(m.logger.name) for m in (_ingress_builder, _server_builder)]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def direct_streaming_app(llm_config: Any, bind_kwargs: dict[str, Any]) -> Any:
    """The server deployment as a direct-streaming ingress, with Ray's ingress request router."""
    with _builders_quiet():
        server = _build_direct_streaming_llm_deployment(llm_config, bind_kwargs=bind_kwargs)
        router = _build_openai_ingress_request_router(server=server, llm_config=llm_config)
    return server._with_ingress_request_router(router)


# - stop_serve: serve.shutdown() waits on the controller's graceful_shutdown(wait=True), a call
#   that only ends when the controller kills itself, and Ray reports that call's failure on the
#   driver's console in yellow at every clean stop ("Task ServeController.graceful_shutdown
#   failed ... killed by `ray.kill`"). Here the controller is told without waiting, and its end is
#   watched through the GCS (its name going away), so no call is in flight when it dies; then the
#   driver's Serve client is dropped, as serve.shutdown does. Uses Serve's cached client and its
#   controller handle. Goes when serve.shutdown does not wait on the controller through a call.
from ray.serve._private.constants import SERVE_CONTROLLER_NAME, SERVE_NAMESPACE  # noqa: E402
from ray.serve.context import _check_cached_client_alive, _disconnect  # noqa: E402


def stop_serve(timeout_s: float = 30.0) -> None:
    """Shut Serve down on this cluster (what serve.shutdown does), quietly; at most ~`timeout_s`."""
    from ray import serve

    client, _ = _check_cached_client_alive()
    if client is None:  # no client of this session: Serve's own path
        serve.shutdown()
        return
    client.shutdown_cached_handles()
    ray.get(client._controller.graceful_shutdown.remote(False), timeout=timeout_s)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            ray.get_actor(SERVE_CONTROLLER_NAME, namespace=SERVE_NAMESPACE)
        except ValueError:  # the controller is gone
            break
        time.sleep(0.1)
    client._shutdown = True
    _disconnect()


# What SGLangServer.__init__ sets that its methods read. SpecFlipServer does not call that
# constructor: it builds SGLang's RayEngine (schedulers as Ray actors, one GPU per bundle), while
# a replica needs the in-process patched engine. `init_sglang_server_without_engine` sets the
# same attributes but `engine`, which SpecFlipServer then sets from its engine factory;
# `sglang_server_state_not_set()` (run by tests/deployments/test_ray_compat.py) checks that
# SGLangServer's methods read nothing else. Goes when SGLangServer takes an engine factory.
_SGLANG_SERVER_STATE = ("_llm_config", "engine_kwargs", "_is_paused", "_sleeping_tags", "engine")


def init_sglang_server_without_engine(server: SGLangServer, llm_config: Any) -> None:
    """What SGLangServer.__init__ (Ray 2.60.0) sets, except `engine` (the caller's to set)."""
    server._llm_config = llm_config
    server.engine_kwargs = dict(llm_config.engine_kwargs)
    server._is_paused = False
    server._sleeping_tags = set()


def sglang_server_state_not_set() -> set[str]:
    """Instance attributes SGLangServer's methods read that `init_sglang_server_without_engine`
    does not set (empty: the shortcut is complete for this Ray)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(SGLangServer)))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef))
    defined = {n.name for n in cls.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
    read = {
        node.attr
        for node in ast.walk(cls)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
        and isinstance(node.ctx, ast.Load)
    }
    return read - defined - set(_SGLANG_SERVER_STATE)


# An actor's GCS record (its NumRestarts; its owner's address), read through Ray's debugging
# accessor `ray._private.state.actors` (the public state API needs the dashboard). Goes when
# ray.util.state works without the dashboard or actor handles expose it.
def actor_record(handle: Any) -> dict[str, Any]:
    """The GCS actor table's record of the actor behind `handle` ({} if the GCS does not say)."""
    from ray._private import state

    try:
        info = state.actors(handle._actor_id.hex())
    except Exception:  # noqa: BLE001 - a debugging accessor: any failure means "unknown"
        return {}
    return info if isinstance(info, dict) else {}


def actor_restarts(handle: Any) -> int | None:
    """Times Ray restarted the actor behind `handle` (None if the GCS does not say)."""
    value = actor_record(handle).get("NumRestarts")
    return int(value) if isinstance(value, int) else None


# - DeploymentID, DeploymentHandleSource: what RequestRouter's constructor takes; Serve builds
#   routers itself, so its public API has no way to build one outside a running app. Used only
#   to time and test a router in a plain process (loadtests/bench/routing_cost.py). Goes when
#   ray.serve.request_router exports them (ReplicaID already is).
from ray.serve._private.common import DeploymentHandleSource, DeploymentID  # noqa: E402


def standalone_request_router(
    router_cls: Any, deployment: str = "SpecFlipServer", app: str = "default", **state: Any
) -> tuple[Any, Any]:
    """(a router of `router_cls` outside Serve with `initialize_state(**state)` run, a function
    `replica_id(unique_id)` making ReplicaIDs of its deployment)."""
    from ray.serve.request_router import ReplicaID

    deployment_id = DeploymentID(name=deployment, app_name=app)
    router = router_cls(
        deployment_id=deployment_id,
        handle_source=DeploymentHandleSource.UNKNOWN,
        use_replica_queue_len_cache=True,
    )
    router.initialize_state(**state)
    return router, lambda unique_id: ReplicaID(unique_id=unique_id, deployment_id=deployment_id)
