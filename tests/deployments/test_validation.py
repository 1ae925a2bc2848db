"""Request checks the ingress runs on validated request models before a request reaches an engine
(pure: request models in, reasons out). The raw-body checks before them: test_body.py,
test_openai_request.py."""

from __future__ import annotations

from typing import Any

import pytest
from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest, CompletionRequest

from deployments.http.validation import check_chat, check_completion

MSG = [{"role": "user", "content": "hi"}]


# model_construct: the checks must hold whatever the request models (SGLang's or vLLM's) validate
def chat(**fields: Any) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_construct(**{"model": "m", "messages": MSG, **fields})


def text(**fields: Any) -> CompletionRequest:
    return CompletionRequest.model_construct(**{"model": "m", "prompt": "x", **fields})


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (chat(messages=[]), "messages must be a non-empty list"),
        (chat(max_tokens=-1), "max_tokens must be a positive integer, got -1"),
        (chat(messages=[{"role": "wizard", "content": "hi"}]), "messages[0].role must be one of"),
        (chat(max_completion_tokens=0), "max_completion_tokens must be a positive integer"),
        (chat(max_tokens=4097), "max_tokens 4097 exceeds the model's context length 4096"),
        (chat(n=0), "n must be 1"),
        (chat(temperature=2.5), "temperature must be between 0 and 2"),
        (chat(top_p=0.0), "top_p must be in (0, 1]"),
        (chat(logprobs=True), "logprobs are not supported"),
        (chat(stream_options={"include_usage": True}), "stream_options is only allowed with stream: true"),
        (text(prompt=""), "prompt must be a non-empty string or list"),
        (text(prompt=[]), "prompt must be a non-empty string or list"),
        (text(prompt=["a", ""]), "prompt list must not contain empty prompts"),
        (text(max_tokens=0), "max_tokens must be a positive integer, got 0"),
        (text(n=3), "n must be 1"),
        (text(best_of=2), "best_of is not supported"),
        (text(echo=True), "echo is not supported"),
        (text(logprobs=2), "logprobs are not supported"),
    ],
)
def test_unservable_requests_get_a_reason(body: Any, reason: str) -> None:
    check = check_chat if isinstance(body, ChatCompletionRequest) else check_completion
    result = check(body, 4096)
    assert result is not None and result.startswith(reason), result


@pytest.mark.parametrize(
    "body",
    [
        chat(),
        chat(max_tokens=4096, temperature=0, top_p=1.0),
        chat(stream=True, stream_options={"include_usage": True}),
        text(),
        text(prompt=[1, 2, 3]),
        text(prompt=["a", "b"], max_tokens=1, temperature=2),
        text(ignore_eos=True),
    ],
)
def test_servable_requests_pass(body: Any) -> None:
    check = check_chat if isinstance(body, ChatCompletionRequest) else check_completion
    assert check(body, 4096) is None


def test_without_a_known_context_length_only_the_lower_bound_is_checked() -> None:
    assert check_chat(chat(max_tokens=10**9), None) is None
    assert check_chat(chat(max_tokens=0), None) is not None
