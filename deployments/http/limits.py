"""What one request may carry: what the served model can hold, read from its files (context
length, vocabulary size, the longest token in bytes, the text of its document-start token), and
the app's caps on a request's whole cost (`serve.max_prompts`, `serve.max_input_bytes`,
`serve.max_input_token_ids`). The body guard refuses a request by these before anything
tokenizes it; a replica checks the same bounds before tokenizing (off its event loop).

The caps bound a request as a whole, not per prompt: a completions body of 300 texts of 100 kB
each fits the context prompt by prompt, but tokenizing all of it held a replica for 14-22 s and
kept gigabytes of its memory.

The size bound is exact, not a guess: no token of the tokenizer covers more than
`max_token_bytes` bytes of UTF-8 text, so a prompt of `n` bytes is at least
`ceil(n / max_token_bytes)` tokens. A prompt whose lower bound already exceeds the context cannot
fit, whatever the tokenizer makes of it.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from deployments.config import SpecFlipConfig

__all__ = ["ModelLimits", "explain_context_overflow", "limits_for", "max_token_bytes", "read_limits"]

# GPT-2 style byte-level BPE writes each byte as one printable character (bytes_to_unicode)
_BYTE_LEVEL = "ByteLevel"


@dataclasses.dataclass(frozen=True)
class ModelLimits:
    context_tokens: int | None = None  # the engine's context length (config or model)
    vocab_size: int | None = None  # token ids must be below this
    max_token_bytes: int | None = None  # the most UTF-8 bytes one token can stand for
    reserved_tokens: int = 0  # per-request tokens the speculative decoder keeps out of the context
    document_start: str | None = None  # the text of the model's BOS token: OpenAI's "no prompt"
    max_prompts: int | None = None  # prompts in one completions request
    max_messages: int | None = None  # messages in one chat request
    max_input_bytes: int | None = None  # UTF-8 bytes of text across all prompts or messages
    max_input_token_ids: int | None = None  # token ids across all token-id prompts

    def min_tokens(self, n_bytes: int) -> int:
        """The fewest tokens `n_bytes` of UTF-8 text can become (0 when the bound is unknown)."""
        if not self.max_token_bytes:
            return 0
        return math.ceil(n_bytes / self.max_token_bytes)

    def max_prompt_bytes(self) -> int | None:
        """Text longer than this (UTF-8 bytes) cannot fit the context; None: unknown."""
        if self.context_tokens is None or not self.max_token_bytes:
            return None
        return self.context_tokens * self.max_token_bytes

    def too_long(self, field: str, n_bytes: int) -> str | None:
        """Why a text of `n_bytes` cannot fit the context (a one-line reason naming `field`), or None."""
        limit = self.max_prompt_bytes()
        if limit is None or n_bytes <= limit:
            return None
        return (
            f"{field} is {n_bytes} bytes: at least {self.min_tokens(n_bytes)} tokens, more than the "
            f"context of {self.context_tokens} tokens can hold (no token is longer than "
            f"{self.max_token_bytes} bytes)"
        )

    def too_many_prompts(self, n: int) -> str | None:
        """Why `n` prompts are too many for one request (names `prompt`), or None."""
        if self.max_prompts is None or n <= self.max_prompts:
            return None
        return (
            f"prompt has {n} prompts: at most {self.max_prompts} per request (serve.max_prompts); "
            "send the rest in other requests"
        )

    def too_many_messages(self, n: int) -> str | None:
        """Why `n` messages are too many for one request (names `messages`), or None."""
        if self.max_messages is None or n <= self.max_messages:
            return None
        return f"messages has {n} messages: at most {self.max_messages} per request (serve.max_messages)"

    def input_too_large(self, field: str, n_bytes: int) -> str | None:
        """Why `n_bytes` of text across a request's prompts or messages are too much, or None."""
        if self.max_input_bytes is None or n_bytes <= self.max_input_bytes:
            return None
        return (
            f"{field} carry {n_bytes} bytes of text: at most {self.max_input_bytes} per request "
            "(serve.max_input_bytes)"
        )

    def too_many_token_ids(self, field: str, n: int) -> str | None:
        """Why `n` token ids across a request's prompts are too many, or None."""
        if self.max_input_token_ids is None or n <= self.max_input_token_ids:
            return None
        return (
            f"{field} has {n} token ids: at most {self.max_input_token_ids} per request "
            "(serve.max_input_token_ids)"
        )


def max_token_bytes(tokenizer_json: dict[str, Any]) -> int | None:
    """The most bytes of text one token of a `tokenizer.json` stands for (an upper bound), or None."""
    model = tokenizer_json.get("model") or {}
    vocab = model.get("vocab")
    if isinstance(vocab, list):  # Unigram: [[piece, score], ...]
        pieces = [p[0] for p in vocab if isinstance(p, list) and p and isinstance(p[0], str)]
    elif isinstance(vocab, dict):  # BPE, WordPiece, WordLevel: {piece: id}
        pieces = [p for p in vocab if isinstance(p, str)]
    else:
        return None
    if not pieces:
        return None
    shrink = _shrink_factor(tokenizer_json.get("normalizer"))
    if shrink is None:
        return None
    byte_level = _BYTE_LEVEL in json.dumps(tokenizer_json.get("decoder") or {})
    # byte-level pieces are one character per byte; other pieces are at most their own UTF-8
    # length (a "▁" or "<0x0A>" stands for fewer bytes than it is written with: an upper bound)
    longest = max(len(p) if byte_level else len(p.encode("utf-8", "surrogatepass")) for p in pieces)
    for added in tokenizer_json.get("added_tokens") or []:
        content = added.get("content") if isinstance(added, dict) else None
        if isinstance(content, str):
            longest = max(longest, len(content.encode("utf-8", "surrogatepass")))
    return longest * shrink


