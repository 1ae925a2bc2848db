"""Plain-torch versions of the sampling kernels SGLang 0.5.17's sampled EAGLE verify calls (CPU).

On the GPU, `eagle_sample` (srt/speculative/eagle_utils.py) verifies a batch that is not all
greedy by target-only speculative sampling over the draft tree: sgl_kernel's
`tree_speculative_sampling_target_only` (csrc/speculative/speculative_sampling.cuh), after
softmax(logits / T) and `top_k_renorm_prob` / `top_p_renorm_prob` on the target's probabilities.
These are those three, for CPU tensors, written from the kernels' documented semantics:

- tree verify: one coin per tree node. At the last accepted node (the root first) the children
  are visited in sibling order while their target probabilities add up; the first child whose
  running sum reaches the node's coin (`coin <= sum / threshold_acc`), or whose own probability
  is `>= threshold_single`, is accepted and the walk moves to it. With both thresholds 1 this is
  inverse-CDF sampling from the target at that node, the drafts first: a child is accepted with
  exactly its target probability, whatever the draft proposed. When every child is rejected the
  token comes from the target's distribution there with the rejected children removed
  (renormalised; the final coin); after a full-depth accept, or at a leaf, from the whole
  distribution. So every emitted token is distributed as the target's sample at its position.
- top-k / top-p renormalisation with the same cut as SGLang's torch sampler (the plain engine's
  sampler on CPU, `top_k_top_p_min_p_sampling_from_probs_torch`): keep the k most likely tokens
  (ties broken by the sort), resp. the most likely tokens until the mass before one exceeds p.

They are reference loops over the batch for tiny CPU batches (tests, demos, CI), never production.
"""

from __future__ import annotations

import torch

__all__ = ["tree_speculative_sampling_target_only", "top_k_renorm_probs", "top_p_renorm_probs"]


def tree_speculative_sampling_target_only(
    predicts,
    accept_index,
    accept_token_num,
    candidates,
    retrive_index,
    retrive_next_token,
    retrive_next_sibling,
    uniform_samples,
    uniform_samples_for_final_sampling,
    target_probs,
    draft_probs,
    threshold_single,
    threshold_acc,
    deterministic,
):
    """sgl_kernel's op, same arguments and outputs. `draft_probs` is unused: the draft is treated as
    deterministic (target-only), and the kernel's rejected-token bookkeeping there is kept locally."""
    bs, ndraft = candidates.shape
    if bs == 0:
        return
    nsteps = accept_index.shape[1]
    threshold_acc = max(float(threshold_acc), 1e-9)  # as the kernel's launcher caps it
    probs = target_probs.reshape(bs, ndraft, -1)
    # p[b][row][i]: target probability, at tree node `row`, of node i's token (only children are read)
    p = torch.gather(probs, 2, candidates.long().view(bs, 1, ndraft).expand(bs, ndraft, ndraft)).tolist()
    cand = candidates.tolist()
    ri = retrive_index.reshape(bs, ndraft).tolist()
    nxt = retrive_next_token.reshape(bs, ndraft).tolist()
    sib = retrive_next_sibling.reshape(bs, ndraft).tolist()
    coins = uniform_samples.reshape(bs, ndraft).tolist()
    pred, acc = predicts.view(-1), accept_index.view(bs, nsteps)
    rows = [0] * bs  # the node whose distribution gives the bonus token
    last_of = [0] * bs
    rejected: list[list[int]] = [[] for _ in range(bs)]  # children rejected at rows[b] (all of them)
    for b in range(bs):
        row, last, n_ok = 0, ri[b][0], 0
        acc[b, 0] = last
        for _ in range(1, nsteps):
            cur, mass, coin, tried = nxt[b][row], 0.0, coins[b][row], []
            while cur != -1:
                mass += p[b][row][cur]
                # accept with the target's probability: the coin falls in this child's CDF slice
                # (never a zero-probability token, which a coin of exactly 0 would otherwise accept)
                if p[b][row][cur] > 0 and (
                    coin <= mass / threshold_acc or p[b][row][cur] >= threshold_single
                ):
                    pred[last] = cand[b][cur]
                    n_ok += 1
                    last = ri[b][cur]
                    acc[b, n_ok] = last
                    row = cur
                    break
                tried.append(cand[b][cur])
                cur = sib[b][cur]
            if cur == -1:  # every child rejected (or a leaf): the bonus token is drawn at `row`
                rejected[b] = tried
                break
        accept_token_num[b] = n_ok
        rows[b], last_of[b] = row, last
    # bonus token: the target at the last accepted node, the children rejected there removed
    q = probs[torch.arange(bs), torch.tensor(rows)].to(torch.float64)
    for b, toks in enumerate(rejected):
        if toks:
            q[b, toks] = 0.0
    lost = q.sum(-1) <= 0  # every token with mass was a rejected draft: only by rounding; no removal then
    if lost.any():
        q[lost] = probs[torch.arange(bs)[lost], torch.tensor(rows)[lost]].to(torch.float64)
    drawn = _inverse_cdf(q, uniform_samples_for_final_sampling.to(torch.float64))
    pred[torch.tensor(last_of, dtype=torch.long)] = drawn.to(pred.dtype)


def _inverse_cdf(weights: torch.Tensor, coins: torch.Tensor) -> torch.Tensor:
    """Per row, the first index whose cumulative weight exceeds coin * total (a token with mass)."""
    cdf = weights.cumsum(-1)
    idx = torch.searchsorted(cdf, (coins * cdf[:, -1]).unsqueeze(1), right=True).squeeze(1)
    last_with_mass = (weights > 0).long().cumsum(-1).argmax(-1)  # a coin rounding past the end
    return torch.minimum(idx, last_with_mass)


def _renorm(probs: torch.Tensor, keep_sorted: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    keep = torch.zeros_like(keep_sorted).scatter_(-1, order, keep_sorted)
    kept = torch.where(keep, probs, torch.zeros_like(probs))
    return kept / kept.sum(-1, keepdim=True)


def top_k_renorm_probs(probs: torch.Tensor, top_k) -> torch.Tensor:
    """sgl_kernel's `top_k_renorm_prob`: zero all but the `top_k` most likely tokens per row, renormalise."""
    probs = probs.float()
    k = torch.as_tensor(top_k, device=probs.device).reshape(-1, 1)
    _, order = probs.sort(dim=-1, descending=True)
    ranks = torch.arange(probs.shape[-1], device=probs.device).view(1, -1)
    return _renorm(probs, (ranks < k).expand_as(probs).contiguous(), order)


def top_p_renorm_probs(probs: torch.Tensor, top_p) -> torch.Tensor:
    """sgl_kernel's `top_p_renorm_prob`: keep the most likely tokens until the mass before one exceeds
    `top_p` per row, zero the rest, renormalise."""
    probs = probs.float()
    top_p = torch.as_tensor(top_p, dtype=probs.dtype, device=probs.device).reshape(-1, 1)
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    before = sorted_probs.cumsum(-1) - sorted_probs
    return _renorm(probs, before <= top_p, order)
