"""SSE decoding and chunk classification on byte streams in the formats servers really send."""

from __future__ import annotations

import json

import pytest

from loadtests.locust.sse import SseDecoder, StreamChunk, parse_chunk


def ray_chunk(delta: dict, finish: str | None = None) -> bytes:
    # Byte-for-byte what Ray Serve LLM's SGLangServer._build_sse_chunk writes (json.dumps defaults).
    obj = {
        "id": "sglang-gen-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return f"data: {json.dumps(obj)}\n\n".encode()


USAGE = b'data: {"id":"x","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":9,"total_tokens":21}}\n\n'

STREAM = (
    ray_chunk({"content": "def", "role": "assistant"})
    + ray_chunk({"content": " f(x):"})
    + ray_chunk({"content": "\u00e9\u4e2d"})  # non-ASCII: split pieces may cut a UTF-8 char in half
    + ray_chunk({"content": " return"}, "length")
    + USAGE
    + b"data: [DONE]\n\n"
)


def _all(decoder: SseDecoder, pieces: list[bytes]) -> list[bytes]:
    out = [p for piece in pieces for p in decoder.feed(piece)]
    return out + decoder.close()


def test_whole_stream_gives_six_payloads_in_order() -> None:
    payloads = _all(SseDecoder(), [STREAM])
    assert len(payloads) == 6
    assert payloads[-1] == b"[DONE]"
    assert json.loads(payloads[2])["choices"][0]["delta"]["content"] == "\u00e9\u4e2d"
    assert json.loads(payloads[4])["usage"]["completion_tokens"] == 9


@pytest.mark.parametrize("size", [1, 2, 3, 7, 64])
def test_split_anywhere_gives_the_same_payloads(size: int) -> None:
    pieces = [STREAM[i : i + size] for i in range(0, len(STREAM), size)]
    assert _all(SseDecoder(), pieces) == _all(SseDecoder(), [STREAM])


def test_crlf_comments_event_fields_and_multiline_data() -> None:
    raw = b': keep-alive\r\nevent: message\r\ndata: {"a":\r\ndata: 1}\r\n\r\ndata:[DONE]\r\n\r\n'
    assert _all(SseDecoder(), [raw]) == [b'{"a":\n1}', b"[DONE]"]


def test_last_event_without_blank_line_is_flushed_at_close() -> None:
    d = SseDecoder()
    assert d.feed(b"data: [DONE]") == []
    assert d.close() == [b"[DONE]"]


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        # vLLM's opening role chunk: no token yet
        (
            '{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}',
            StreamChunk(is_token=False),
        ),
        # Ray SGLangServer's first chunk carries the role and the first token
        (
            '{"choices":[{"index":0,"delta":{"content":"Hi","role":"assistant"},"finish_reason":null}]}',
            StreamChunk(is_token=True),
        ),
        # a token that decodes to nothing yet (partial UTF-8): still a token
        (
            '{"choices":[{"index":0,"delta":{"content":""},"finish_reason":null}]}',
            StreamChunk(is_token=True),
        ),
        # SGLang native: empty closing chunk with finish_reason only
        (
            '{"choices":[{"index":0,"delta":{"content":""},"finish_reason":"stop"}]}',
            StreamChunk(is_token=False, finish_reason="stop"),
        ),
        # last token together with finish_reason
        (
            '{"choices":[{"index":0,"delta":{"content":" x"},"finish_reason":"length"}]}',
            StreamChunk(is_token=True, finish_reason="length"),
        ),
        # completions API
        (
            '{"choices":[{"index":0,"text":"abc","logprobs":null,"finish_reason":null}]}',
            StreamChunk(is_token=True),
        ),
        # usage chunk (stream_options.include_usage)
        (
            '{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":7,"total_tokens":12}}',
            StreamChunk(completion_tokens=7, prompt_tokens=5),
        ),
        # error object mid-stream
        ('{"error":{"message":"KV cache full","code":500}}', StreamChunk(error="KV cache full")),
        ("[DONE]", StreamChunk(done=True)),
    ],
)
def test_parse_chunk_table(payload: str, expected: StreamChunk) -> None:
    assert parse_chunk(payload) == expected


def test_malformed_payload_is_an_error_not_an_exception() -> None:
    chunk = parse_chunk("{not json")
    assert chunk.error is not None and "malformed" in chunk.error
    assert not chunk.is_token


@pytest.mark.parametrize(
    "payload",
    [
        b'{"id":"a","choices":[{"index":0,"delta":{"content":" x"},"logprobs":null,"finish_reason":null}]}',
        b'{"choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": null}]}',
        b'{"choices":[{"index":0,"text":"abc","logprobs":null,"finish_reason":null}],"usage":null}',
        b'{"choices":[{"index":0,"delta":{"content":"say \\"role\\""},"finish_reason":null}]}',
        b'{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}',
        b'{"choices":[{"index":0,"delta":{"content":null,"reasoning_content":"x"},"finish_reason":null}]}',
        b'{"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":null}],"usage":{"completion_tokens":3}}',
    ],
)
def test_the_byte_level_shortcut_agrees_with_parsing_the_json(payload: bytes) -> None:
    from loadtests.locust import sse

    obj = json.loads(payload)
    choice = obj["choices"][0]
    delta = choice.get("delta", {})
    content = delta.get("content") if "delta" in choice else choice.get("text")
    expected = isinstance(content, str) and (content != "" or "role" not in delta)
    assert parse_chunk(payload).is_token is expected
    if sse._plain_token(payload):  # taken without parsing: must be an ordinary token
        assert expected and parse_chunk(payload) == StreamChunk(is_token=True)


def test_simple_and_multiline_events_mixed_in_one_piece_keep_the_unfinished_rest() -> None:
    d = SseDecoder()
    out = d.feed(b"data: 1\n\n: note\ndata: 2\ndata: 3\n\ndata: 4")
    assert out == [b"1", b"2\n3"]
    assert d.feed(b"\n\n") == [b"4"]
