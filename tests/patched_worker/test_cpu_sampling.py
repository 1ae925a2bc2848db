"""The CPU shim's sampled tree verify emits tokens with the target's law (plain torch, no engine).

`tree_speculative_sampling_target_only` on a small draft tree (siblings, a chain, leaves at
several depths), many copies in one batch with random coins: the emitted sequences (accepted
drafts, then the bonus token) must follow the target's sequential law exactly, which the test
enumerates. The empirical distribution of `n` draws is within TV 1/2 sqrt(K / n) +
sqrt(ln(1/d) / (2 n)) of it with probability >= 1 - d (K outcomes: E TV <= 1/2 sum_s
sqrt(p_s / n) <= 1/2 sqrt(K / n) by Jensen and Cauchy-Schwarz; one draw moves TV by <= 1/n, so
McDiarmid adds the second term). Then the threshold semantics on fixed coins, and the top-k /
top-p cuts against the plain engine's CPU sampler's rule.
"""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch

from patched_worker.cpu.sampling import (
    top_k_renorm_probs,
    top_p_renorm_probs,
    tree_speculative_sampling_target_only,
)

# node: (parent, draft token); node 0 is the root (the last verified token). Children of a node are
# visited in the order listed (retrive_next_token -> first child, retrive_next_sibling -> next).
TREE = [(-1, -1), (0, 0), (0, 1), (1, 2), (1, 0), (2, 3), (3, 1)]
DEPTH = 4  # accept_index width: up to 3 drafts + the bonus token
VOCAB = 5
PROBS = torch.tensor(  # target distribution at each node (some tokens impossible)
    [
        [0.30, 0.25, 0.20, 0.00, 0.25],
        [0.10, 0.00, 0.50, 0.15, 0.25],
        [0.05, 0.05, 0.10, 0.60, 0.20],
        [0.40, 0.30, 0.00, 0.30, 0.00],
        [0.20, 0.20, 0.20, 0.20, 0.20],
        [0.00, 0.00, 0.00, 1.00, 0.00],
        [0.50, 0.00, 0.50, 0.00, 0.00],
    ]
)


def _tree_tensors(bs: int):
    n = len(TREE)
    nxt, sib = [-1] * n, [-1] * n
    for i in range(n - 1, 0, -1):  # prepend: children end up in listed order
        parent = TREE[i][0]
        sib[i], nxt[parent] = nxt[parent], i
    cand = torch.tensor([max(t, 0) for _, t in TREE], dtype=torch.int64).repeat(bs, 1)
    ri = (torch.arange(bs).view(-1, 1) * n + torch.arange(n)).to(torch.int64)
    return (
        cand,
        ri,
        torch.tensor(nxt, dtype=torch.int64).repeat(bs, 1),
        torch.tensor(sib, dtype=torch.int64).repeat(bs, 1),
    )


def _verify(bs, coins, final_coins, probs=PROBS, threshold_single=1.0, threshold_acc=1.0):
    """Run the op like eagle_sample does; the emitted token sequences per request."""
    cand, ri, nxt, sib = _tree_tensors(bs)
    n = len(TREE)
    predicts = torch.zeros(bs * n, dtype=torch.int32)
    accept_index = torch.full((bs, DEPTH), -1, dtype=torch.int32)
    accept_num = torch.empty(bs, dtype=torch.int32)
    target = probs.repeat(bs, 1, 1)
    tree_speculative_sampling_target_only(
        predicts,
        accept_index,
        accept_num,
        cand,
        ri,
        nxt,
        sib,
        coins,
        final_coins,
        target,
        torch.zeros_like(target),
        threshold_single,
        threshold_acc,
        True,
    )
    return [tuple(predicts[accept_index[b, : int(accept_num[b]) + 1].long()].tolist()) for b in range(bs)]


def _target_law() -> dict[tuple[int, ...], float]:
    """Exact law of the emitted tokens: each token ~ the target at its node; a token equal to a
    child's draft moves there (up to DEPTH - 1 drafts), any other token is the bonus and ends."""
    law: dict[tuple[int, ...], float] = {}

    def walk(node, prefix, mass):
        children = {tok: i for i, (parent, tok) in enumerate(TREE) if parent == node}
        for tok in range(VOCAB):
            p = mass * float(PROBS[node, tok])
            if p == 0:
                continue
            if tok in children and len(prefix) + 1 < DEPTH:
                walk(children[tok], (*prefix, tok), p)
            else:
                law[(*prefix, tok)] = law.get((*prefix, tok), 0.0) + p

    walk(0, (), 1.0)
    return law


