"""The raw-body checks and the model limits, as pure functions: the request's whole cost, the
model fit, the body as JSON (the schema: test_openai_request.py; the real app's answers to the
same inputs: test_api_inputs.py, test_request_cost.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from deployments.http.body import Problem, check_cost, parse_body
from deployments.http.limits import ModelLimits, explain_context_overflow, max_token_bytes, read_limits
from tests.deployments.bodies import check_body

LIMITS = ModelLimits(
    context_tokens=100,
    vocab_size=50,
    max_token_bytes=4,
    max_prompts=3,
    max_messages=3,
    max_input_bytes=1000,
    max_input_token_ids=150,
)
USER = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        (b"", "empty"),
        (b"[1]", "must be a JSON object"),
        (b'{"temperature": NaN}', "NaN is not valid JSON"),
        (b'{"stop": -Infinity}', "-Infinity is not valid JSON"),
        (b'{"prompt": "a\\ud800b"}', "prompt contains a lone UTF-16 surrogate"),
        (b'{"messages": [{"role": "user", "content": "\\udfff"}]}', "messages[0].content contains a lone"),
        (b'{"\\ud800": 1}', "body contains a lone"),
    ],
)
def test_parse_body_refuses_what_json_does_not_allow_and_names_where(raw: bytes, fragment: str) -> None:
    problem = parse_body(raw)
    assert isinstance(problem, Problem) and problem.status == 400
    assert fragment in problem.message
    json.dumps(problem.message)  # the reason itself always serializes


def test_a_valid_surrogate_pair_is_text() -> None:
    assert parse_body(b'{"prompt": "\\ud83d\\ude00"}') == {"prompt": "\U0001f600"}


CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
CHAT_CASES: list[tuple[str, dict[str, Any], str | None]] = [
    ("ok", {"messages": USER}, None),
    ("user role is allowed", {"messages": [{"role": "User", "content": "x"}]}, None),
    (
        "assistant with tool_calls, no content",
        {"messages": [{"role": "assistant", "tool_calls": [CALL]}]},
        None,
    ),
    ("unknown role lists user", {"messages": [{"role": "wizard", "content": "x"}]}, "'user'"),
    (
        "bad content blamed on content",
        {"messages": [{"role": "user", "content": {"x": 1}}]},
        "messages[0].content must",
    ),
    ("missing content", {"messages": [{"role": "user"}]}, "messages[0].content is required"),
    (
        "image part",
        {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u"}}]}]},
        "text only",
    ),
    (
        "response_format a number",
        {"messages": USER, "response_format": 5},
        "response_format must be an object",
    ),
    ("response_format a string", {"messages": USER, "response_format": "json"}, "got a string"),
    (
        "response_format.schema a list",
        {"messages": USER, "response_format": {"type": "json_schema", "schema": []}},
        "response_format.schema is not a field",
    ),
    (
        "tokenize in template kwargs",
        {"messages": USER, "chat_template_kwargs": {"tokenize": True}},
        "chat_template_kwargs.tokenize",
    ),
    ("template kwargs a list", {"messages": USER, "chat_template_kwargs": []}, "must be an object"),
    (
        "min_tokens > max_tokens",
        {"messages": USER, "max_tokens": 2, "min_tokens": 4},
        "min_tokens 4 is more than max_tokens 2",
    ),
    (
        "min_tokens > max_completion_tokens",
        {"messages": USER, "max_completion_tokens": 1, "min_tokens": 3},
        "max_completion_tokens",
    ),
    ("max_tokens beyond the context", {"messages": USER, "max_tokens": 101}, "context length 100"),
    ("seed beyond 64 bits", {"messages": USER, "seed": 2**64}, "seed must be in"),
    (
        "tools are deployments.http.structured's to check",
        {"messages": USER, "tools": [{"type": "function", "function": {"name": "f"}}]},
        None,
    ),
    ("no tools is fine", {"messages": USER, "tools": [], "tool_choice": "none"}, None),
    (
        "tool_choice is deployments.http.structured's to check",
        {"messages": USER, "tool_choice": "required"},
        None,
    ),
    ("messages too large", {"messages": [{"role": "user", "content": "x" * 401}]}, "more than the context"),
    ("too many messages", {"messages": USER * 4}, "messages has 4 messages: at most 3"),
    (
        "more text than a request may carry",
        {"messages": [{"role": "user", "content": "x" * 300}] * 3, "tools": [{"d": "y" * 200}]},
        "bytes of text: at most 1000 per request",
    ),
]


@pytest.mark.parametrize(("case", "body", "fragment"), CHAT_CASES, ids=[c[0] for c in CHAT_CASES])
def test_chat_body_checks(case: str, body: dict[str, Any], fragment: str | None) -> None:
    result = check_body("chat", {"model": "m", **body}, LIMITS)
    if fragment is None:
        assert isinstance(result, dict), result
    else:
        assert isinstance(result, Problem) and fragment in result.message, result


COMPLETION_CASES: list[tuple[str, Any, int | None, str]] = [
    ("text", "abc", None, ""),
    ("texts", ["a", "b"], None, ""),
    ("token ids", [1, 2, 3], None, ""),
    ("lists of token ids", [[1, 2], [3]], None, ""),
    ("empty: the start of a document", "", None, ""),
    ("mixed", ["a", [1]], 400, "not a mix"),
    ("id beyond the vocabulary", [1, 50], 400, "prompt[1] is not a token id: 50 (valid: [0, 50))"),
    ("negative id", [[1, -1]], 400, "prompt[0][1] must be >= 0"),
    ("boolean id", [True, 1], 400, "not a mix"),
    ("more ids than the context", list(range(40)) * 3, 400, "the context holds 100"),
    ("text larger than the context", "x" * 401, 413, "401 bytes: at least 101 tokens"),
    ("one of several texts too large", ["a", "y" * 500], 413, "prompt[1] is 500 bytes"),
    # the request's whole cost, before anything else: the reliability report's 300 texts of 100 kB (scaled down)
    ("more prompts than a request may carry", ["a"] * 4, 400, "prompt has 4 prompts: at most 3"),
    ("more text than a request may carry", ["y" * 400] * 3, 413, "1200 bytes of text: at most 1000"),
    ("more token ids than a request may carry", [[1] * 60] * 3, 413, "180 token ids: at most 150"),
]


@pytest.mark.parametrize(
    ("case", "prompt", "status", "fragment"), COMPLETION_CASES, ids=[c[0] for c in COMPLETION_CASES]
)
def test_completion_body_checks(case: str, prompt: Any, status: int | None, fragment: str) -> None:
    result = check_body("completions", {"model": "m", "prompt": prompt}, LIMITS)
    if status is None:
        assert isinstance(result, dict), result
    else:
        assert isinstance(result, Problem) and result.status == status and fragment in result.message, result


def test_the_cost_is_checked_before_anything_walks_the_body() -> None:
    """A body of 300 prompts is refused by their number before any prompt is looked at (the
    300th is not even a valid prompt)."""
    problem = check_cost("completions", {"prompt": ["x"] * 299 + [{"not": "a prompt"}]}, LIMITS)
    assert problem is not None and problem.param == "prompt" and "300 prompts" in problem.message


def test_size_bound_is_sound_for_the_tiny_tokenizer(model_pair) -> None:  # noqa: ANN001
    """No text of n bytes tokenizes into fewer than limits.min_tokens(n) tokens."""
    from transformers import AutoTokenizer

    limits = read_limits(model_pair.target)
    assert limits.context_tokens == 2048 and limits.vocab_size == 4096 and limits.max_token_bytes
    tok = AutoTokenizer.from_pretrained(model_pair.target)
    vocab = tok.get_vocab()
    longest = max(vocab, key=lambda t: len(tok.convert_tokens_to_string([t]).encode()))
    for text in (
        "def add(a, b):\n    return a + b\n" * 20,
        " " * 300,
        tok.convert_tokens_to_string([longest]) * 9,
    ):
        n = len(text.encode())
        assert len(tok(text)["input_ids"]) >= limits.min_tokens(n), text[:40]


def test_max_token_bytes_counts_byte_level_pieces_as_bytes_and_refuses_unbounded_normalizers() -> None:
    byte_level = {"model": {"vocab": {"ĠĠĠĠ": 0, "ab": 1}}, "decoder": {"type": "ByteLevel"}}
    assert max_token_bytes(byte_level) == 4  # four spaces, not eight bytes of "Ġ"
    sentencepiece = {"model": {"vocab": [["▁the", 0.0]]}, "added_tokens": [{"content": "<|endoftext|>"}]}
    assert max_token_bytes(sentencepiece) == len("<|endoftext|>")
    nfkc = {**byte_level, "normalizer": {"type": "NFKC"}}
    assert max_token_bytes(nfkc) == 16  # a character can shrink to a quarter of its bytes
    strip = {**byte_level, "normalizer": {"type": "StripAccents"}}
    assert max_token_bytes(strip) is None  # deletes characters: no bound


def test_stop_token_ids_must_be_token_ids() -> None:
    assert isinstance(
        check_body("completions", {"model": "m", "prompt": "a", "stop_token_ids": []}, LIMITS), dict
    )
    problem = check_body("completions", {"model": "m", "prompt": "a", "stop_token_ids": [3, 99999]}, LIMITS)
    assert isinstance(problem, Problem) and problem.param == "stop_token_ids"


@pytest.mark.parametrize(
    ("message", "field", "expected"),
    [
        (
            "Requested token count exceeds the model's maximum context length of 2048 tokens. You requested a "
            "total of 2100 tokens: 2060 tokens from the input messages and 40 tokens for the completion. Please "
            "reduce ... (the input count includes 4 tokens speculative decoding reserves per request)",
            "prompt",
            "prompt is 2056 tokens and max_tokens 40: 2056 + 40 + 4 reserved by speculative decoding = 2100 "
            "tokens, more than the context of 2048; shorten prompt or lower max_tokens",
        ),
        (
            "The input (2050 tokens) is longer than the model's context length (2048 tokens).",
            "messages",
            "messages is 2050 tokens: 2050, which the context of 2048 tokens cannot hold with room for an "
            "answer; shorten messages",
        ),
        ("Failed to compile json grammar", "prompt", None),
    ],
)
def test_sglangs_context_refusal_counts_the_input_as_sent_and_names_the_field(
    message: str, field: str, expected: str | None
) -> None:
    """Issue 20: SGLang counts the reserved speculative tokens as input (an input 4 tokens longer
    than sent) and says "input messages" on /v1/completions."""
    assert explain_context_overflow(message, field=field) == expected


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"top_k": 2**30}, None),  # SGLang's own "whole vocabulary"
        ({"top_k": -1}, None),
        ({"top_k": 2**30 + 1}, "top_k"),
        ({"top_k": 28688198248}, "top_k"),  # the fuzzer's: killed the replica's scheduler (int32)
        ({"min_tokens": 2**31}, "min_tokens"),  # the same tensor kind, with no max_tokens to bound it
        ({"min_tokens": 2}, None),
    ],
)
def test_sampling_integers_stay_within_what_sglangs_tensors_hold(
    extra: dict[str, Any], param: str | None
) -> None:
    answer = check_body("completions", {"model": "m", "prompt": "a", **extra}, LIMITS)
    if param is None:
        assert not isinstance(answer, Problem), answer
    else:
        assert isinstance(answer, Problem) and answer.status == 400 and answer.param == param, answer
