"""Request bodies of the OpenAI streaming API (kept free of Locust so tests can import it)."""

from __future__ import annotations

import random
from typing import Any

from loadtests.locust.config import LoadConfig
from loadtests.locust.prompts import Prompt

__all__ = ["API_PATHS", "build_request", "output_len"]

API_PATHS = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}


def output_len(cfg: LoadConfig, rng: random.Random | None = None) -> int:
    """max_tokens of one request: `output_len`, or drawn from output_len x [1 - s, 1 + s]."""
    if cfg.output_spread <= 0 or rng is None:
        return cfg.output_len
    low = max(1, round(cfg.output_len * (1 - cfg.output_spread)))
    return rng.randint(low, round(cfg.output_len * (1 + cfg.output_spread)))


def build_request(
    cfg: LoadConfig, model: str, prompt: Prompt, rng: random.Random | None = None
) -> dict[str, Any]:
    """The JSON body of one request (streaming unless `cfg.stream` is off).

    `stream_options.include_usage` asks for a final usage chunk (exact output
    token counts); `ignore_eos` (SGLang/vLLM extension) keeps output lengths at
    max_tokens (`output_len`, or drawn with `output_spread` from `rng`) so runs are comparable.
    Servers that ignore either still work.
    """
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": output_len(cfg, rng),
        "temperature": cfg.temperature,
    }
    if cfg.stream:
        body.update(stream=True, stream_options={"include_usage": True})
    if cfg.ignore_eos:
        body["ignore_eos"] = True
    if cfg.api == "chat":
        body["messages"] = [{"role": "user", "content": prompt.text}]
    else:
        body["prompt"] = prompt.text
    return body
