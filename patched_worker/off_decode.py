"""The OFF step: one plain DECODE forward of the target, shaped as a one-token spec-v2 result.

Spec v2 keeps `batch.seq_lens` = committed length L and carries the last sampled
("bonus") token, whose K/V is not written yet, in `spec_info.bonus_tokens`. A plain
decode of that token at position L is exactly what a non-speculative engine runs:
forward mode DECODE, seq_lens L+1, one KV slot. The result looks like a verify that
accepted one token (accept_lens = 1, one token per request), so SGLang's result
processing, overlap relay (FutureMap) and KV bookkeeping run unchanged.

Structured output: the grammar mask comes from SGLang's plain-decode sampler
(`model_runner.sample` -> `SamplingBatchInfo.update_regex_vocab_mask`), built from each
request's grammar state. Under the overlap scheduler the previous step's result is not
processed yet when this step runs, so its committed tokens (the token decoded here
included) are not in the grammar yet: the step first calls the scheduler's grammar
barrier, as upstream's verify does before building its mask (eagle_worker_common.py:571).

Replaces, while OFF: sglang 0.5.17 `EAGLEWorkerV2.forward_batch_generation`'s decode
branch (srt/speculative/eagle_worker_v2.py:1141-1198: draft + TARGET_VERIFY + draft extend).
"""

from __future__ import annotations

import torch
from sglang.kernels.ops.speculative.cache_locs import assign_extend_cache_locs_uniform_func
from sglang.srt.managers.utils import GenerationBatchResult
from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardBatch, ForwardMode
from sglang.srt.speculative.eagle_info import EagleDraftInput

__all__ = ["run_off_decode"]


def run_off_decode(
    worker, batch, on_publish, capture_aux: bool, graph_runner=None, grammar_barrier=None
) -> GenerationBatchResult:
    """Run one DECODE step for every request in `batch`; `batch` fields are restored by the scheduler.

    capture_aux: return the target's aux hidden states (needed to write draft K/V).
    graph_runner: plain-decode CUDA graph runner to use instead of the target's verify graphs.
    grammar_barrier: the overlap scheduler's "advance the grammars over the pending result" call.
    """
    model_runner = worker.target_worker.model_runner
    bs = len(batch.seq_lens)
    committed = batch.seq_lens  # L per request
    committed_cpu, committed_sum = batch.seq_lens_cpu, batch.seq_lens_sum
    bonus = batch.spec_info.bonus_tokens

    # the bonus token's K/V goes to the slot reserved at position L (eagle_prepare_for_decode reserved it)
    batch.out_cache_loc = assign_extend_cache_locs_uniform_func(
        req_pool_indices=batch.req_pool_indices,
        req_to_token=worker.req_to_token_pool.req_to_token,
        start_offset=committed,
        batch_size=bs,
        draft_token_num=1,
        device=worker.device,
    )
    slots = batch.out_cache_loc
    new_seq_lens = committed + 1
    if on_publish is not None:
        # An OFF step always commits exactly one token, so the lengths are known before the forward.
        # Publishing now lets the overlap scheduler prepare the next batch while this one runs: the
        # next iteration's resolve_seq_lens_cpu waits on this fence (upstream publishes at verify end).
        on_publish(new_seq_lens)
    batch.input_ids = bonus.to(torch.int64)
    batch.forward_mode = ForwardMode.DECODE
    batch.spec_info = None
    batch.seq_lens = committed + 1  # plain decode convention: length including the new token
    if batch.seq_lens_cpu is not None:
        batch.seq_lens_cpu = batch.seq_lens_cpu + 1
        batch.seq_lens_sum = int(batch.seq_lens_cpu.sum())
    elif batch.seq_lens_sum is not None:
        batch.seq_lens_sum = batch.seq_lens_sum + bs
    forward_batch = ForwardBatch.init_new(
        batch,
        model_runner,
        return_hidden_states_before_norm=False,
        capture_hidden_mode=CaptureHiddenMode.FULL if capture_aux else CaptureHiddenMode.NULL,
    )

    saved_runner = model_runner.decode_cuda_graph_runner
    model_runner.decode_cuda_graph_runner = graph_runner  # never replay a TARGET_VERIFY graph here
    try:
        out = model_runner.forward(forward_batch)
    finally:
        model_runner.decode_cuda_graph_runner = saved_runner
    logits_output = out.logits_output
    if batch.has_grammar and grammar_barrier is not None:
        grammar_barrier()  # after the forward launch, so this host work overlaps it (as upstream's verify)
    return_logprob = forward_batch.return_logprob
    forward_batch.return_logprob = False  # spec-v2 logprobs are computed below, in the spec layout
    predict = model_runner.sample(logits_output, forward_batch)

    # back to the spec-v2 view of the batch: later draft work reads these
    batch.seq_lens, batch.seq_lens_cpu, batch.seq_lens_sum = committed, committed_cpu, committed_sum
    batch.out_cache_loc = slots
    batch.forward_mode = ForwardMode.DECODE

    accept_lens = torch.ones(bs, dtype=torch.int32, device=committed.device)
    if return_logprob:
        from sglang.srt.layers.logprob_processor import compute_spec_v2_logprobs

        accept_index = torch.arange(bs, dtype=torch.int32, device=committed.device)[:, None]
        compute_spec_v2_logprobs(batch, logits_output, predict, accept_index, 0)

    return GenerationBatchResult(
        logits_output=logits_output,
        next_token_ids=predict,
        can_run_cuda_graph=out.can_run_graph,
        speculative_num_draft_tokens=1,  # one token per request in next_token_ids
        next_draft_input=EagleDraftInput(bonus_tokens=predict.to(torch.int32)),
        accept_lens=accept_lens,
        new_seq_lens=new_seq_lens,
        extra_keep_alive_refs=[forward_batch],
    )
