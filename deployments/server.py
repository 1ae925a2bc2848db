"""`SpecFlipServer`: the Ray Serve LLM server class of one replica, hosting the patched engine.

A subclass of Ray's `SGLangServer` (a private Ray 2.60 class, from deployments.ray_compat), which
builds SGLang's `RayEngine` (one GPU per bundle). This one builds the engine in-process through
the injected `EngineFactory` (default: `SpecFlipEngine`, cpu or cuda) and takes its placement
bundle from `LLMConfig.placement_group_config["bundles"]` (no GPU on cpu). Chat, completions,
SSE streaming, tokenize and `/v1/models` are inherited; on top:

- a warm-up before the replica takes traffic (deployments.warmup; an async constructor, which
  Serve awaits before it marks the replica ready);
- the control loop (`SpeculationLoop`): report load to the policy actor every tick, apply the
  desired mode;
- a health check that probes the engine (a scheduler round trip with a timeout);
- SGLang sampling extras (`ignore_eos`, `top_k`, `min_tokens`, ...) passed through when set;
- `stream_options.include_usage`: a final usage chunk on streams (OpenAI semantics);
- streams coalesced per `serve.stream_batching_interval_ms` (deployments.coalesce): the first
  chunk at once, then one packet per window;
- engine input errors (e.g. prompt + max_tokens beyond the context) become 400s, not 500s.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import os
import time
import uuid
from collections.abc import AsyncGenerator
from typing import Any

from deployments.coalesce import coalesce
from deployments.config import SpecFlipConfig
from deployments.control_routes import ControlRoutes
from deployments.engine import EngineFactory, ReplicaEngine, build_specflip_engine
from deployments.ray_compat import SGLangServer, add_models_retrieve_route, init_sglang_server_without_engine
from deployments.replica_loop import SpeculationLoop
from deployments.warmup import warm_up

__all__ = ["EngineInputError", "SpecFlipServer", "replica_id"]

log = logging.getLogger(__name__)

# request fields SGLang's sampling params understand, passed through when the client sets them
_SAMPLING_EXTRAS = (
    "top_k",
    "min_p",
    "min_tokens",
    "ignore_eos",
    "repetition_penalty",
    "frequency_penalty",
    "presence_penalty",
    "stop_token_ids",
    "no_stop_trim",
    "skip_special_tokens",
)


_STATS_READ_TIMEOUT_S = 0.5  # a routing-stats state read waits this long, then uses the last tick's


def replica_id() -> str:
    """Serve's replica id (`replica_tag`) inside a replica; a process-unique id elsewhere."""
    from ray import serve
    from ray.serve.exceptions import RayServeException

    try:
        return str(serve.get_replica_context().replica_tag)
    except RayServeException:
        return f"local-{os.getpid()}"


class _Usage:
    __slots__ = ("completion_tokens", "prompt_tokens")

    def __init__(self) -> None:
        self.prompt_tokens = 0
        self.completion_tokens = 0


