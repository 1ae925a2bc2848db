"""Request bodies of the OpenAI streaming API (kept free of Locust so tests can import it)."""

from __future__ import annotations

from typing import Any

from loadtests.config import LoadConfig
from loadtests.prompts import Prompt

__all__ = ["API_PATHS", "build_request"]

API_PATHS = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}


def build_request(cfg: LoadConfig, model: str, prompt: Prompt) -> dict[str, Any]:
    """The JSON body of one request (streaming unless `cfg.stream` is off).

    `stream_options.include_usage` asks for a final usage chunk (exact output
    token counts); `ignore_eos` (SGLang/vLLM extension) keeps output lengths at
    `output_len` so runs are comparable. Servers that ignore either still work.
    """
    body: dict[str, Any] = {"model": model, "max_tokens": cfg.output_len, "temperature": cfg.temperature}
    if cfg.stream:
        body.update(stream=True, stream_options={"include_usage": True})
    if cfg.ignore_eos:
        body["ignore_eos"] = True
    if cfg.api == "chat":
        body["messages"] = [{"role": "user", "content": prompt.text}]
    else:
        body["prompt"] = prompt.text
    return body
