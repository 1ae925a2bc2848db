"""A replica's prompt path (deployments.replica.prompts) with the tiny model's real tokenizer: text is
tokenized as SGLang would, a short text on the event loop, a long one in a worker thread while the
event loop keeps running, one prompt at a time per replica; text that cannot fit the context is
refused before it is tokenized (by size) or once a prefix of it shows it (by tokens), never after
tokenizing all of it."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deployments.http.limits import read_limits
from deployments.replica.prompts import INLINE_BYTES, PromptTooLarge, is_token_ids, tokenize_prompt

# the default caps (serve.max_prompts, serve.max_input_bytes) and the tiny pair's speculation
CAPS = {"max_prompts": 64, "max_input_bytes": 4 * 1024 * 1024}
RESERVED = 4


@pytest.fixture(scope="module")
def target(model_pair) -> str:  # noqa: ANN001 - the session's tiny pair, built if missing
    return str(model_pair.target)


@pytest.fixture(scope="module")
def tokenizer(target: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(target)


def test_text_becomes_the_ids_sglang_would_make_and_ids_pass_as_they_are(tokenizer, target: str) -> None:
    limits = read_limits(target)
    one = asyncio.run(tokenize_prompt(tokenizer, "def add(a, b):", limits))
    assert one == tokenizer(["def add(a, b):"])["input_ids"][0] and is_token_ids(one)
    two = asyncio.run(tokenize_prompt(tokenizer, ["a", "class B:"], limits))
    assert two == tokenizer(["a", "class B:"])["input_ids"] and is_token_ids(two)
    assert asyncio.run(tokenize_prompt(tokenizer, [5, 6], limits)) == [5, 6]


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
        ids = await tokenize_prompt(tokenizer, text, unbounded)
        during = ticks - start
        task.cancel()
        return during, len(ids)

    during, n = asyncio.run(run())
    assert n > 100_000
    assert during >= 10, f"the loop ran {during} ticks while tokenizing"


def test_text_that_cannot_fit_the_context_is_refused_before_tokenizing(tokenizer, target: str) -> None:
    limits = read_limits(target)
    with pytest.raises(PromptTooLarge, match=r"prompt\[1\] is 200000 bytes"):
        asyncio.run(tokenize_prompt(tokenizer, ["ok", "z" * 200_000], limits))


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
        asyncio.run(tokenize_prompt(tokenizer, prompt, limits))


class CountingTokenizer:
    """The real tokenizer, counting the characters handed to it and how many calls run at once
    (instrumentation, not a fake: every call goes to the tokenizer)."""

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer, self.chars, self.in_flight, self.most_in_flight = tokenizer, 0, 0, 0
        self.is_fast = tokenizer.is_fast
        self.threads: list[str] = []  # the thread of each call
        self._lock = threading.Lock()

    def _count(self, texts: Any, call: Any) -> Any:
        with self._lock:
            self.threads.append(threading.current_thread().name)
            self.chars += sum(len(t) for t in ([texts] if isinstance(texts, str) else texts))
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            return call()
        finally:
            with self._lock:
                self.in_flight -= 1

    def __call__(self, texts: Any, **kw: Any) -> Any:
        return self._count(texts, lambda: self._tokenizer(texts, **kw))

    def encode(self, text: str, **kw: Any) -> Any:
        return self._count(text, lambda: self._tokenizer.encode(text, **kw))

    @property
    def backend_tokenizer(self) -> Any:
        outer, backend = self, self._tokenizer.backend_tokenizer

        class Backend:
            def encode_batch(self, texts: list[str], *a: Any, **kw: Any) -> Any:
                return outer._count(texts, lambda: backend.encode_batch(texts, *a, **kw))

        return Backend()


def test_the_worst_body_under_the_caps_is_refused_after_tokenizing_a_few_contexts_of_it(
    tokenizer, target: str
) -> None:
    """Issue 31, finding 1: 64 x "a " * 32500 (4.16 MB) passes every size check, and the replica
    tokenized all 2.1 M tokens of it before the engine refused its first prompt. Now the first
    prompt is refused from a prefix of it: at most a few contexts' worth of characters tokenized."""
    limits = read_limits(target, reserved_tokens=RESERVED, caps=CAPS)
    assert limits.context_tokens == 2048
    worst = ["a " * 32500] * 64
    assert (
        sum(len(t) for t in worst) <= CAPS["max_input_bytes"] and limits.too_long("p", len(worst[0])) is None
    )
    counting = CountingTokenizer(tokenizer)
    with pytest.raises(ValueError, match=r"prompt\[0\] is at least \d+ tokens") as refused:
        asyncio.run(tokenize_prompt(counting, worst, limits))
    assert (
        getattr(refused.value, "status_code", None) == 400
        and getattr(refused.value, "param", None) == "prompt"
    )
    assert counting.chars <= 8 * 2048, f"{counting.chars} characters tokenized for one refusal"
    # a chat's rendered prompt is refused naming messages
    with pytest.raises(ValueError, match=r"shorten messages") as chat:
        asyncio.run(tokenize_prompt(counting, worst[0], limits, "messages"))
    assert getattr(chat.value, "param", None) == "messages"


