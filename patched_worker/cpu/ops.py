"""Plain-torch versions of the `sgl_kernel::*_cpu` ops SGLang 0.5.17 calls on CPU.

SGLang's CPU engine path (SGLANG_USE_CPU_ENGINE=1) calls these ops from the
sgl-kernel CPU build, which is not in the PyPI wheel. Semantics follow the
sgl-kernel 0.4.5 CPU kernels (csrc/cpu/kvcache.cpp, csrc/cpu/spec.cpp) with the
0.5.17 call signatures (no key/value scales, no is_causal flag); the two attention ops
are in `attention.py`; the sampled tree verify (the CUDA op of that name, which the shim
lets SGLang's CPU verify call) is in `sampling.py`. They are slow
reference loops meant for tiny batches: CI and demos, never production.

Deliberately not defined: `convert_weight_packed` (its presence switches SGLang
to the fused Intel-AMX kernel path, which these ops do not cover).
"""

from __future__ import annotations

import ctypes
import os

import torch

from patched_worker.cpu.attention import decode_attention, extend_attention
from patched_worker.cpu.sampling import tree_speculative_sampling_target_only

__all__ = ["register", "OP_SCHEMAS", "FAULTS", "FAULT_ENV"]


def copy_all_layer_kv_cache(data_ptrs, strides, tgt_loc, src_loc):
    ptrs = data_ptrs.view(torch.int64).tolist()
    tgt, src = tgt_loc.tolist(), src_loc.tolist()
    for base, stride in zip(ptrs, strides.tolist(), strict=True):
        # gather first, then scatter: source and target ranges may overlap
        staged = [ctypes.string_at(base + s * stride, stride) for s in src]
        for t, buf in zip(tgt, staged, strict=True):
            ctypes.memmove(base + t * stride, buf, stride)


def verify_tree_greedy(
    predicts,
    accept_index,
    accept_token_num,
    candidates,
    retrive_index,
    retrive_next_token,
    retrive_next_sibling,
    target_predict,
):
    bs, ndraft = candidates.shape
    nsteps = accept_index.shape[1]
    cand = candidates.reshape(-1).tolist()
    ri = retrive_index.reshape(-1).tolist()
    nxt = retrive_next_token.reshape(-1).tolist()
    sib = retrive_next_sibling.reshape(-1).tolist()
    tp = target_predict.reshape(-1).tolist()
    pred, acc = predicts.view(-1), accept_index.view(-1)
    for b in range(bs):
        off = b * ndraft
        last = ri[off]
        acc[b * nsteps] = last
        n_ok, cur = 0, 0
        for _ in range(1, nsteps):
            cur = nxt[off + cur]
            # walk the siblings at this depth; accept the child the target agrees with
            while cur != -1:
                if cand[off + cur] == tp[last]:
                    pred[last] = tp[last]
                    n_ok += 1
                    acc[b * nsteps + n_ok] = ri[off + cur]
                    last = ri[off + cur]
                    break
                cur = sib[off + cur]
            if cur == -1:
                break
        accept_token_num[b] = n_ok
        pred[last] = tp[last]  # bonus token: the target's prediction after the last accepted node


def build_tree_kernel_efficient(
    parent_list,
    selected_index,
    verified_seq_len,
    tree_mask,
    positions,
    retrive_index,
    retrive_next_token,
    retrive_next_sibling,
    topk,
    depth,
    draft_token_num,
    tree_mask_mode,
):
    if tree_mask_mode == 2:
        raise RuntimeError("specflip CPU ops: QLEN_ONLY_BITPACKING tree masks are not supported on CPU")
    bs, n = parent_list.shape[0], draft_token_num
    parent = parent_list.reshape(bs, -1).tolist()
    sel = selected_index.reshape(bs, -1).tolist()
    seq_lens = verified_seq_len.tolist()
    ri, pos, mask = retrive_index.view(-1), positions.view(-1), tree_mask.view(-1)
    nxt = retrive_next_token.reshape(-1).tolist()
    sib = retrive_next_sibling.reshape(-1).tolist()

    def parent_node(b: int, i: int) -> int | None:
        """Index (0-based among drafts) of the parent of draft node i, None = root."""
        ptb = sel[b][i] // topk
        if ptb <= 0:
            return None
        tok = parent[b][ptb]
        return next((c for c in range(n - 1) if sel[b][c] == tok), -1)

    mask_base = 0
    for b in range(bs):
        off, seq_len = b * n, int(seq_lens[b])
        pos[off] = seq_len
        ri[off] = off
        for i in range(n - 1, 0, -1):
            ri[off + i] = off + i
            p = parent_node(b, i - 1)
            slot = 0 if p is None else p + 1
            if p == -1:
                continue
            if nxt[off + slot] == -1:
                nxt[off + slot] = i
            else:
                sib[off + i] = nxt[off + slot]
                nxt[off + slot] = i
        if tree_mask_mode == 1:  # QLEN_ONLY: [bs, n, n]
            row0, row_len, col0 = off * n, n, 0
        else:  # FULL_MASK: per request (seq_len + n) columns, prefix included
            row0, row_len, col0 = mask_base, seq_len + n, seq_len
            mask_base += n * (seq_len + n)
        for tid in range(n):
            rs = row0 + tid * row_len + col0
            mask[rs] = True
            mask[rs + 1 : rs + n] = False
            if tid == 0:
                continue
            d = 0
            cur: int | None = tid - 1  # None once past the root (parent_node)
            while cur is not None and cur >= 0:  # mark every ancestor up to the root
                d += 1
                mask[rs + cur + 1] = True
                cur = parent_node(b, cur)
            pos[off + tid] = d + seq_len
    retrive_next_token.view(-1).copy_(torch.tensor(nxt, dtype=retrive_next_token.dtype))
    retrive_next_sibling.view(-1).copy_(torch.tensor(sib, dtype=retrive_next_sibling.dtype))


