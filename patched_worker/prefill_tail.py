"""An EAGLE prefill's tail tokens without a host wait.

Each EAGLE prefill needs, per request, the token after its last new one: the sampled token, or, for
the request a chunk cut short, its next prompt token. sglang 0.5.17 `_eagle_prefill_tail_tokens`
(srt/speculative/eagle_utils.py:84) writes that prompt token, a Python int, into an element of the
sampled tokens on the GPU (`tail_tokens[i] = next_prompt_token`): a copy from pageable host memory,
which returns only when the stream has run everything queued before it, the chunk's whole target
extend. The host then builds the next batch only after the chunk has run, and the GPU waits for it
(an H100 profile at c=256, 2026-12-07: a ~165-ms cudaStreamSynchronize after each full 8,192-token
chunk, the GPU idle 2.3x a plain engine's, the OFF engine alone at 0.980x plain and 0.996x without
that step; docs/benchmarks.md "Where the OFF prefill waits").

`tail_tokens` returns the same values and writes the prompt token with a fill on the device, which
waits for nothing. The OFF prefill calls it; `install_prefill_tail` puts it in place of the name
upstream's EAGLE prefill calls (`EagleDraftWorker._draft_extend_for_prefill`,
srt/speculative/eagle_worker_v2.py:745), so ON prefills stop waiting too.
This goes when upstream writes the token without a host copy.
"""

from __future__ import annotations

import torch

__all__ = ["chunk_tail", "install_prefill_tail", "tail_tokens"]


def chunk_tail(batch) -> tuple[int, int] | None:
    """(index in the batch, next prompt token) of the request this prefill cut short, if any: the
    request and token upstream's `_eagle_prefill_tail_tokens` picks."""
    token = batch.chunked_req_next_prompt_token
    if token is None:
        return None
    for i, req in enumerate(batch.reqs):
        if req is batch.chunked_req:
            return i, int(token)
    return None


def tail_tokens(batch, next_token_ids: torch.Tensor) -> torch.Tensor:
    """Upstream's `_eagle_prefill_tail_tokens(batch, next_token_ids)`, value for value, with no host copy."""
    tails = next_token_ids.to(batch.input_ids.dtype)
    found = chunk_tail(batch)
    if found is not None:
        i, token = found
        tails = tails.clone()
        tails[i : i + 1].fill_(token)  # a scalar fill: the value travels with the launch
    return tails


def install_prefill_tail() -> tuple[str, ...]:
    """Patch the name upstream's EAGLE prefill calls; returns what was patched."""
    import sglang.srt.speculative.eagle_worker_v2 as eagle_worker_v2

    eagle_worker_v2._eagle_prefill_tail_tokens = tail_tokens
    return ("eagle_worker_v2._eagle_prefill_tail_tokens (the chunk's next prompt token without a host copy)",)
