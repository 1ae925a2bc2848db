"""What a replica makes of one validated chat or completions request (its request model,
deployments.http.openai_models): the prompt for its engine, the
engine's output as OpenAI's answer (a response body, or the chunks of a stream), and the request's
tally of tokens and modes (deployments.http.request_report). Called by deployments.replica.api
through the server, with everything it needs as arguments: the request, its tally, and the list
the engine request ids go into (the API aborts them if the client goes away).

- Prompts: chat messages through the model's chat template (tools as JSON-schema dicts, as
  SGLang's server gives them; a template refusing the messages is a 400); text tokenized on the
  replica's one tokenizing thread, refused by size first and then as soon as a prefix cannot fit
  (deployments.replica.prompts); token-id prompts passed to the engine as ids.
- Sampling: OpenAI's fields and SGLang's extras (`ignore_eos`, `top_k`, `min_tokens`, ...) when
  set, structured output (`response_format`, `regex`, `ebnf`, `json_schema`, `logit_bias`,
  `stop_regex`) and tool calls (`tools` with `tool_choice` "required" or a named function,
  answered as OpenAI `tool_calls`): deployments.http.structured.
- Answers: streamed chunks as SSE text, one per engine chunk; a non-streamed answer as a dict in
  OpenAI's response schema, its text as the engine made it (SGLang's own server, not Ray's,
  which strips it).
- SGLang's refusals of an input (a context overflow, sampling params, a grammar that does not
  compile) become EngineInputError: a 400 naming the field where it can.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncGenerator
from typing import Any

from jinja2 import TemplateError

from deployments.http import structured
from deployments.http.limits import ModelLimits
from deployments.http.openai_models import ChatCompletionRequest, CompletionRequest
from deployments.http.openai_shape import shape_chat_response, shape_completion_response
from deployments.http.request_report import Tally
from deployments.replica.engine import ReplicaEngine
from deployments.replica.engine_errors import EngineInputError, engine_refusal
from deployments.replica.prompts import is_token_ids, tokenize_prompt

__all__ = ["Generation", "sse"]

# request fields SGLang's sampling params take, by SGLang's name for them; passed through when the
# client sets them (max_completion_tokens: below, the newer name of max_tokens)
_SAMPLING = {
    "temperature": "temperature",
    "top_p": "top_p",
    "max_tokens": "max_new_tokens",
    "stop": "stop",
    "top_k": "top_k",
    "min_p": "min_p",
    "ignore_eos": "ignore_eos",
    "repetition_penalty": "repetition_penalty",
    "frequency_penalty": "frequency_penalty",
    "presence_penalty": "presence_penalty",
    "stop_token_ids": "stop_token_ids",
    "no_stop_trim": "no_stop_trim",
    "skip_special_tokens": "skip_special_tokens",
    "min_tokens": "min_new_tokens",
    "seed": "sampling_seed",
}

Item = str | dict[str, Any]  # an SSE chunk of a stream, or the whole non-streamed answer


def sse(chunk: dict[str, Any]) -> str:
    return f"data: {json.dumps(chunk)}\n\n"


def _set(request: Any, name: str) -> Any:
    """The field's value if the client set it (not null), else None."""
    return getattr(request, name, None) if name in request.model_fields_set else None


def sampling_params(request: Any) -> dict[str, Any]:
    """SGLang's sampling params for the fields the client set (defaults are the engine's)."""
    params: dict[str, Any] = {}
    for name, sglang_name in _SAMPLING.items():
        value = _set(request, name)
        if value is not None:
            params[sglang_name] = value
    if "max_new_tokens" not in params and getattr(request, "max_completion_tokens", None) is not None:
        params["max_new_tokens"] = request.max_completion_tokens  # the newer name of max_tokens (chat)
    params.update(structured.sampling_params(request))
    return params


def _finish_reason(info: Any) -> str:
    return str(info.get("type", "length")) if isinstance(info, dict) else str(info)


def _chat_messages(messages: list[Any]) -> list[dict[str, Any]]:
    """The messages as the chat template takes them: dicts without nulls, content as text."""
    return [m.model_dump(by_alias=True, exclude_none=True) for m in messages]