def test_emitted_tokens_follow_the_target_law():
    torch.manual_seed(0)
    n, delta = 40_000, 1e-6
    got = Counter(_verify(n, torch.rand(n, len(TREE)), torch.rand(n)))
    law = _target_law()
    assert set(got) <= set(law), f"impossible sequences emitted: {set(got) - set(law)}"
    tv = 0.5 * sum(abs(got[s] / n - p) for s, p in law.items())
    bound = 0.5 * math.sqrt(len(law) / n) + math.sqrt(math.log(1 / delta) / (2 * n))
    assert tv <= bound, f"TV to the target law {tv:.4f} > {bound:.4f}"
    # every path of the tree is exercised: full-depth accepts, rejections at each depth, leaves
    assert {len(s) for s in got} == {1, 2, 3, 4}


ROOT_ZERO_FIRST = torch.cat(
    [torch.tensor([[0.0, 0.5, 0.5, 0.0, 0.0]]), PROBS[1:]]
)  # node 1's token impossible


@pytest.mark.parametrize(
    ("root_coin", "final_coin", "thresholds", "probs", "want"),
    [
        # root: token 0 (p .30) reaches the coin .29; node 1: 2 (.50) and 0 (.60 in all) miss .999,
        # the bonus comes from node 1 without them: [0, 0, 0, .15, .25], coin 0 -> token 3
        (0.29, 0.0, (1.0, 1.0), PROBS, (0, 3)),
        # root: .30 and .55 miss .56: bonus from [0, 0, .20, 0, .25]; coin 0 -> 2, coin 1 -> 4
        (0.56, 0.0, (1.0, 1.0), PROBS, (2,)),
        (0.56, 1.0, (1.0, 1.0), PROBS, (4,)),
        # threshold_single .29: every draft with p >= .29 is accepted whatever the coin; full depth,
        # so the bonus is node 6's whole distribution [.5, 0, .5, 0, 0], coin 0 -> token 0
        (0.99, 0.0, (0.29, 1.0), PROBS, (0, 2, 1, 0)),
        # threshold_acc .5 doubles the accept mass: .30 / .5 >= .59, .50 / .5 >= .999, .30 / .5 < .999;
        # bonus from node 3 without token 1: [.4, 0, 0, .3, 0], coin .5 -> .35 -> token 0
        (0.59, 0.5, (1.0, 0.5), PROBS, (0, 2, 0)),
        # a coin of exactly 0 never accepts an impossible draft (token 0 at the root has p 0)
        (0.0, 0.0, (1.0, 1.0), ROOT_ZERO_FIRST, (1, 0)),
    ],
)
def test_threshold_and_coin_semantics(root_coin, final_coin, thresholds, probs, want):
    coins = torch.full((1, len(TREE)), 0.999)
    coins[0, 0] = root_coin
    single, acc = thresholds
    out = _verify(1, coins, torch.tensor([final_coin]), probs, threshold_single=single, threshold_acc=acc)
    assert out == [want]


def test_top_k_and_top_p_cut_like_the_cpu_sampler():
    probs = torch.tensor([[0.1, 0.4, 0.2, 0.3], [0.25, 0.25, 0.4, 0.1]])
    k = top_k_renorm_probs(probs, torch.tensor([2, 1]))
    assert torch.allclose(k, torch.tensor([[0, 4 / 7, 0, 3 / 7], [0, 0, 1.0, 0]]))
    assert torch.equal(top_k_renorm_probs(probs, 1 << 30), probs / probs.sum(-1, keepdim=True))
    # keep tokens while the mass before them is <= top_p (sampler: zero where cumsum - p > top_p)
    p = top_p_renorm_probs(probs, torch.tensor([0.5, 0.7]))
    assert torch.allclose(p, torch.tensor([[0, 4 / 7, 0, 3 / 7], [0.25 / 0.9, 0.25 / 0.9, 0.4 / 0.9, 0]]))
