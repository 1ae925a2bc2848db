"""A replica's prompt path (deployments.replica.prompts) with the tiny model's real tokenizer: text is
tokenized as SGLang would, in a worker thread while the event loop keeps running, and text that
cannot fit the context is refused before it is tokenized."""

from __future__ import annotations

import asyncio

import pytest

from deployments.http.limits import read_limits
from deployments.replica.prompts import PromptTooLarge, is_token_ids, tokenize_off_loop


@pytest.fixture(scope="module")
def target(model_pair) -> str:  # noqa: ANN001 - the session's tiny pair, built if missing
    return str(model_pair.target)


@pytest.fixture(scope="module")
def tokenizer(target: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(target)


def test_text_becomes_the_ids_sglang_would_make_and_ids_pass_as_they_are(tokenizer, target: str) -> None:
    limits = read_limits(target)
    one = asyncio.run(tokenize_off_loop(tokenizer, "def add(a, b):", limits))
    assert one == tokenizer(["def add(a, b):"])["input_ids"][0] and is_token_ids(one)
    two = asyncio.run(tokenize_off_loop(tokenizer, ["a", "class B:"], limits))
    assert two == tokenizer(["a", "class B:"])["input_ids"] and is_token_ids(two)
    assert asyncio.run(tokenize_off_loop(tokenizer, [5, 6], limits)) == [5, 6]


def test_the_event_loop_keeps_running_while_a_long_text_is_tokenized(tokenizer, target: str) -> None:
    # no size bound here (a model with a context long enough for it): the work happens in a thread
    unbounded = read_limits(target, context_length=10**9)
    text = "def foo(x):\n    return x + 1\n" * 40_000  # ~1.2 MB, a second or more of tokenizing

    async def run() -> tuple[int, int]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.005)
                ticks += 1

        task = asyncio.create_task(ticker())
        await asyncio.sleep(0.02)
        start = ticks
        ids = await tokenize_off_loop(tokenizer, text, unbounded)
        during = ticks - start
        task.cancel()
        return during, len(ids)

    during, n = asyncio.run(run())
    assert n > 100_000
    assert during >= 10, f"the loop ran {during} ticks while tokenizing"


def test_text_that_cannot_fit_the_context_is_refused_before_tokenizing(tokenizer, target: str) -> None:
    limits = read_limits(target)
    with pytest.raises(PromptTooLarge, match=r"prompt\[1\] is 200000 bytes"):
        asyncio.run(tokenize_off_loop(tokenizer, ["ok", "z" * 200_000], limits))


@pytest.mark.parametrize(
    ("prompt", "fragment"),
    [
        (["a"] * 5, "prompt has 5 prompts: at most 4"),
        (["x" * 60] * 2, "120 bytes of text: at most 100"),
        ([[1] * 30] * 2, "60 token ids: at most 50"),
    ],
)
def test_a_request_beyond_the_caps_is_refused_on_the_replica_too(
    tokenizer, target: str, prompt, fragment
) -> None:  # noqa: ANN001
    """A request that reaches a replica without the body guard (a deployment handle) is held to
    the same caps (serve.max_prompts, max_input_bytes, max_input_token_ids) before tokenizing."""
    caps = {"max_prompts": 4, "max_input_bytes": 100, "max_input_token_ids": 50}
    limits = read_limits(target, caps=caps)
    with pytest.raises(PromptTooLarge, match=fragment):
        asyncio.run(tokenize_off_loop(tokenizer, prompt, limits))
