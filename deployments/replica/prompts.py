"""A replica's prompts on their way to the engine: text is tokenized in a worker thread, never on
the replica's event loop, and refused by its size first (each prompt against the context, a list
of prompts against the request caps, `serve.max_*`); token ids pass as they are, within the caps.
The body guard refused all of that already for requests that came over HTTP; this holds for a
request that reaches the replica otherwise (a deployment handle).

SGLang's tokenizer manager tokenizes a text prompt on the event loop that also answers Serve's
health checks (`TokenizerManager._tokenize_texts`): a prompt of megabytes stalls the replica for
seconds to a minute, and Serve restarts it. Handing the engine token ids (`input_ids`) skips that
step; the tokenization is the one SGLang would do (`tokenizer(texts)["input_ids"]` with a fast
tokenizer, `tokenizer.encode` otherwise), so outputs do not change. HF tokenizers release the GIL
while encoding, so the loop keeps running meanwhile.
"""

from __future__ import annotations

import asyncio
from typing import Any

from deployments.http.limits import ModelLimits

__all__ = ["PromptTooLarge", "is_token_ids", "tokenize_off_loop"]


class PromptTooLarge(ValueError):
    """A text prompt that cannot fit the context by its size alone (answered 413)."""

    status_code = 413

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


def _encode(tokenizer: Any, texts: list[str]) -> list[list[int]]:
    if getattr(tokenizer, "is_fast", False):
        return [list(ids) for ids in tokenizer(texts)["input_ids"]]
    return [list(tokenizer.encode(t)) for t in texts]


async def tokenize_off_loop(tokenizer: Any, prompt: Any, limits: ModelLimits) -> Any:
    """`prompt` (text or a list of texts) as token ids, tokenized in a thread; other prompts as
    given. Raises PromptTooLarge for text that cannot fit the context."""
    if isinstance(prompt, str):
        texts, single = [prompt], True
    elif isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
        texts, single = list(prompt), False
    else:
        _check_caps(prompt, limits)  # token ids
        return prompt
    for i, text in enumerate(texts):  # one prompt beyond the context says so, before the totals
        reason = limits.too_long("prompt" if single else f"prompt[{i}]", len(text.encode("utf-8")))
        if reason is not None:
            raise PromptTooLarge(reason)
    _check_caps(prompt, limits)
    if tokenizer is None:
        return prompt
    ids = await asyncio.to_thread(_encode, tokenizer, texts)
    return ids[0] if single else ids
