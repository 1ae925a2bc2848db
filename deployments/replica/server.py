"""`SpecFlipServer`: the Ray Serve LLM server class of one replica, hosting the patched engine.

A subclass of Ray's `SGLangServer` (a private Ray 2.60 class, from deployments.ray_compat) for
its deployment options and Serve's server protocol; the engine is built in-process through the
injected `EngineFactory` (default: `SpecFlipEngine`, cpu or cuda), the placement bundle taken
from `LLMConfig.placement_group_config["bundles"]` (no GPU on cpu). On top:

- the HTTP app the replica serves itself (`__serve_build_asgi_app__`: deployments.replica.api,
  which calls `generate` in-process);
- a warm-up before the replica takes traffic (deployments.replica.warmup; an async constructor, which
  Serve awaits before it marks the replica ready);
- the control loop (`SpeculationLoop`): report load to the policy actor every tick, apply the
  desired mode;
- a health check that probes the engine (a scheduler round trip with a timeout);
- generation (deployments.replica.generate), counted by class and mode, with the request's report:
  `usage.specflip` on responses and usage chunks (deployments.http.request_report;
  `serve.request_report`), `stream_options.include_usage`'s final usage chunk (OpenAI semantics:
  the stream's id, usage summed over a completions request's prompts);
- stream chunks sent as they are made, per window only while the replica's loop runs behind
  (deployments.replica.coalesce; `serve.stream_batching_interval_ms` / `stream_batching_lag_ms`).
"""

from __future__ import annotations

import contextlib
import copy
import logging
import os
import time
import uuid
from collections.abc import AsyncGenerator
from typing import Any, Literal

from deployments.config import POLICY_NAMESPACE, SpecFlipConfig
from deployments.http.limits import limits_for
from deployments.http.metrics import http_metrics
from deployments.http.request_report import Tally, chunk_id
from deployments.ray_compat import SGLangServer, init_sglang_server_without_engine
from deployments.replica.coalesce import LoopLag, coalesce
from deployments.replica.engine import EngineFactory, ReplicaEngine, build_specflip_engine
from deployments.replica.envelope import ReplicaEdge
from deployments.replica.generate import Generation, sse
from deployments.replica.loop import SpeculationLoop
from deployments.replica.warmup import warm_up
from policy.routing import RequestClass

__all__ = ["SpecFlipServer", "replica_id"]

log = logging.getLogger(__name__)

Endpoint = Literal["chat", "completions"]
_STATS_READ_TIMEOUT_S = 0.5  # a routing-stats state read waits this long, then uses the last tick's


