"""Keeping the EAGLE-3 draft in step with the target while speculation is OFF, and resyncing it.

Invariant (SGLang's draft-extend convention): the draft's K/V at position p is computed
from the target's aux hidden states at p and the token at p+1. An OFF step decodes
position p = L (the bonus token) and samples the token at L+1, so it has exactly the
inputs for the draft row at L.

- `write_draft_kv` (warm_kv): fc + norms + k/v projections + rotary for that one row,
  written to the draft KV pool at the target's slot; no attention, MLP or lm_head.
  `write_kv_rows` is that math for any rows (the OFF prefill writes a whole prompt with it).
- `draft_extend_one` (full_extend, and the resync): SGLang's own one-token draft extend,
  which also refreshes `topk_p` / `topk_index` / `hidden_states` for the next ON draft.
- `stub_draft_state`: shape-valid zeros for the fields the next OFF step does not read
  (the overlap FutureMap stashes them).
- `warm_kv_unsupported`: why `write_draft_kv` cannot serve this draft (checked once at start).
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F

__all__ = ["draft_extend_one", "stub_draft_state", "warm_kv_unsupported", "write_draft_kv", "write_kv_rows"]


@contextlib.contextmanager
def _draft_context(worker):
    from sglang.srt.layers.moe.utils import (
        speculative_moe_a2a_backend_context,
        speculative_moe_backend_context,
    )

    dw = worker.draft_worker
    with (
        dw.draft_tp_context(dw.draft_runner.tp_group),
        speculative_moe_backend_context(),
        speculative_moe_a2a_backend_context(),
    ):
        yield


def warm_kv_unsupported(worker) -> str | None:
    """None if `write_draft_kv` handles this draft's layout, else the reason (one line).

    warm_kv reproduces sglang 0.5.17 llama_eagle3's layer-0 K/V math (fc over the aux states,
    [embeds | hidden] into qkv_proj, rotary on plain positions) and writes it by token slot
    into an MHA pool; anything else needs the draft's own forward (full_extend).
    """
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool
    from sglang.srt.models.llama_eagle3 import LlamaForCausalLMEagle3, LlamaModel

    runner = worker.draft_worker.draft_runner
    model = runner.model
    if type(model) is not LlamaForCausalLMEagle3 or type(getattr(model, "model", None)) is not LlamaModel:
        return f"draft architecture {type(model).__name__} (warm_kv writes LlamaForCausalLMEagle3's K/V only)"
    layers = len(model.model.layers)
    if layers != 1:
        return (
            f"draft has {layers} decoder layers (warm_kv writes layer 0 only; deeper layers need attention)"
        )
    if model.model.is_mrope_enabled:
        return "draft uses mrope positions (warm_kv applies plain rotary positions)"
    if getattr(model, "_draft_window_size", None) is not None:
        return "draft uses a sliding attention window (warm_kv writes full-attention KV slots only)"
    pool = runner.token_to_kv_pool
    if not isinstance(pool, MHATokenToKVPool):
        return f"draft KV pool {type(pool).__name__} (warm_kv writes an MHATokenToKVPool)"
    return None


def stub_draft_state(worker, batch, result) -> None:
    """Upstream's zero stubs (sglang 0.5.17 EAGLEWorkerV2._stub_skipped_draft_extend)."""
    worker._stub_skipped_draft_extend(batch, result)


def write_draft_kv(worker, batch, result) -> None:
    """Write the draft layer's K/V for position L of every request (warm_kv)."""
    write_kv_rows(
        worker,
        aux=result.logits_output.hidden_states,  # [bs, num_aux * H_target]
        next_tokens=result.next_token_ids,  # token at L+1
        positions=batch.seq_lens,  # L
        slots=batch.out_cache_loc,
    )


@torch.no_grad()
def write_kv_rows(worker, aux, next_tokens, positions, slots) -> None:
    """The draft layer's K/V for one row per entry: position p from the target's aux hidden states at p
    and the token at p+1, written to the draft KV pool at `slots` (llama_eagle3's layer-0 math, without
    its attention, MLP or lm_head)."""
    model = worker.draft_worker.draft_runner.model.model  # sglang llama_eagle3.LlamaModel
    layer = model.layers[0]
    attn_mod, attn = layer.self_attn, layer.self_attn.attn
    tokens, positions = next_tokens.to(torch.int64), positions.to(torch.int64)
    with _draft_context(worker):
        h = aux if model.input_norm is None else model.input_norm(aux)
        if model.fc_norm is not None:
            chunks = h.chunk(model.num_aux_hidden_states, dim=-1)
            h = torch.cat([norm(c) for norm, c in zip(model.fc_norm, chunks, strict=True)], dim=-1)
        h = model.fc(h)
        x = torch.cat([layer.input_layernorm(model.embed_tokens(tokens)), layer.hidden_norm(h)], dim=-1)
        k, v = _kv_projection(attn_mod, x)
        # rotary kernels may work in place: give q its own (k-shaped) buffer and drop it
        _, k = attn_mod.rotary_emb(positions, k.clone(), k)
        pool = worker.draft_worker.draft_runner.token_to_kv_pool
        pool.set_kv_buffer(
            attn,
            slots,
            k.reshape(-1, attn.tp_k_head_num, attn.qk_head_dim),
            v.reshape(-1, attn.tp_v_head_num, attn.v_head_dim),
            attn.k_scale,
            attn.v_scale,
        )


def _kv_projection(attn_mod, x: torch.Tensor):
    """k, v of the fused qkv projection, skipping the q rows when the weight is a plain tensor."""
    proj = attn_mod.qkv_proj
    weight = getattr(proj, "weight", None)
    if (
        weight is not None
        and weight.dtype in (torch.float32, torch.bfloat16, torch.float16)
        and getattr(proj, "bias", None) is None
    ):
        kv = F.linear(x, weight[attn_mod.q_size :])  # TP-local rows: [q | k | v] per rank
        return kv.split([attn_mod.kv_size, attn_mod.kv_size], dim=-1)
    qkv, _ = proj(x)
    _, k, v = qkv.split([attn_mod.q_size, attn_mod.kv_size, attn_mod.kv_size], dim=-1)
    return k, v


def draft_extend_one(worker, batch, result) -> None:
    """SGLang's draft extend for the one decoded token per request, eager.

    Reuses sglang 0.5.17 `EagleDraftWorker._draft_extend_for_decode` with the draft-token
    width set to 1 for the call (the OFF step's result has one token per request); its
    CUDA graph is captured for the ON width, so the call runs eager.
    """
    dw = worker.draft_worker
    saved = dw.speculative_num_draft_tokens, dw.cuda_graph_runner_for_draft_extend
    dw.speculative_num_draft_tokens, dw.cuda_graph_runner_for_draft_extend = 1, None
    try:
        with _draft_context(worker):
            dw._draft_extend_for_decode(batch, result)
    finally:
        dw.speculative_num_draft_tokens, dw.cuda_graph_runner_for_draft_extend = saved
