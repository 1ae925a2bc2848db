"""The OFF prefill: while speculation is OFF (warm_kv), a prefill runs the target's extend and writes the
prompt's draft K/V from its aux hidden states instead of running the draft forward.

Shown on the real engine (CPU, fp32): outputs token-identical to the plain engine's; requests prefilled
that way accept drafts after re-enable as well as requests given upstream's draft prefill (the draft
K/V it writes are the ones the draft forward writes); and the row layout it builds matches upstream's
per-request loop, chunked prompts included.
"""

from __future__ import annotations

import pytest
import torch

from patched_worker.state import OffPrefill, Strategy
from tests.patched_worker.helpers import first_mismatch, prefill_off_then_reenable

CONFIG = (1, 3, 4)  # topk, steps, draft tokens


def _upstream_rows(input_ids, prefix_lens, extend_lens, tail_tokens):
    """eagle_worker_v2.py:745-755 (the shifted ids), with the positions ForwardBatch gives each token."""
    next_tokens, positions, pt = torch.empty_like(input_ids), [], 0
    for i, (pre, n) in enumerate(zip(prefix_lens, extend_lens, strict=True)):
        ids = input_ids[pt : pt + n]
        next_tokens[pt : pt + n].copy_(torch.cat((ids[1:], tail_tokens[i].reshape(1))))
        positions += list(range(pre, pre + n))
        pt += n
    return torch.tensor(positions, dtype=torch.int64), next_tokens


@pytest.mark.parametrize(
    ("prefix_lens", "extend_lens"),
    [([0], [5]), ([0, 0, 0], [3, 1, 7]), ([4, 0, 11], [2, 6, 1]), ([0, 9], [1, 1])],
)
def test_the_rows_are_upstreams_per_request_loop_vectorized(prefix_lens, extend_lens):
    from patched_worker.off_prefill import shifted_rows

    gen = torch.Generator().manual_seed(sum(extend_lens))
    input_ids = torch.randint(10, 1000, (sum(extend_lens),), generator=gen)
    # a chunk's tail is the next prompt token, the last chunk's the sampled one: any per-request value
    tails = torch.randint(10, 1000, (len(extend_lens),), generator=gen)
    got_pos, got_next = shifted_rows(input_ids, prefix_lens, extend_lens, tails)
    want_pos, want_next = _upstream_rows(input_ids, prefix_lens, extend_lens, tails)
    assert torch.equal(got_pos, want_pos) and torch.equal(got_next, want_next)


@pytest.mark.engine
def test_prompts_prefilled_off_accept_after_reenable_as_with_the_draft_forward(engines, prompts, reference):
    engine = engines.spec(*CONFIG)
    got_fwd, lean_fwd, accept_fwd = prefill_off_then_reenable(engine, prompts, OffPrefill.DRAFT_FORWARD)
    got_kv, lean_kv, accept_kv = prefill_off_then_reenable(engine, prompts, OffPrefill.KV_WRITE)
    got_cold, lean_cold, accept_cold = prefill_off_then_reenable(
        engine, prompts, OffPrefill.KV_WRITE, Strategy.COLD
    )
    for label, got in (("draft_forward", got_fwd), ("kv_write", got_kv), ("cold", got_cold)):
        assert first_mismatch(got, reference) is None, (label, first_mismatch(got, reference))
    assert lean_fwd == 0 and lean_kv >= 1 and lean_cold >= 1, (lean_fwd, lean_kv, lean_cold)
    # the draft proposes from the K/V the prefill wrote: the same K/V, the same acceptance
    assert accept_fwd > 1.5, f"the trained pair should accept drafts after re-enable ({accept_fwd:.2f})"
    assert abs(accept_kv - accept_fwd) <= 0.1, f"kv_write {accept_kv:.2f} vs draft forward {accept_fwd:.2f}"
    # the control: a prefill that leaves the draft K/V stale (cold) does cost acceptance
    assert accept_cold < accept_fwd - 0.3, f"cold {accept_cold:.2f} vs draft forward {accept_fwd:.2f}"


@pytest.mark.engine
def test_full_extend_keeps_the_draft_forward_at_prefill(engines, prompts, reference):
    engine = engines.spec(*CONFIG)
    got, lean, _ = prefill_off_then_reenable(engine, prompts, OffPrefill.KV_WRITE, Strategy.FULL_EXTEND)
    assert first_mismatch(got, reference) is None
    assert lean == 0
