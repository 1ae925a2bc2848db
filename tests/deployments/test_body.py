"""The raw-body checks and the model limits, as pure functions (the real app's answers to the same
inputs are in test_api_inputs.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from deployments.body import Problem, check_chat_body, check_completion_body, parse_body
from deployments.limits import ModelLimits, max_token_bytes, read_limits

LIMITS = ModelLimits(context_tokens=100, vocab_size=50, max_token_bytes=4)
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


CHAT_CASES: list[tuple[str, dict[str, Any], str | None]] = [
    ("ok", {"messages": USER}, None),
    ("user role is allowed", {"messages": [{"role": "User", "content": "x"}]}, None),
    (
        "assistant with tool_calls, no content",
        {"messages": [{"role": "assistant", "tool_calls": [{}]}]},
        None,
    ),
    ("unknown role lists user", {"messages": [{"role": "wizard", "content": "x"}]}, "tool, user"),
    (
        "bad content blamed on content",
        {"messages": [{"role": "user", "content": {"x": 1}}]},
        "messages[0].content must",
    ),
    ("missing content", {"messages": [{"role": "user"}]}, "messages[0].content is required"),
    ("image part", {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "text parts only"),
    (
        "response_format a number",
        {"messages": USER, "response_format": 5},
        "response_format must be an object",
    ),
    ("response_format a string", {"messages": USER, "response_format": "json"}, "got a string"),
    (
        "response_format.schema a list",
        {"messages": USER, "response_format": {"type": "json_schema", "schema": []}},
        "schema must",
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
    ("seed beyond 64 bits", {"messages": USER, "seed": 2**64}, "64-bit"),
    (
        "tools are deployments.structured's to check",
        {"messages": USER, "tools": [{"type": "function"}]},
        None,
    ),
    ("no tools is fine", {"messages": USER, "tools": [], "tool_choice": "none"}, None),
    ("tool_choice is deployments.structured's to check", {"messages": USER, "tool_choice": "required"}, None),
    ("messages too large", {"messages": [{"role": "user", "content": "x" * 401}]}, "more than the context"),
]


@pytest.mark.parametrize(("case", "body", "fragment"), CHAT_CASES, ids=[c[0] for c in CHAT_CASES])
def test_chat_body_checks(case: str, body: dict[str, Any], fragment: str | None) -> None:
    problem = check_chat_body(body, LIMITS)
    if fragment is None:
        assert problem is None, problem
    else:
        assert problem is not None and fragment in problem.message, problem


COMPLETION_CASES: list[tuple[str, Any, int | None, str]] = [
    ("text", "abc", None, ""),
    ("texts", ["a", "b"], None, ""),
    ("token ids", [1, 2, 3], None, ""),
    ("lists of token ids", [[1, 2], [3]], None, ""),
    ("empty", "", 400, "prompt"),
    ("mixed", ["a", [1]], 400, "not a mix"),
    ("id beyond the vocabulary", [1, 50], 400, "prompt[1] is not a token id: 50 (valid: [0, 50))"),
    ("negative id", [[1, -1]], 400, "not a token id"),
    ("boolean id", [True, 1], 400, "not a mix"),
    ("more ids than the context", list(range(40)) * 3, 400, "the context holds 100"),
    ("text larger than the context", "x" * 401, 413, "401 bytes: at least 101 tokens"),
    ("one of several texts too large", ["a", "y" * 500], 413, "prompt[1] is 500 bytes"),
]


@pytest.mark.parametrize(
    ("case", "prompt", "status", "fragment"), COMPLETION_CASES, ids=[c[0] for c in COMPLETION_CASES]
)
def test_completion_body_checks(case: str, prompt: Any, status: int | None, fragment: str) -> None:
    problem = check_completion_body({"prompt": prompt}, LIMITS)
    if status is None:
        assert problem is None, problem
    else:
        assert problem is not None and problem.status == status and fragment in problem.message, problem


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
    assert check_completion_body({"prompt": "a", "stop_token_ids": []}, LIMITS) is None
    problem = check_completion_body({"prompt": "a", "stop_token_ids": [3, 99999]}, LIMITS)
    assert problem is not None and problem.param == "stop_token_ids"