# normalizers that never shorten text, and those that shorten a character to no less than one byte
# (a UTF-8 character is at most 4 bytes)
_KEEPS_LENGTH = frozenset({"NFD", "Prepend"})
_SHRINKS_CHARS = frozenset({"NFC", "NFKC", "NFKD", "Lowercase"})


def _shrink_factor(normalizer: Any) -> int | None:
    """How many times shorter (in bytes) a normalizer can make a text: 1, 4, or None (unbounded:
    no size bound can be derived, e.g. a normalizer that strips characters)."""
    if normalizer is None:
        return 1
    if not isinstance(normalizer, dict):
        return None
    kind = normalizer.get("type")
    if kind == "Sequence":
        factors = [_shrink_factor(n) for n in normalizer.get("normalizers") or []]
        if any(f is None for f in factors):
            return None
        return max([1, *(f for f in factors if f is not None)])
    if kind == "Replace":  # e.g. " " -> "▁" (longer): fine; a replacement that shortens is not
        pattern = (normalizer.get("pattern") or {}).get("String")
        content = normalizer.get("content")
        if (
            isinstance(pattern, str)
            and isinstance(content, str)
            and len(content.encode()) >= len(pattern.encode())
        ):
            return 1
        return None
    if kind in _KEEPS_LENGTH:
        return 1
    if kind in _SHRINKS_CHARS:
        return 4
    return None


def _read_json(path: str) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _token_text(value: Any) -> str | None:
    """A special token as tokenizer_config.json writes it: a string or {"content": ...}."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) and value else None


def read_limits(
    model_path: str,
    tokenizer_path: str | None = None,
    *,
    context_length: int | None = None,
    reserved_tokens: int = 0,
    caps: dict[str, int] | None = None,
) -> ModelLimits:
    """The limits of a model directory as far as its files tell (None where they do not: a model
    not visible from this node leaves the checks to the replicas), with the request caps given."""
    config = _read_json(os.path.join(model_path, "config.json")) or {}
    tokenizer_config = _read_json(os.path.join(tokenizer_path or model_path, "tokenizer_config.json")) or {}
    context = context_length
    if context is None:
        value = config.get("max_position_embeddings")
        context = value if isinstance(value, int) and value > 0 else None
    vocab = config.get("vocab_size")
    tokenizer = _read_json(os.path.join(tokenizer_path or model_path, "tokenizer.json"))
    return ModelLimits(
        context_tokens=context,
        vocab_size=vocab if isinstance(vocab, int) and vocab > 0 else None,
        max_token_bytes=max_token_bytes(tokenizer) if tokenizer else None,
        reserved_tokens=reserved_tokens,
        document_start=_token_text(tokenizer_config.get("bos_token")),
        **(caps or {}),
    )


# the request caps: fields of both ModelLimits and the config's `serve` section
_CAPS = ("max_prompts", "max_messages", "max_input_bytes", "max_input_token_ids")


def limits_for(config: SpecFlipConfig | None) -> ModelLimits:
    """The served model's limits, as far as this node can read its files."""
    if config is None:
        return ModelLimits()
    reserved = config.speculation.draft_tokens if config.model.draft_path else 0
    return read_limits(
        config.model.path,
        config.model.tokenizer_path,
        context_length=config.engine.context_length,
        reserved_tokens=reserved,
        caps={name: getattr(config.serve, name) for name in _CAPS},
    )


# SGLang 0.5.17's context refusals (managers/tokenizer_manager.py `_validate_one_request`): both
# count the tokens speculative decoding reserves per request as input, and the second says
# "input messages" on /v1/completions too
_INPUT_TOO_LONG = re.compile(
    r"The input \((\d+) tokens\) is longer than the model's context length \((\d+) tokens\)\."
)
_TOTAL_TOO_LONG = re.compile(
    r"Requested token count exceeds the model's maximum context length of (\d+) tokens\. You requested "
    r"a total of (\d+) tokens: (\d+) tokens from the input messages and (\d+) tokens for the completion\."
)
_RESERVED_NOTE = re.compile(
    r"\(the input count includes (\d+) tokens speculative decoding reserves per request\)"
)


def explain_context_overflow(message: str, *, field: str, reserved: int | None = None) -> str | None:
    """SGLang's refusal of a request beyond the context, restated with the input counted as the
    client sent it (`field`: "prompt" or "messages") and the reserved tokens named on their own;
    None if `message` is not one. `reserved`: the tokens speculative decoding keeps per request
    (None: read from the note the replica appends to SGLang's message)."""
    if reserved is None:
        note = _RESERVED_NOTE.search(message)
        reserved = int(note.group(1)) if note else 0
    spec = f" + {reserved} reserved by speculative decoding" if reserved else ""
    total = _TOTAL_TOO_LONG.search(message)
    if total is not None:
        context, _, counted, new = (int(g) for g in total.groups())
        tokens = counted - reserved
        return (
            f"{field} is {tokens} tokens and max_tokens {new}: {tokens} + {new}{spec} = {counted + new} tokens, "
            f"more than the context of {context}; shorten {field} or lower max_tokens"
        )
    single = _INPUT_TOO_LONG.search(message)
    if single is not None:
        counted, context = (int(g) for g in single.groups())
        tokens = counted - reserved
        return (
            f"{field} is {tokens} tokens{spec}: {counted}, which the context of {context} tokens "
            f"cannot hold with room for an answer; shorten {field}"
        )
    return None
