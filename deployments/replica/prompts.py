"""A replica's prompts on their way to the engine: text is tokenized (a short text on the event
loop, as SGLang's own server does; a long one on the replica's one tokenizing thread) and refused as
soon as it cannot fit the context; token ids pass as they are, within the caps. The body guard
refused what it can tell by size already for requests that came over HTTP; this holds for a request
that reaches the replica otherwise (a deployment handle) too.

SGLang's tokenizer manager tokenizes a text prompt on the event loop that also answers Serve's
health checks (`TokenizerManager._tokenize_texts`); handing the engine token ids (`input_ids`)
skips that step. The tokenization is the one SGLang would do (`tokenizer(texts)["input_ids"]` with
a fast tokenizer, `tokenizer.encode` otherwise), so outputs do not change. What one replica spends
on it is bounded three ways:

- **Never more of a prompt than can fit.** A prompt's bytes bound its tokens from below only
  (no token is longer than the longest piece), so `"a " * 32500` passes every size check and is
  32,501 tokens. A prompt longer than `4 x` the context in characters is tokenized by prefixes
  first (growing up to 4x a round): the tokens of a prefix's words but its last one are the
  first tokens of the whole text (a pre-tokenizer splits words left to right, and a word's tokens
  never leave it), so once they alone cannot fit the context the prompt is refused, having
  tokenized a few contexts' worth of it, not all of it. A prompt of one long word, or a
  tokenizer without word splitting, gives no such bound: that prompt is tokenized whole (at most
  `context x longest token` bytes, the size check's bound) and refused by its count.
- **Stop at the first prompt that cannot fit**: a list of prompts is tokenized one prompt at a
  time, and refused at the first one beyond the context.
- **A long prompt (over `INLINE_BYTES`) at a time per replica**, on one thread of its own
  (`_WORKER`): many large bodies at once queue there instead of taking every core and every thread
  of the default executor, where the engine's state probe and Serve's health check run
  (`asyncio.to_thread`), and HF tokenizers release the GIL while encoding, so the event loop keeps
  running meanwhile. A short text is tokenized on the loop, at most `INLINE_BYTES` of it (a few
  hundred microseconds): the thread's hop costs more than that, and while the loop is busy (many
  streams at once) the thread waits for the GIL behind it, 5 ms per switch
  (`loadtests.bench.tokenize_hop`: a 256-character prompt waited 0.4-0.8 s at the median, up to
  3.8 s, for the thread beside a saturated loop on a host with free cores; 0.11 ms on the loop).
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from deployments.http.limits import ModelLimits

__all__ = ["INLINE_BYTES", "PromptTooLarge", "PromptTooLong", "is_token_ids", "tokenize_prompt"]

INLINE_BYTES = 4096  # a text up to this size (UTF-8) is tokenized on the event loop, a longer one on _WORKER
# one tokenizing thread per process (a replica is one process): long prompts queue here, one at a time
_WORKER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="specflip-tokenize")
_CHARS_PER_TOKEN = 4  # a prompt longer than this many characters per context token is tokenized by prefixes
_MAX_GROWTH = 4  # a prefix grows at most this many times from one round to the next


class PromptTooLarge(ValueError):
    """A text prompt that cannot fit the context by its size alone (answered 413)."""

    status_code = 413

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class PromptTooLong(ValueError):
    """A text prompt with more tokens than the context can hold (answered 400, as SGLang's own
    refusal of it would be), found from a prefix of it."""

    status_code = 400

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


def is_token_ids(prompt: Any) -> bool:
    """A list of token ids, or a non-empty list of such lists."""
    if not isinstance(prompt, list) or not prompt:
        return False
    if all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        return True
    return all(isinstance(p, list) and p and all(isinstance(t, int) for t in p) for p in prompt)


def _check_caps(prompt: Any, limits: ModelLimits) -> None:
    """A list of prompts within the request caps (count, bytes of text, token ids), else PromptTooLarge."""
    if not isinstance(prompt, list) or not prompt or isinstance(prompt[0], int):
        return
    reason = limits.too_many_prompts(len(prompt))
    if reason is None:
        texts = [p for p in prompt if isinstance(p, str)]
        reason = limits.input_too_large("prompt", sum(len(t.encode("utf-8")) for t in texts))
    if reason is None:
        reason = limits.too_many_token_ids("prompt", sum(len(p) for p in prompt if isinstance(p, list)))
    if reason is not None:
        raise PromptTooLarge(reason, param="prompt")


def _encode(tokenizer: Any, text: str) -> list[int]:
    """The ids SGLang would make of `text`."""
    if getattr(tokenizer, "is_fast", False):
        return list(tokenizer([text])["input_ids"][0])
    return list(tokenizer.encode(text))


def _known_tokens(backend: Any, prefix: str) -> tuple[int, bool]:
    """How many tokens a text starting with `prefix` has at least: the prefix's tokens but those
    of its last word (which the rest of the text may continue), special tokens included; and
    whether the prefix has more than one word (else a longer prefix cannot tell more)."""
    encoding = backend.encode_batch([prefix])[0]  # encode_batch releases the GIL
    words = [w for w in encoding.word_ids if w is not None]
    last = max(words, default=None)
    known = sum(1 for w in encoding.word_ids if w is None or w != last)
    return known, min(words, default=last) != last


def _encode_within(tokenizer: Any, text: str, limits: ModelLimits, field: str, param: str) -> list[int]:
    """`text`'s ids, or PromptTooLong as soon as a prefix shows it cannot fit the context (on the
    event loop for a short text, on _WORKER for a long one)."""
    backend = getattr(tokenizer, "backend_tokenizer", None) if getattr(tokenizer, "is_fast", False) else None
    context, reserved = limits.context_tokens, limits.reserved_tokens
    fits = None if context is None else context - reserved - 1  # the most input tokens SGLang takes
    spec = f" + {reserved} reserved by speculative decoding" if reserved else ""
    end = _CHARS_PER_TOKEN * ((fits or 0) + 1)
    while backend is not None and fits is not None and end < len(text):
        known, several_words = _known_tokens(backend, text[:end])
        if known > fits:
            raise PromptTooLong(
                f"{field} is at least {known} tokens (counted in its first {end} characters){spec}: "
                f"more than the context of {context} tokens can hold; shorten {param}",
                param=param,
            )
        if not several_words:  # one word so far: only the whole text tells
            break
        # the characters the rest of the budget needs at this prefix's rate, and a quarter more
        wanted = end * (fits + 1) // max(known, 1) * 5 // 4
        end = min(_MAX_GROWTH * end, max(2 * end, wanted))
    ids = _encode(tokenizer, text)
    if fits is not None and len(ids) > fits:  # the next prompts of the request are not tokenized
        raise PromptTooLong(
            f"{field} is {len(ids)} tokens{spec}: more than the context of {context} tokens can hold; "
            f"shorten {param}",
            param=param,
        )
    return ids


async def tokenize_prompt(tokenizer: Any, prompt: Any, limits: ModelLimits, param: str = "prompt") -> Any:
    """`prompt` (text or a list of texts) as token ids, each text on the event loop up to
    `INLINE_BYTES`, on the replica's tokenizing thread beyond; other prompts as given. Raises
    PromptTooLarge for text that cannot fit the context by its size, PromptTooLong for text with
    more tokens than it can hold. `param`: the request field the text came from (`messages` for a
    rendered chat)."""
    if isinstance(prompt, str):
        texts, single = [prompt], True
    elif isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
        texts, single = list(prompt), False
    else:
        _check_caps(prompt, limits)  # token ids
        return prompt
    fields = [param if single else f"{param}[{i}]" for i in range(len(texts))]
    sizes = [len(text.encode("utf-8")) for text in texts]
    # one prompt beyond the context by its size says so, before the totals
    for field, size in zip(fields, sizes, strict=True):
        reason = limits.too_long(field, size)
        if reason is not None:
            raise PromptTooLarge(reason)
    _check_caps(prompt, limits)
    if tokenizer is None:
        return prompt
    loop = asyncio.get_running_loop()
    ids = []
    for field, text, size in zip(fields, texts, sizes, strict=True):
        if size <= INLINE_BYTES:
            ids.append(_encode_within(tokenizer, text, limits, field, param))
        else:
            ids.append(
                await loop.run_in_executor(_WORKER, _encode_within, tokenizer, text, limits, field, param)
            )
    return ids[0] if single else ids
