"""The OFF prefill: the target's extend, and the draft's K/V for the new tokens written directly.

Upstream's EAGLE prefill (sglang 0.5.17 `EAGLEWorkerV2.forward_batch_generation`, extend branch,
srt/speculative/eagle_worker_v2.py:1104-1140) runs the target extend with FULL hidden capture, then
`EagleDraftWorker._draft_extend_for_prefill` (:727): shifted input ids built by a Python loop of
slice/cat/copy per request, a draft ForwardBatch with its own attention metadata, and an eager draft
forward (attention, MLP, lm_head, top-k). Its lasting effects are the draft K/V of the new tokens and
the first draft's top-k and hidden state. While speculation is OFF nothing drafts: the top-k and
hidden state are not read (the resync builds them at re-enable), and the K/V of a one-layer EAGLE-3
draft depend only on each position's aux hidden state and the next token, so they are written
directly (`draft_sync.write_kv_rows`, the warm_kv math) for all new tokens at once. The target's
extend is upstream's call, unchanged.

`Strategy.COLD` writes nothing (stale draft K/V, the benchmark-only counter-example);
`Strategy.FULL_EXTEND` and every ON prefill keep upstream's draft prefill.
"""

from __future__ import annotations

import torch
from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode
from sglang.srt.speculative.eagle_info import EagleDraftInput

from patched_worker import draft_sync
from patched_worker.prefill_tail import tail_tokens

__all__ = ["run_off_prefill", "shifted_rows", "supported"]


def shifted_rows(
    input_ids: torch.Tensor, prefix_lens: list[int], extend_lens: list[int], tail_tokens: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(positions, next tokens) of every extended token, requests concatenated as in `input_ids`.

    The next token of a request's last new token is its tail token (the sampled one, or the next prompt
    token of a chunk: `prefill_tail.tail_tokens`): the same rows upstream's per-request loop builds
    (eagle_worker_v2.py:745-755).
    Built on the host from the batch's length lists and copied over once, from pinned memory on CUDA
    (a copy from pageable memory would wait for the target's forward still running on the stream).
    """
    lens = torch.tensor(extend_lens, dtype=torch.int64)
    starts = torch.cumsum(lens, 0) - lens
    # token i of request r sits at position prefix_r + (i - start_r)
    offsets = torch.repeat_interleave(starts - torch.tensor(prefix_lens, dtype=torch.int64), lens)
    host = torch.cat([torch.arange(int(lens.sum()), dtype=torch.int64) - offsets, starts + lens - 1])
    device = input_ids.device
    if device.type == "cuda":
        host = host.pin_memory()
    rows = host.to(device, non_blocking=True)
    positions, last = rows[: input_ids.numel()], rows[input_ids.numel() :]
    next_tokens = torch.empty_like(input_ids)
    next_tokens[:-1] = input_ids[1:]
    next_tokens[last] = tail_tokens.to(input_ids.dtype)
    return positions, next_tokens


def run_off_prefill(worker, batch, on_publish, write_kv: bool, mark=None):
    """One extend batch while OFF: upstream's target extend, then (write_kv) the draft K/V of its tokens.

    The result's draft input holds the sampled tokens and shape-valid zero top-k / hidden state
    (upstream's stubs for a skipped draft extend), which nothing reads before the resync replaces them.
    `mark(phase)`, if given, is called as each phase ends (`step_probe.StepProbe.mark`).
    """
    mark = mark or _no_mark
    # spec-v2 convention, as upstream: seq_lens stays the committed length. Upstream publishes it at
    # the target's end (its draft prefill follows); a prefill's lengths are known before its forward,
    # so publish first, as the OFF step does: the overlap scheduler's next iteration waits on this
    # fence (FutureMap.resolve_seq_lens_cpu), and at the target's end it would leave the GPU idle
    # while the host builds the next batch.
    if on_publish is not None:
        on_publish(batch.seq_lens)
    mark("publish")
    result = worker.target_worker.forward_batch_generation(
        batch, capture_hidden_mode=CaptureHiddenMode.FULL if write_kv else CaptureHiddenMode.NULL
    )
    result.new_seq_lens = batch.seq_lens
    mark("target")
    if write_kv:
        positions, next_tokens = shifted_rows(
            batch.input_ids,
            batch.prefix_lens,
            batch.extend_lens,
            tail_tokens(batch, result.next_token_ids),
        )
        mark("draft rows")
        draft_sync.write_kv_rows(
            worker,
            aux=result.logits_output.hidden_states,
            next_tokens=next_tokens,
            positions=positions,
            slots=batch.out_cache_loc,
        )
        mark("draft K/V")
    result.next_draft_input = EagleDraftInput(
        bonus_tokens=result.next_token_ids, num_tokens_per_req=1, num_tokens_for_logprob_per_req=1
    )
    worker._stub_skipped_draft_extend(batch, result)
    return result


def _no_mark(phase: str) -> None:
    pass


def supported(batch) -> bool:
    """Whether this extend batch can take the OFF prefill: text only (a multimodal prompt's draft embeds
    are not token embeddings) and not an idle DP-attention batch; anything else goes upstream."""
    return not batch.forward_mode.is_idle() and all(r.multimodal_inputs is None for r in batch.reqs)