def replica_id() -> str:
    """Serve's replica id (`replica_tag`) inside a replica; a process-unique id elsewhere."""
    from ray import serve
    from ray.serve.exceptions import RayServeException

    try:
        return str(serve.get_replica_context().replica_tag)
    except RayServeException:
        return f"local-{os.getpid()}"


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
        self._loop_lag = LoopLag()  # how far behind this replica's event loop runs, while it streams
        self.config = config
        self.limits = limits_for(config)  # read once: the body guard, the API and generation share them
        self.replica_id = replica_id()
        started = time.monotonic()
        self.engine: ReplicaEngine = engine_factory(config)
        self.generation = Generation(self.engine, self.limits)
        log.info("replica %s: engine up in %.1f s", self.replica_id, time.monotonic() - started)
        if config.replicas.warm_up:  # Serve marks the replica ready only once this returns
            cap = config.engine.max_running_requests
            took = await warm_up(self.engine, config.speculation.start_enabled, max_batch=cap)
            log.info(
                "replica %s: warm-up (ON, OFF, resync at batch 1-%d) in %.1f s", self.replica_id, cap, took
            )

        from policy.actor import PolicyClient

        r = config.replicas
        reporter = PolicyClient(
            self.replica_id,
            config.policy.actor_name,
            config.policy_config(),
            namespace=POLICY_NAMESPACE,
            fail_after=r.fallback_after_ticks,
            timeout_s=r.report_timeout_s,
        )
        self.loop = SpeculationLoop(
            self.engine,
            reporter,
            self.replica_id,
            tick_s=r.tick_s,
            probe_timeout_s=r.health_timeout_s,
            control_timeout_s=r.control_timeout_s,
        )
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
        """The HTTP app this replica serves itself behind Serve's HAProxy (deployments.replica.api),
        wrapped in the replica's envelope (its id and mode on every response, the drain refusal)."""
        from deployments.replica.api import replica_app

        app = replica_app(self, self.config, self._llm_config)
        app.add_middleware(ReplicaEdge, server=self)
        return app

    async def describe(self) -> dict[str, Any]:
        """This replica's own view (mode, desired mode, policy source: actor, actor_cached or
        local_fallback), through a deployment handle: what /specflip/status cannot know of a
        replica that stopped reporting."""
        return self.loop.describe()

    def draining(self) -> bool:
        """The app is shutting down (the policy actor said so at this replica's last report)."""
        decision = getattr(getattr(self, "loop", None), "last_decision", None)
        return bool(decision is not None and decision.draining)

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
        and load for `deployments.routing.router.SpecFlipRouter` (policy.routing.ReplicaStats)."""
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

    # -- generation (deployments.replica.generate), counted, reported, streamed ------------------
    def new_tally(self) -> Tally:
        """A request's tally, started now (the mode and flip count it arrives at)."""
        return Tally(self.current_mode(), self._flips())

    async def generate(
        self, endpoint: Endpoint, request: Any, *, request_class: RequestClass, tally: Tally, rids: list[str]
    ) -> AsyncGenerator[Any, None]:
        """The answer to a checked request (deployments.replica.api): a dict (not streamed), or SSE
        chunks, lists of them where the replica's loop runs behind (deployments.replica.coalesce).
        `request_class`: as the API read it; `tally`: this request's counts (the API reads its
        tokens); `rids`: the engine request ids go here (the API aborts them if the client leaves)."""
        make = self.generation.chat if endpoint == "chat" else self.generation.completions
        object_type = "chat.completion.chunk" if endpoint == "chat" else "text_completion"
        items = self._with_usage(request, make(request, tally, rids), object_type, tally)
        async for item in self._counted(request_class, self._coalesced(request, items)):
            yield item

    def abort(self, rids: list[str]) -> None:
        """Stop the engine requests `rids` that are still running (a client that went away)."""
        manager = self.engine.tokenizer_manager
        for rid in rids:
            if rid in manager.rid_to_state:
                manager.abort_request(rid)

    async def _counted(
        self, request_class: RequestClass, items: AsyncGenerator[Any, None]
    ) -> AsyncGenerator[Any, None]:
        """Counts the request by class and mode (routed here by Ray's ingress request router, in
        another process; Ray exports the count), and latency-class requests in flight (the mixed
        rule's demand)."""
        interactive = request_class is RequestClass.INTERACTIVE
        http_metrics().served.labels(request_class.value, self.current_mode()).inc()
        self._interactive += interactive
        try:
            async for item in items:
                yield item
        finally:
            self._interactive -= interactive

    async def _coalesced(self, request: Any, items: AsyncGenerator[Any, None]) -> AsyncGenerator[Any, None]:
        """Streams: SSE chunks one by one, or lists of them per window while the loop lags (coalesce)."""
        serve = self.config.serve
        if not getattr(request, "stream", False) or serve.stream_batching_interval_ms <= 0:
            async for item in items:
                yield item
            return
        window_s, lag_s = serve.stream_batching_interval_ms / 1e3, serve.stream_batching_lag_ms / 1e3
        windowed = http_metrics().streams_windowed.inc
        async for batch in coalesce(items, window_s, behind_s=lag_s, lag=self._loop_lag, on_windows=windowed):
            yield batch

    def _flips(self) -> int:
        return int(getattr(getattr(self, "loop", None), "applied_flips", 0))

    async def _with_usage(
        self, request: Any, inner: AsyncGenerator[Any, None], object_type: str, tally: Tally
    ) -> AsyncGenerator[Any, None]:
        """The request's report (deployments.http.request_report): on a non-streamed response's usage,
        and on a stream's usage chunk (`stream_options.include_usage`), which carries the stream's id."""
        report_on = self.config.serve.request_report
        stream_id = None
        async for item in inner:
            tally.see(self.current_mode(), self._flips())
            if isinstance(item, str):  # an SSE chunk of a stream
                stream_id = stream_id or chunk_id(item)
            else:  # the whole response: generation is over
                report = tally.report()
                _count(report)
                if report_on:
                    item["usage"]["specflip"] = report.as_json()
            yield item
        if not request.stream:
            return
        report = tally.report()
        _count(report)
        opts = getattr(request, "stream_options", None)
        if opts is None or not getattr(opts, "include_usage", False):
            return
        chunk = {
            "id": stream_id or f"sglang-gen-{uuid.uuid4().hex}",
            "object": object_type,
            "created": int(time.time()),
            "model": request.model,
            "choices": [],
            "usage": tally.usage(report if report_on else None),
        }
        yield sse(chunk)


def _count(report: Any) -> None:
    http_metrics().observe_report(report)