class SpecFlipServer(SGLangServer):
    async def __init__(  # type: ignore[misc]  # Serve awaits an async constructor
        self,
        llm_config: Any,
        *,
        config: SpecFlipConfig,
        engine_factory: EngineFactory = build_specflip_engine,
    ) -> None:
        # SGLangServer.__init__ would build RayEngine: set what its methods use instead (ray_compat)
        init_sglang_server_without_engine(self, llm_config)
        self._usage: dict[int, _Usage] = {}
        self.config = config
        self.replica_id = replica_id()
        started = time.monotonic()
        self.engine: ReplicaEngine = engine_factory(config)
        log.info("replica %s: engine up in %.1f s", self.replica_id, time.monotonic() - started)
        if config.replicas.warm_up:  # Serve marks the replica ready only once this returns
            took = await warm_up(self.engine, config.speculation.start_enabled)
            log.info("replica %s: warm-up (ON, OFF, resync) in %.1f s", self.replica_id, took)

        from policy.actor import PolicyClient

        r = config.replicas
        reporter = PolicyClient(
            self.replica_id,
            config.policy.actor_name,
            config.policy_config(),
            fail_after=r.fallback_after_ticks,
            timeout_s=r.report_timeout_s,
        )
        self.loop = SpeculationLoop(
            self.engine, reporter, self.replica_id, tick_s=r.tick_s, probe_timeout_s=r.health_timeout_s
        )
        self._class_rule = config.routing.class_rule()
        self._interactive = 0
        self.loop.interactive_in_flight = lambda: self._interactive
        self.loop.start()  # the constructor runs on the replica's user event loop

    @classmethod
    def get_deployment_options(cls, llm_config: Any) -> dict[str, Any]:
        opts: dict[str, Any] = super().get_deployment_options(llm_config)
        pg = llm_config.placement_group_config or {}
        if pg.get("bundles"):  # Ray LLM's own vocabulary; SGLangServer reads another key
            opts["placement_group_bundles"] = copy.deepcopy(pg["bundles"])
            opts["placement_group_strategy"] = pg.get("strategy", "STRICT_PACK")
        return opts

    async def __serve_build_asgi_app__(self) -> Any:
        """`serve.data_path: direct`: the HTTP app this replica serves itself behind Serve's HAProxy:
        SGLang's own OpenAI routes on this replica's engine (patched_worker.http_app), the models
        route Ray's ingress would serve, and specflip's /specflip/* and /metrics."""
        from patched_worker.http_app import native_openai_app

        app = native_openai_app(self.engine)
        add_models_retrieve_route(app, self._llm_config)
        ControlRoutes(self.config).add_to(app)
        app.add_middleware(_RoutingHeaders, server=self)
        return app

    def current_mode(self) -> str:
        """The mode new requests run here ("on" | "off"; "unknown" before the first state read)."""
        state = getattr(getattr(self, "loop", None), "last_state", None)
        if state is None or not state.patched:
            return "unknown"
        return "on" if state.requested else "off"

    async def check_health(self) -> None:
        await self.loop.check_health()

    async def record_routing_stats(self) -> dict[str, Any]:
        """Serve's request-router hook, polled every `routing.stats_period_s`: this replica's mode
        and load for `deployments.router.SpecFlipRouter` (policy.routing.ReplicaStats)."""
        loop = getattr(self, "loop", None)
        if loop is None:  # still starting
            return {}
        stats = await loop.routing_stats(timeout_s=_STATS_READ_TIMEOUT_S)
        return {} if stats is None else stats.to_routing_stats()

    def __del__(self) -> None:
        """Serve calls this on a graceful replica shutdown: stop ticking, stop the engine's processes."""
        loop, engine = getattr(self, "loop", None), getattr(self, "engine", None)
        if loop is not None:
            with contextlib.suppress(Exception):  # its event loop may be closed already
                loop.stop()
        if engine is not None:
            with contextlib.suppress(Exception):  # already gone, or never fully started
                engine.shutdown()

    # -- generation: sampling extras, input errors as 400 -------------------------------------
    @staticmethod
    def _build_sampling_params(request: Any) -> dict[str, Any]:
        params: dict[str, Any] = SGLangServer._build_sampling_params(request)
        fields_set: set[str] = getattr(request, "model_fields_set", set())
        for name in _SAMPLING_EXTRAS:
            if name in fields_set and getattr(request, name, None) is not None:
                params[name] = getattr(request, name)
        if "seed" in fields_set and getattr(request, "seed", None) is not None:
            params["sampling_seed"] = request.seed
        if "max_new_tokens" not in params and getattr(request, "max_completion_tokens", None) is not None:
            params["max_new_tokens"] = request.max_completion_tokens  # the newer name of max_tokens (chat)
        return params

    async def _generate_raw(self, request: Any, prompt: Any) -> dict[str, Any]:
        try:
            return await super()._generate_raw(request, prompt)
        except ValueError as err:  # SGLang's own input checks (length, sampling params)
            raise _bad_request(err) from None

    async def _stream_generate(
        self, request: Any, prompt: Any
    ) -> AsyncGenerator[tuple[str, str | None], None]:
        """Ray's loop (cumulative text -> deltas), keeping the token counts for a usage chunk."""
        usage = self._usage.get(id(request))
        kwargs = self._build_generate_kwargs(request, prompt, stream=True)
        try:
            stream = await self.engine.async_generate(**kwargs)
        except ValueError as err:
            raise _bad_request(err) from None
        previous = ""
        try:
            async for chunk in stream:
                text, meta = chunk.get("text", ""), chunk.get("meta_info", {}) or {}
                if usage is not None:
                    usage.prompt_tokens = int(meta.get("prompt_tokens", usage.prompt_tokens))
                    usage.completion_tokens = int(meta.get("completion_tokens", usage.completion_tokens))
                delta, previous = text[len(previous) :], text
                finish = meta.get("finish_reason")
                yield delta, (self._parse_finish_reason(finish) if finish is not None else None)
        except ValueError as err:  # SGLang validates a streamed request on its first chunk
            raise _bad_request(err) from None

    async def chat(self, request: Any, raw_request_info: Any = None) -> AsyncGenerator[Any, None]:
        items = self._with_usage(request, super().chat(request, raw_request_info), "chat.completion.chunk")
        async for item in self._counted(request, raw_request_info, self._coalesced(request, items)):
            yield item

    async def completions(self, request: Any, raw_request_info: Any = None) -> AsyncGenerator[Any, None]:
        items = self._with_usage(request, super().completions(request, raw_request_info), "text_completion")
        async for item in self._counted(request, raw_request_info, self._coalesced(request, items)):
            yield item

    async def _counted(
        self, request: Any, raw_request_info: Any, items: AsyncGenerator[Any, None]
    ) -> AsyncGenerator[Any, None]:
        """Counts latency-class requests in flight (the same classification as the router's)."""
        from deployments.router import request_class_of
        from policy.routing import RequestClass

        interactive = (
            request_class_of(self._class_rule, (request, raw_request_info)) is RequestClass.INTERACTIVE
        )
        self._interactive += interactive
        try:
            async for item in items:
                yield item
        finally:
            self._interactive -= interactive

    async def _coalesced(self, request: Any, items: AsyncGenerator[Any, None]) -> AsyncGenerator[Any, None]:
        """Streams: lists of SSE chunks, one list per window (the ingress joins a list); else as is."""
        window_s = self.config.serve.stream_batching_interval_ms / 1e3
        if not getattr(request, "stream", False) or window_s <= 0:
            async for item in items:
                yield item
            return
        async for batch in coalesce(items, window_s):
            yield batch

    async def _with_usage(
        self, request: Any, inner: AsyncGenerator[Any, None], object_type: str
    ) -> AsyncGenerator[Any, None]:
        opts = getattr(request, "stream_options", None)
        if not (request.stream and opts is not None and getattr(opts, "include_usage", False)):
            async for item in inner:
                yield item
            return
        usage = self._usage[id(request)] = _Usage()
        try:
            async for item in inner:
                yield item
        finally:
            self._usage.pop(id(request), None)
        chunk = {
            "id": f"sglang-gen-{uuid.uuid4().hex}",
            "object": object_type,
            "created": int(time.time()),
            "model": request.model,
            "choices": [],
            "usage": {
                "prompt_tokens": usage.prompt_tokens,
                "completion_tokens": usage.completion_tokens,
                "total_tokens": usage.prompt_tokens + usage.completion_tokens,
            },
        }
        yield f"data: {json.dumps(chunk)}\n\n"


class _RoutingHeaders:
    """Direct data path: every response says which replica answered and the mode it ran."""

    def __init__(self, app: Any, server: SpecFlipServer) -> None:
        self.app, self.server = app, server

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers.append((b"x-specflip-replica", self.server.replica_id.encode()))
                headers.append((b"x-specflip-mode", self.server.current_mode().encode()))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)


class EngineInputError(ValueError):
    """SGLang refused a request's input; the ingress answers 400 (`status_code`) with the message.

    A plain ValueError subclass so it pickles across Ray (Ray's OpenAIHTTPException does not).
    """

    status_code = 400


def _bad_request(err: ValueError) -> EngineInputError:
    return EngineInputError(str(err).splitlines()[0][:500] if str(err) else "invalid request")