def test_one_word_prompts_stop_the_request_at_the_first_that_cannot_fit(tokenizer, target: str) -> None:
    """No word boundary to cut at: the first prompt is tokenized whole, refused by its count, and
    the other 63 are not tokenized."""
    limits = read_limits(target, reserved_tokens=RESERVED, caps=CAPS)
    counting = CountingTokenizer(tokenizer)
    with pytest.raises(ValueError, match=r"prompt\[0\] is 32500 tokens"):
        asyncio.run(tokenize_prompt(counting, ["ab" * 32_500] * 64, limits))
    assert counting.chars <= 3 * 65_000


def test_a_replica_tokenizes_one_prompt_at_a_time(tokenizer, target: str) -> None:
    """Many large bodies at once queue on the replica's one tokenizing thread instead of taking
    every thread of the default executor (where the engine's state probe runs) and every core."""
    limits = read_limits(target, context_length=10**9)
    counting = CountingTokenizer(tokenizer)
    text = "def foo(x):\n    return x + 1\n" * 4_000

    async def many() -> list[Any]:
        return await asyncio.gather(*(tokenize_prompt(counting, [text, text], limits) for _ in range(8)))

    assert all(len(ids) == 2 for ids in asyncio.run(many()))
    assert counting.most_in_flight == 1


def test_a_short_text_is_tokenized_on_the_loop_and_a_long_one_on_the_tokenizing_thread(
    tokenizer, target: str
) -> None:
    """Up to INLINE_BYTES a text costs less to tokenize than the hop to the thread, which waits for
    the GIL behind a busy loop; beyond it, the thread keeps the loop free. A list splits alike."""
    limits = read_limits(target, context_length=10**9)
    counting = CountingTokenizer(tokenizer)
    short, long = "é" * (INLINE_BYTES // 2), "a" * (INLINE_BYTES + 1)  # 4096 bytes and 4097
    ids = asyncio.run(tokenize_prompt(counting, [short, long, "def f():"], limits))
    assert ids == [tokenizer([t])["input_ids"][0] for t in (short, long, "def f():")]
    loop_thread = threading.current_thread().name  # asyncio.run's loop runs on this thread
    assert counting.threads[0] == counting.threads[2] == loop_thread
    assert counting.threads[1].startswith("specflip-tokenize")


def test_texts_near_the_context_get_the_engine_s_verdict(tokenizer, target: str) -> None:
    """Up to the context (less what speculation reserves) a prompt is tokenized whole, as SGLang
    would; one token more is refused with its exact count."""
    limits = read_limits(target, reserved_tokens=RESERVED, caps=CAPS)
    fits = 2048 - RESERVED - 1
    text = "a" + " a" * (fits - 1)
    assert asyncio.run(tokenize_prompt(tokenizer, text, limits)) == tokenizer([text])["input_ids"][0]
    with pytest.raises(ValueError, match=rf"prompt is {fits + 1} tokens"):
        asyncio.run(tokenize_prompt(tokenizer, text + " a", limits))


_WORDS = ["a", "def", ".", "(x)", "'s", "123456", "é", "🙂", "日本", "__"]
_PIECES = st.sampled_from(_WORDS + [" ", "  ", "    ", "\n", "\n\n", "\t", "\r\n"])


@settings(max_examples=300, deadline=None)
@given(pieces=st.lists(_PIECES, min_size=1, max_size=80), cut=st.integers(min_value=0, max_value=400))
def test_a_prefix_never_counts_more_known_tokens_than_the_whole_text_has(tokenizer, pieces, cut) -> None:
    """The bound the early refusal rests on: the tokens of a prefix but its last word are at most
    the whole text's tokens (else a prompt that fits could be refused)."""
    from deployments.replica.prompts import _known_tokens

    text = "".join(pieces)
    known, _ = _known_tokens(tokenizer.backend_tokenizer, text[: min(cut, len(text))])
    assert known <= len(tokenizer([text])["input_ids"][0])
