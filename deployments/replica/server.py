"""`SpecFlipServer`: the Ray Serve LLM server class of one replica, hosting the patched engine.

A subclass of Ray's `SGLangServer` (a private Ray 2.60 class, from deployments.ray_compat), which
builds SGLang's `RayEngine` (one GPU per bundle). This one builds the engine in-process through
the injected `EngineFactory` (default: `SpecFlipEngine`, cpu or cuda) and takes its placement
bundle from `LLMConfig.placement_group_config["bundles"]` (no GPU on cpu). Chat, completions,
SSE streaming, tokenize and `/v1/models` are inherited; on top:

- a warm-up before the replica takes traffic (deployments.replica.warmup; an async constructor, which
  Serve awaits before it marks the replica ready);
- the control loop (`SpeculationLoop`): report load to the policy actor every tick, apply the
  desired mode;
- a health check that probes the engine (a scheduler round trip with a timeout);
- SGLang sampling extras (`ignore_eos`, `top_k`, `min_tokens`, ...) passed through when set;
- prompts tokenized on the replica's one tokenizing thread, refused by size first and then as soon
  as a prefix cannot fit (deployments.replica.prompts); token-id prompts passed to the engine as ids;
- structured output (`response_format`, `regex`, `ebnf`, `json_schema`, `logit_bias`,
  `stop_regex`) passed to SGLang, and tool calls (`tools` with `tool_choice` "required" or a
  named function) answered as OpenAI `tool_calls` (deployments.http.structured);
- `stream_options.include_usage`: a final usage chunk on streams (OpenAI semantics: the stream's
  id, usage summed over a completions request's prompts);
- `usage.specflip` on responses and usage chunks: the modes, accept length and flip of the request
  (deployments.http.request_report; `serve.request_report`), counted in the replica's metrics;
- stream chunks sent as they are made, per window only while the replica's loop runs behind
  (deployments.replica.coalesce; `serve.stream_batching_interval_ms` / `stream_batching_lag_ms`);
- engine input errors (e.g. prompt + max_tokens beyond the context, a grammar that does not
  compile) and chat templates refusing the messages become 400s, not 500s.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import os
import time
import uuid
from collections.abc import AsyncGenerator, Mapping
from typing import Any

from jinja2 import TemplateError

from deployments.config import POLICY_NAMESPACE, SpecFlipConfig
from deployments.http import structured
from deployments.http.limits import limits_for
from deployments.http.request_report import TALLY_SLOT, Tally, chunk_id, with_report
from deployments.ray_compat import (
    ChatCompletionResponse,
    SGLangServer,
    init_sglang_server_without_engine,
)
from deployments.replica.coalesce import LoopLag, coalesce
from deployments.replica.engine import EngineFactory, ReplicaEngine, build_specflip_engine
from deployments.replica.engine_errors import EngineInputError, engine_refusal
from deployments.replica.envelope import ReplicaEdge, request_rids
from deployments.replica.loop import SpeculationLoop
from deployments.replica.prompts import is_token_ids, tokenize_off_loop
from deployments.replica.warmup import warm_up

__all__ = ["SpecFlipServer", "replica_id"]

log = logging.getLogger(__name__)

# request fields SGLang's sampling params understand, passed through when the client sets them
_SAMPLING_EXTRAS = (
    "top_k",
    "min_p",
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
        self._tallies: dict[int, Tally] = {}  # by id(request): counts and modes of requests in flight
        self._loop_lag = LoopLag()  # how far behind this replica's event loop runs, while it streams
        self.config = config
        self._limits = limits_for(config)
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
        """`serve.data_path: direct`: the HTTP app this replica serves itself behind Serve's HAProxy
        (deployments.replica.http_app: the edge app with the OpenAI handlers calling this server in-process)."""
        from deployments.http.metrics import ingress_metrics
        from deployments.replica.http_app import direct_app

        app = direct_app(self, self.config, self._llm_config)
        app.add_middleware(ReplicaEdge, server=self)
        registry = ingress_metrics().registry
        self.loop.edge_metrics = lambda: list(registry.collect())
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

    # -- generation: sampling extras, input errors as 400 -------------------------------------
    @staticmethod
    def _build_chat_template_kwargs(request: Any) -> dict[str, Any]:
        # Ray 2.60 hands the template the request's pydantic Tool objects, which transformers refuses
        # (every chat with tools was a 500): give it their JSON-schema dicts, as SGLang's server does
        kwargs: dict[str, Any] = SGLangServer._build_chat_template_kwargs(request)
        if getattr(request, "tools", None) is not None:
            kwargs.pop("tools", None)
            tools = structured.template_tools(request)
            if tools:
                kwargs["tools"] = tools
        return kwargs

    @staticmethod
    def _build_sampling_params(request: Any) -> dict[str, Any]:
        params: dict[str, Any] = SGLangServer._build_sampling_params(request)
        fields_set: set[str] = getattr(request, "model_fields_set", set())
        for name in _SAMPLING_EXTRAS:
            if name in fields_set and getattr(request, name, None) is not None:
                params[name] = getattr(request, name)
        if "min_tokens" in fields_set and getattr(request, "min_tokens", None) is not None:
            params["min_new_tokens"] = request.min_tokens  # SGLang's name for it
        if "seed" in fields_set and getattr(request, "seed", None) is not None:
            params["sampling_seed"] = request.seed
        if "max_new_tokens" not in params and getattr(request, "max_completion_tokens", None) is not None:
            params["max_new_tokens"] = request.max_completion_tokens  # the newer name of max_tokens (chat)
        params.update(structured.sampling_params(request))
        return params

    def _build_generate_kwargs(self, request: Any, prompt: Any, stream: bool) -> dict[str, Any]:
        kwargs: dict[str, Any] = super()._build_generate_kwargs(request, prompt, stream)
        if is_token_ids(prompt):  # OpenAI's token-id prompts, and text tokenized off the loop
            kwargs["input_ids"] = kwargs.pop("prompt")
        rids = request_rids()
        if rids is not None:  # served over HTTP: ids the edge can abort if the client goes away
            value = kwargs.get("input_ids", kwargs.get("prompt"))
            batch = len(value) if isinstance(value, list) and value and not isinstance(value[0], int) else 0
            ids = [uuid.uuid4().hex for _ in range(max(batch, 1))]
            kwargs["rid"] = ids if batch else ids[0]
            rids.extend(ids)
        return kwargs

    def abort(self, rids: list[str]) -> None:
        """Stop the engine requests `rids` that are still running (a client that went away)."""
        manager = self.engine.tokenizer_manager
        for rid in rids:
            if rid in manager.rid_to_state:
                manager.abort_request(rid)

    async def _engine_prompt(self, request: Any, prompt: Any) -> Any:
        # raises PromptTooLarge (413) / PromptTooLong (400) for text that cannot fit the context
        param = "messages" if getattr(request, "messages", None) is not None else "prompt"
        return await tokenize_off_loop(self.engine.tokenizer_manager.tokenizer, prompt, self._limits, param)

    def _render_chat_prompt(self, *args: Any, **kwargs: Any) -> str:
        try:
            return str(super()._render_chat_prompt(*args, **kwargs))
        except TemplateError as err:  # the model's template refused these messages
            raise EngineInputError(
                f"messages: the model's chat template refused them: {err}", param="messages"
            ) from None

    async def _generate_raw(self, request: Any, prompt: Any) -> dict[str, Any]:
        prompt = await self._engine_prompt(request, prompt)
        try:
            raw = await super()._generate_raw(request, prompt)
        except ValueError as err:  # SGLang's own input checks (length, sampling params, grammars)
            raise self._bad_request(err, request) from None
        tally = self._tallies.get(id(request))
        if tally is not None:
            for output in raw if isinstance(raw, list) else [raw]:
                tally.add_output(output.get("meta_info") or {})
        return raw

    async def _stream_generate(
        self, request: Any, prompt: Any
    ) -> AsyncGenerator[tuple[str, str | None], None]:
        """Ray's loop (cumulative text -> deltas), keeping the prompt's final counts for the usage
        chunk (added to the request's: a completions request streams its prompts one after another)."""
        tally = self._tallies.get(id(request))
        kwargs = self._build_generate_kwargs(request, await self._engine_prompt(request, prompt), stream=True)
        try:
            stream = await self.engine.async_generate(**kwargs)
        except ValueError as err:
            raise self._bad_request(err, request) from None
        previous = ""
        meta: dict[str, Any] = {}  # the last chunk's meta_info
        try:
            async for chunk in stream:
                text, meta = chunk.get("text", ""), chunk.get("meta_info", {}) or {}
                finish = meta.get("finish_reason")
                refusal = None if previous else engine_refusal(finish)
                if refusal is not None:  # e.g. a grammar that does not compile
                    raise self._bad_request(ValueError(refusal), request) from None
                delta, previous = text[len(previous) :], text
                yield delta, (self._parse_finish_reason(finish) if finish is not None else None)
        except ValueError as err:  # SGLang validates a streamed request on its first chunk
            raise self._bad_request(err, request) from None
        if tally is not None:  # the last chunk's counts are the prompt's totals
            tally.add_output(meta)

    def _bad_request(self, err: ValueError, request: Any) -> EngineInputError:
        """SGLang's refusal as a 400 naming the field where it can (deployments.http.structured); a
        context overflow says the count includes the tokens the speculative decoder reserves per
        request (SGLang adds them to the input silently)."""
        if isinstance(err, EngineInputError):  # explained already (a refusal met inside the stream)
            return err
        message = str(err).splitlines()[0][:500] if str(err) else "invalid request"
        reserved = int(getattr(self.engine.tokenizer_manager, "num_reserved_tokens", 0) or 0)
        if reserved and "context length" in message:
            message += (
                f" (the input count includes {reserved} tokens speculative decoding reserves per request)"
            )
        explained, param = structured.explain_refusal(request, message)
        return EngineInputError(explained[:500], param=param)

    async def chat(self, request: Any, raw_request_info: Any = None) -> AsyncGenerator[Any, None]:
        if structured.calls_tools(request):
            answer = self._tool_calls(request)
        else:
            answer = super().chat(request, raw_request_info)
        items = self._with_usage(request, answer, "chat.completion.chunk")
        async for item in self._counted(request, raw_request_info, self._coalesced(request, items)):
            yield item

    async def _tool_calls(self, request: Any) -> AsyncGenerator[Any, None]:
        """A chat answer constrained to tool calls, as OpenAI `tool_calls`. Streamed, the calls
        come whole in one chunk once generated (a partial call is not a call yet)."""
        messages = self._build_chat_messages(request.messages)
        prompt = self._render_chat_prompt(messages, template_kwargs=self._build_chat_template_kwargs(request))
        if not request.stream:
            meta = self._extract_generation_metadata(await self._generate_raw(request, prompt))
            message, finish = structured.tool_call_message(
                meta["text"], meta["finish_reason"], structured.parse_tool_calls(meta["text"])
            )
            yield ChatCompletionResponse(
                id=meta["id"],
                object="chat.completion",
                created=meta["created"],
                model=request.model,
                choices=[{"index": 0, "message": message, "finish_reason": finish}],
                usage={k: meta[k] for k in ("prompt_tokens", "completion_tokens", "total_tokens")},
            )
            return
        text, finish_reason = "", "stop"
        async for delta, finish_or_none in self._stream_generate(request, prompt):
            text, finish_reason = text + delta, finish_or_none or finish_reason
        message, finish_reason = structured.tool_call_message(
            text, finish_reason, structured.parse_tool_calls(text)
        )
        for i, call in enumerate(message.get("tool_calls") or []):
            call["index"] = i  # streamed tool calls carry their position
        gen_id, created = f"sglang-gen-{uuid.uuid4().hex}", int(time.time())
        for choice in (
            {"index": 0, "delta": message, "finish_reason": None},
            {"index": 0, "delta": {}, "finish_reason": finish_reason},
        ):
            yield self._build_sse_chunk(gen_id, "chat.completion.chunk", created, request.model, choice)

    async def completions(self, request: Any, raw_request_info: Any = None) -> AsyncGenerator[Any, None]:
        prompt = request.prompt
        if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
            request.prompt = [prompt]  # one token-id prompt, not a list of one-token prompts
        items = self._with_usage(request, super().completions(request, raw_request_info), "text_completion")
        async for item in self._counted(request, raw_request_info, self._coalesced(request, items)):
            yield item

    async def _counted(
        self, request: Any, raw_request_info: Any, items: AsyncGenerator[Any, None]
    ) -> AsyncGenerator[Any, None]:
        """Counts latency-class requests in flight (the same classification as the router's)."""
        from deployments.routing.journal import JOURNAL, SERVED_CLASS
        from policy.routing import RequestClass, classify

        request_class = SERVED_CLASS.get()  # as the API edge in front read it (deployments.http.handlers)
        if request_class is None:  # called without it (a Serve handle, a test): read it as the router does
            headers = getattr(raw_request_info, "headers", None)
            request_class = classify(
                self._class_rule, request, headers if isinstance(headers, Mapping) else None
            )
        interactive = request_class is RequestClass.INTERACTIVE
        # routed here by Ray's ingress request router, in another process: counted here
        JOURNAL.count_served(request_class, self.current_mode())
        self._interactive += interactive
        try:
            async for item in items:
                yield item
        finally:
            self._interactive -= interactive

    async def _coalesced(self, request: Any, items: AsyncGenerator[Any, None]) -> AsyncGenerator[Any, None]:
        """Streams: lists of SSE chunks, at once or per window (coalesce; the handlers join a list into one write)."""
        serve = self.config.serve
        if not getattr(request, "stream", False) or serve.stream_batching_interval_ms <= 0:
            async for item in items:
                yield item
            return
        window_s, lag_s = serve.stream_batching_interval_ms / 1e3, serve.stream_batching_lag_ms / 1e3
        async for batch in coalesce(items, window_s, behind_s=lag_s, lag=self._loop_lag):
            yield batch

    def _flips(self) -> int:
        return int(getattr(getattr(self, "loop", None), "applied_flips", 0))

    async def _with_usage(
        self, request: Any, inner: AsyncGenerator[Any, None], object_type: str
    ) -> AsyncGenerator[Any, None]:
        """The request's report (deployments.http.request_report): on a non-streamed response's usage,
        and on a stream's usage chunk (`stream_options.include_usage`), which carries the stream's id."""
        tally = self._tallies[id(request)] = Tally(self.current_mode(), self._flips())
        slot = TALLY_SLOT.get()
        if slot is not None:  # the API edge in front counts this request's tokens from it
            slot.tally = tally
        report_on = self.config.serve.request_report
        stream_id = None
        try:
            async for item in inner:
                tally.see(self.current_mode(), self._flips())
                if isinstance(item, str):  # an SSE chunk of a stream
                    stream_id = stream_id or chunk_id(item)
                else:  # the whole response: generation is over
                    report = tally.report()
                    _count(report)
                    item = with_report(item, report) if report_on else item
                yield item
        finally:
            self._tallies.pop(id(request), None)
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
        yield f"data: {json.dumps(chunk)}\n\n"


def _count(report: Any) -> None:
    from deployments.http.metrics import ingress_metrics

    ingress_metrics().observe_report(report)
