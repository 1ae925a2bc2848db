"""Plain-torch `sgl_kernel::decode_attention_cpu` / `extend_attention_cpu` for SGLang 0.5.17 on CPU.

Reference loops over requests in fp32 math (see ops.py for what the CPU ops are for): tiny
batches in CI and demos, never production.
"""

from __future__ import annotations

import torch

__all__ = ["decode_attention", "extend_attention"]


def _attend(q, k, v, allowed, sm_scale, logit_cap):
    """q [Lq,H,D], k/v [Lk,Hkv,D], allowed [Lq,Lk] -> [Lq,H,Dv], fp32 math."""
    if k.shape[1] != q.shape[1]:  # grouped-query attention: repeat kv heads
        rep = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    s = torch.einsum("qhd,khd->hqk", q.float(), k.float()) * sm_scale
    if logit_cap and logit_cap > 0:
        s = logit_cap * torch.tanh(s / logit_cap)
    s = s.masked_fill(~allowed.unsqueeze(0), float("-inf"))
    p = torch.nan_to_num(torch.softmax(s, dim=-1), nan=0.0)
    return torch.einsum("hqk,khd->qhd", p, v.float())


def _unsupported(is_cross_attention, sliding_window, sinks):
    if is_cross_attention or (sliding_window and sliding_window > 0) or sinks is not None:
        raise NotImplementedError(
            "specflip CPU ops: cross-attention, sliding window and sinks are not supported"
        )


def decode_attention(
    query,
    k_cache,
    v_cache,
    output,
    key,
    value,
    loc,
    attn_logits,
    req_to_token,
    req_pool_indices,
    seq_lens,
    sm_scale,
    logit_cap,
    is_cross_attention,
    sliding_window,
    encoder_lens,
    sinks,
):
    _unsupported(is_cross_attention, sliding_window, sinks)
    if query.shape[0] != seq_lens.numel():
        raise RuntimeError(
            f"specflip CPU ops: decode_attention got {query.shape[0]} query rows but {seq_lens.numel()} "
            "seq_lens (the 0.5.17 intel_amx seq_lens fix in patched_worker.cpu.shim is not active)"
        )
    if key is not None and value is not None and loc is not None:
        k_cache[loc.long()] = key.view(-1, *k_cache.shape[1:]).to(k_cache.dtype)
        v_cache[loc.long()] = value.view(-1, *v_cache.shape[1:]).to(v_cache.dtype)
    for b, (r, sl) in enumerate(zip(req_pool_indices.tolist(), seq_lens.tolist(), strict=True)):
        idx = req_to_token[r, :sl].long()
        allowed = torch.ones((1, sl), dtype=torch.bool)
        output[b : b + 1] = (
            _attend(query[b : b + 1], k_cache[idx], v_cache[idx], allowed, sm_scale, logit_cap)
            .reshape(output[b : b + 1].shape)
            .to(output.dtype)
        )


def extend_attention(
    q_extend,
    k_extend,
    v_extend,
    o_extend,
    k_buffer,
    v_buffer,
    req_to_token,
    req_pool_indices,
    seq_lens,
    extend_seq_lens,
    extend_start_loc,
    max_len_extend,
    sm_scale,
    logit_cap,
    is_cross_attention,
    sliding_window,
    encoder_lens,
    sinks,
    tree_mask,
):
    _unsupported(is_cross_attention, sliding_window, sinks)
    rpi, sls = req_pool_indices.tolist(), seq_lens.tolist()
    els, starts = extend_seq_lens.tolist(), extend_start_loc.tolist()
    bs = len(rpi)
    tm = None
    if tree_mask is not None and tree_mask.numel() > 0:
        n = round((tree_mask.numel() / bs) ** 0.5)
        tm = tree_mask.view(bs, n, n)
    for b in range(bs):
        sl, ext, st = int(sls[b]), int(els[b]), int(starts[b])
        pre = sl - ext  # the kernel derives the cached prefix length this way
        idx = req_to_token[rpi[b], :pre].long()
        if k_extend is not None:
            ke, ve = k_extend[st : st + ext], v_extend[st : st + ext]
        else:
            idx2 = req_to_token[rpi[b], pre:sl].long()
            ke, ve = k_buffer[idx2], v_buffer[idx2]
        kk = torch.cat([k_buffer[idx].float(), ke.float()])
        vv = torch.cat([v_buffer[idx].float(), ve.float()])
        allowed = torch.ones((ext, sl), dtype=torch.bool)
        allowed[:, pre:] = (
            tm[b, :ext, :ext] if tm is not None else torch.ones((ext, ext), dtype=torch.bool).tril()
        )
        o_extend[st : st + ext] = (
            _attend(q_extend[st : st + ext], kk, vv, allowed, sm_scale, logit_cap)
            .reshape(o_extend[st : st + ext].shape)
            .to(o_extend.dtype)
        )