def assign_req_to_token_pool(
    req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, pool_len
):
    o = 0
    for r, s, e in zip(req_pool_indices.tolist(), start_offset.tolist(), end_offset.tolist(), strict=True):
        req_to_token[r, s:e] = out_cache_loc[o : o + (e - s)].to(req_to_token.dtype)
        o += e - s


def build_draft_decode_metadata(req_to_token, req_pool_indices, seq_lens, topk, num_steps, pool_len):
    rpi, sls = req_pool_indices.tolist(), seq_lens.tolist()
    out = torch.empty((len(rpi) * topk, pool_len), dtype=req_to_token.dtype)
    for b, (r, sl) in enumerate(zip(rpi, sls, strict=True)):
        for k in range(topk):
            row = out[b * topk + k]
            row[:sl] = req_to_token[r, :sl]
            ds = sl + k * num_steps  # branch k's draft slots follow the committed prefix
            row[sl : sl + num_steps] = req_to_token[r, ds : ds + num_steps]
    return out


def fill_bonus_tokens(accept_tokens, accept_lens, bonus_tokens, accept_stride):
    flat = accept_tokens.reshape(-1)
    for b, n in enumerate(accept_lens.tolist()):
        bonus_tokens[b] = flat[accept_stride * b + n - 1]


def fill_accept_out_cache_loc(accept_index, out_cache_loc, accept_out_cache_loc):
    ai = accept_index.reshape(-1)
    keep = ai[ai > -1].long()
    accept_out_cache_loc[: keep.numel()] = out_cache_loc[keep]


def assign_draft_cache_locs_contiguous(
    req_pool_indices, req_to_token, seq_lens, out_cache_loc, pool_len, topk, num_steps
):
    width = topk * num_steps
    for b, (r, sl) in enumerate(zip(req_pool_indices.tolist(), seq_lens.tolist(), strict=True)):
        out_cache_loc[b * width : (b + 1) * width] = req_to_token[r, sl : sl + width].long()


def assign_extend_cache_locs(
    req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, pool_len
):
    o = 0
    for r, s, e in zip(req_pool_indices.tolist(), start_offset.tolist(), end_offset.tolist(), strict=True):
        out_cache_loc[o : o + e - s] = req_to_token[r, s:e].long()
        o += e - s


def rotate_input_ids(input_ids, extend_start_loc, extend_seq_lens, topk_index, select_index=None):
    new = topk_index.tolist()
    sel = select_index.tolist() if select_index is not None else None
    for b, (s, n) in enumerate(zip(extend_start_loc.tolist(), extend_seq_lens.tolist(), strict=True)):
        if n > 1:
            input_ids[s : s + n - 1] = input_ids[s + 1 : s + n].clone()
        if n > 0:
            input_ids[sel[b] if sel is not None else s + n - 1] = new[b]


OP_SCHEMAS = {
    "copy_all_layer_kv_cache_cpu": (
        "(Tensor data_ptrs, Tensor strides, Tensor tgt_loc, Tensor src_loc) -> ()",
        copy_all_layer_kv_cache,
    ),
    "verify_tree_greedy_cpu": (
        "(Tensor(a!) predicts, Tensor(b!) accept_index, Tensor(c!) accept_token_num, Tensor candidates, "
        "Tensor retrive_index, Tensor retrive_next_token, Tensor retrive_next_sibling, Tensor target_predict) -> ()",
        verify_tree_greedy,
    ),
    "build_tree_kernel_efficient_cpu": (
        "(Tensor parent_list, Tensor selected_index, Tensor verified_seq_len, Tensor(a!) tree_mask, "
        "Tensor(b!) positions, Tensor(c!) retrive_index, Tensor(d!) retrive_next_token, "
        "Tensor(e!) retrive_next_sibling, int topk, int depth, int draft_token_num, int tree_mask_mode) -> ()",
        build_tree_kernel_efficient,
    ),
    "assign_req_to_token_pool_cpu": (
        "(Tensor req_pool_indices, Tensor(a!) req_to_token, Tensor start_offset, Tensor end_offset, "
        "Tensor out_cache_loc, int pool_len) -> ()",
        assign_req_to_token_pool,
    ),
    "build_draft_decode_metadata_cpu": (
        "(Tensor req_to_token, Tensor req_pool_indices, Tensor seq_lens, int topk, int num_steps, "
        "int pool_len) -> Tensor",
        build_draft_decode_metadata,
    ),
    "fill_bonus_tokens_cpu": (
        "(Tensor accept_tokens, Tensor accept_lens, Tensor(a!) bonus_tokens, int accept_stride) -> ()",
        fill_bonus_tokens,
    ),
    "fill_accept_out_cache_loc_cpu": (
        "(Tensor accept_index, Tensor out_cache_loc, Tensor(a!) accept_out_cache_loc) -> ()",
        fill_accept_out_cache_loc,
    ),
    "assign_draft_cache_locs_contiguous_cpu": (
        "(Tensor req_pool_indices, Tensor req_to_token, Tensor seq_lens, Tensor(a!) out_cache_loc, "
        "int pool_len, int topk, int num_steps) -> ()",
        assign_draft_cache_locs_contiguous,
    ),
    "assign_extend_cache_locs_cpu": (
        "(Tensor req_pool_indices, Tensor req_to_token, Tensor start_offset, Tensor end_offset, "
        "Tensor(a!) out_cache_loc, int pool_len) -> ()",
        assign_extend_cache_locs,
    ),
    "rotate_input_ids_cpu": (
        "(Tensor(a!) input_ids, Tensor extend_start_loc, Tensor extend_seq_lens, Tensor topk_index, "
        "Tensor? select_index=None) -> ()",
        rotate_input_ids,
    ),
    "tree_speculative_sampling_target_only": (
        "(Tensor(a!) predicts, Tensor(b!) accept_index, Tensor(c!) accept_token_num, Tensor candidates, "
        "Tensor retrive_index, Tensor retrive_next_token, Tensor retrive_next_sibling, Tensor uniform_samples, "
        "Tensor uniform_samples_for_final_sampling, Tensor target_probs, Tensor draft_probs, "
        "float threshold_single, float threshold_acc, bool deterministic) -> ()",
        tree_speculative_sampling_target_only,
    ),
    "decode_attention_cpu": (
        "(Tensor query, Tensor(a!) k_cache, Tensor(b!) v_cache, Tensor(c!) output, Tensor? key, "
        "Tensor? value, Tensor? loc, Tensor attn_logits, Tensor req_to_token, Tensor req_pool_indices, "
        "Tensor seq_lens, float sm_scale, float logit_cap, bool is_cross_attention, int sliding_window, "
        "Tensor? encoder_lens, Tensor? sinks) -> ()",
        decode_attention,
    ),
    "extend_attention_cpu": (
        "(Tensor q_extend, Tensor? k_extend, Tensor? v_extend, Tensor(a!) o_extend, Tensor k_buffer, "
        "Tensor v_buffer, Tensor req_to_token, Tensor req_pool_indices, Tensor seq_lens, "
        "Tensor extend_seq_lens, Tensor extend_start_loc, int? max_len_extend, float sm_scale, "
        "float logit_cap, bool is_cross_attention, int sliding_window, Tensor? encoder_lens, "
        "Tensor? sinks, Tensor? tree_mask) -> ()",
        extend_attention,
    ),
}


def _fault_accept_all_drafts(
    predicts,
    accept_index,
    accept_token_num,
    candidates,
    retrive_index,
    retrive_next_token,
    retrive_next_sibling,
    target_predict,
):
    """FAILURE INJECTION (tests only): a broken verify that accepts the first draft at every depth."""
    verify_tree_greedy(
        predicts,
        accept_index,
        accept_token_num,
        candidates,
        retrive_index,
        retrive_next_token,
        retrive_next_sibling,
        candidates.roll(-1, dims=1),
    )


FAULTS = {"accept_all_drafts": ("verify_tree_greedy_cpu", _fault_accept_all_drafts)}
FAULT_ENV = "SPECFLIP_CPU_FAULT"  # set only by tests that prove the equivalence check can fail
_lib: torch.library.Library | None = None


def register() -> None:
    """Define the ops in the `sgl_kernel` namespace (idempotent, once per process)."""
    global _lib
    if _lib is not None:
        return
    impls = {name: fn for name, (_, fn) in OP_SCHEMAS.items()}
    fault = os.environ.get(FAULT_ENV)
    if fault:
        if fault not in FAULTS:
            raise RuntimeError(f"{FAULT_ENV}={fault!r}: unknown fault, known: {', '.join(FAULTS)}")
        op, fn = FAULTS[fault]
        impls[op] = fn
    lib = torch.library.Library("sgl_kernel", "DEF")
    for name, (schema, _) in OP_SCHEMAS.items():
        lib.define(name + schema)
        lib.impl(name, impls[name], "CPU")
    _lib = lib
