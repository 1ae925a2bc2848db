"""Request checks the ingress runs before a request reaches an engine (pure: parsed bodies in, reasons out)."""

from __future__ import annotations

from typing import Any

import pytest
from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest, CompletionRequest

from deployments.body import Problem, parse_body
from deployments.validation import check_chat, check_completion, check_json_fields

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


def _raw_check(raw: bytes) -> str | None:
    """What the body guard checks of a raw body before the request models parse it."""
    parsed = parse_body(raw)
    return parsed.message if isinstance(parsed, Problem) else check_json_fields(parsed)


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"", "request body is empty"),
        (b"  ", "request body is empty"),
        (b'{"model": ', "malformed JSON"),
        (b"\xff\xfe", "malformed JSON"),
        (b"[1, 2]", "request body must be a JSON object, got list"),
        (b"null", "got NoneType"),
        (b'"hi"', "got str"),
        (b'{"max_tokens": true}', "max_tokens must be an integer, got true"),
        (b'{"max_tokens": "5"}', 'max_tokens must be an integer, got "5"'),
        (b'{"n": 1.0}', "n must be an integer, got 1.0"),
        (b'{"temperature": "hot"}', 'temperature must be a number, got "hot"'),
        (b'{"top_p": false}', "top_p must be a number, got false"),
    ],
)
def test_raw_bodies_the_request_models_would_crash_on_or_coerce(raw: bytes, reason: str) -> None:
    result = _raw_check(raw)
    assert result is not None and reason in result, result


@pytest.mark.parametrize(
    "raw",
    [
        b'{"model": "m", "messages": []}',
        b'{"max_tokens": 5, "temperature": 0}',
        b'{"temperature": 0.7, "top_p": 1, "n": 1, "max_tokens": null}',
    ],
)
def test_well_typed_bodies_pass_the_raw_check(raw: bytes) -> None:
    assert _raw_check(raw) is None