def _template_kwargs(request: Any) -> dict[str, Any]:
    """The chat template's extra arguments: tools as JSON-schema dicts (as SGLang's server hands
    them; transformers refuses pydantic objects), reasoning_effort, chat_template_kwargs."""
    kwargs: dict[str, Any] = {}
    tools = structured.template_tools(request)
    if tools:
        kwargs["tools"] = tools
    if getattr(request, "reasoning_effort", None) is not None:
        kwargs["reasoning_effort"] = request.reasoning_effort
    extra = getattr(request, "chat_template_kwargs", None)
    if isinstance(extra, dict):
        kwargs.update(extra)
    return kwargs


class Generation:
    """Chat and completions on one replica's engine."""

    def __init__(self, engine: ReplicaEngine, limits: ModelLimits) -> None:
        self.engine, self._limits = engine, limits

    # -- the two endpoints -----------------------------------------------------------------------
    async def chat(
        self, request: ChatCompletionRequest, tally: Tally, rids: list[str]
    ) -> AsyncGenerator[Item, None]:
        prompt = self._chat_prompt(request)
        if structured.calls_tools(request):
            async for item in self._tool_calls(request, prompt, tally, rids):
                yield item
            return
        if not request.stream:
            (meta,) = await self._generate(request, prompt, tally, rids)
            message = {"role": "assistant", "content": meta["text"]}
            choice = {"index": 0, "message": message, "finish_reason": meta["finish_reason"]}
            yield shape_chat_response(_response("chat.completion", request.model, [choice], [meta]))
            return
        gen_id, created, first = f"sglang-gen-{uuid.uuid4().hex}", int(time.time()), True
        async for delta_text, finish in self._stream(request, prompt, tally, rids):
            delta: dict[str, Any] = {"content": delta_text}
            if first:
                delta["role"], first = "assistant", False
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
            yield sse(_chunk(gen_id, "chat.completion.chunk", created, request.model, choice))

    async def completions(
        self, request: CompletionRequest, tally: Tally, rids: list[str]
    ) -> AsyncGenerator[Item, None]:
        prompt: Any = request.prompt
        if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
            prompt = [prompt]  # one token-id prompt, not a list of one-token prompts
        prompts = prompt if isinstance(prompt, list) else [prompt]
        if not request.stream:
            metas = await self._generate(request, prompts, tally, rids)
            choices = [
                {"index": i, "text": m["text"], "logprobs": None, "finish_reason": m["finish_reason"]}
                for i, m in enumerate(metas)
            ]
            yield shape_completion_response(_response("text_completion", request.model, choices, metas))
            return
        gen_id, created = f"sglang-gen-{uuid.uuid4().hex}", int(time.time())
        for i, one in enumerate(prompts):  # a stream sends its prompts one after another
            async for delta_text, finish in self._stream(request, one, tally, rids):
                choice = {"index": i, "text": delta_text, "logprobs": None, "finish_reason": finish}
                yield sse(_chunk(gen_id, "text_completion", created, request.model, choice))

    async def _tool_calls(
        self, request: Any, prompt: str, tally: Tally, rids: list[str]
    ) -> AsyncGenerator[Item, None]:
        """A chat answer constrained to tool calls, as OpenAI `tool_calls`. Streamed, the calls
        come whole in one chunk once generated (a partial call is not a call yet)."""
        if not request.stream:
            (meta,) = await self._generate(request, prompt, tally, rids)
            message, finish = structured.tool_call_message(
                meta["text"], meta["finish_reason"], structured.parse_tool_calls(meta["text"])
            )
            choice = {"index": 0, "message": message, "finish_reason": finish}
            yield shape_chat_response(_response("chat.completion", request.model, [choice], [meta]))
            return
        text, finish_reason = "", "stop"
        async for delta, finish_or_none in self._stream(request, prompt, tally, rids):
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
            yield sse(_chunk(gen_id, "chat.completion.chunk", created, request.model, choice))

    # -- the engine ------------------------------------------------------------------------------
    def _chat_prompt(self, request: Any) -> str:
        tokenizer = self.engine.tokenizer_manager.tokenizer
        try:
            return str(
                tokenizer.apply_chat_template(
                    _chat_messages(request.messages),
                    tokenize=False,
                    add_generation_prompt=True,
                    **_template_kwargs(request),
                )
            )
        except TemplateError as err:  # the model's template refused these messages
            raise EngineInputError(
                f"messages: the model's chat template refused them: {err}", param="messages"
            ) from None

    async def _engine_kwargs(
        self, request: Any, prompt: Any, stream: bool, rids: list[str]
    ) -> dict[str, Any]:
        """engine.async_generate's arguments: the prompt as token ids where it was text (tokenized
        on the loop, or on the replica's tokenizing thread when long; raises PromptTooLarge (413) /
        PromptTooLong (400) for text that cannot fit), the sampling params, one request id per
        prompt (appended to `rids`)."""
        param = "messages" if getattr(request, "messages", None) is not None else "prompt"
        tokenizer = self.engine.tokenizer_manager.tokenizer
        prompt = await tokenize_prompt(tokenizer, prompt, self._limits, param)
        kwargs: dict[str, Any] = {"stream": stream}
        kwargs["input_ids" if is_token_ids(prompt) else "prompt"] = prompt
        params = sampling_params(request)
        if params:
            kwargs["sampling_params"] = params
        batch = len(prompt) if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int) else 0
        ids = [uuid.uuid4().hex for _ in range(max(batch, 1))]
        kwargs["rid"] = ids if batch else ids[0]
        rids.extend(ids)
        return kwargs

    async def _generate(
        self, request: Any, prompt: Any, tally: Tally, rids: list[str]
    ) -> list[dict[str, Any]]:
        """One answer per prompt (a list of prompts is one batched engine call): text, finish
        reason, counts; the tally counts each."""
        kwargs = await self._engine_kwargs(request, prompt, False, rids)
        try:
            raw = await self.engine.async_generate(**kwargs)
        except ValueError as err:  # SGLang's own input checks (length, sampling params, grammars)
            raise self._bad_request(err, request) from None
        outputs = raw if isinstance(raw, list) else [raw]
        if not outputs:
            raise RuntimeError("SGLang returned no output")
        metas = []
        for output in outputs:
            meta = output.get("meta_info") or {}
            tally.add_output(meta)
            metas.append(
                {
                    "text": output.get("text", ""),
                    "id": meta.get("id", f"sglang-gen-{uuid.uuid4().hex}"),
                    "finish_reason": _finish_reason(meta.get("finish_reason") or {}),
                    "prompt_tokens": int(meta.get("prompt_tokens", 0)),
                    "completion_tokens": int(meta.get("completion_tokens", 0)),
                }
            )
        return metas

    async def _stream(
        self, request: Any, prompt: Any, tally: Tally, rids: list[str]
    ) -> AsyncGenerator[tuple[str, str | None], None]:
        """(new text, finish reason or None) per engine chunk (SGLang's text is cumulative); the
        last chunk's counts are the prompt's totals, added to the tally."""
        kwargs = await self._engine_kwargs(request, prompt, True, rids)
        try:
            stream = await self.engine.async_generate(**kwargs)
        except ValueError as err:
            raise self._bad_request(err, request) from None
        previous = ""
        meta: dict[str, Any] = {}
        try:
            async for chunk in stream:
                text, meta = chunk.get("text", ""), chunk.get("meta_info", {}) or {}
                finish = meta.get("finish_reason")
                refusal = None if previous else engine_refusal(finish)
                if refusal is not None:  # e.g. a grammar that does not compile
                    raise self._bad_request(ValueError(refusal), request) from None
                delta, previous = text[len(previous) :], text
                yield delta, (_finish_reason(finish) if finish is not None else None)
        except ValueError as err:  # SGLang validates a streamed request on its first chunk
            raise self._bad_request(err, request) from None
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


def _chunk(gen_id: str, object_type: str, created: int, model: str, choice: dict[str, Any]) -> dict[str, Any]:
    return {"id": gen_id, "object": object_type, "created": created, "model": model, "choices": [choice]}


def _response(
    object_type: str, model: str, choices: list[dict[str, Any]], metas: list[dict[str, Any]]
) -> dict[str, Any]:
    """A non-streamed answer: the last prompt's id (as Ray's server gave), usage summed over prompts."""
    prompt_tokens = sum(m["prompt_tokens"] for m in metas)
    completion_tokens = sum(m["completion_tokens"] for m in metas)
    return {
        "id": metas[-1]["id"],
        "object": object_type,
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }
