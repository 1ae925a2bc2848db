"""The prefill's tail tokens (patched_worker.prefill_tail) are upstream's `_eagle_prefill_tail_tokens`'s,
value for value, with and without a request the chunk cut short: upstream's own function runs on the
same stand-in batch. On the real engine with prompts cut into chunks, ON and OFF prefills take them
(the only engine here that chunks); every other engine test's prefills run through it too."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
import torch

from patched_worker.cpu import shim

if not torch.cuda.is_available():
    shim.enable()

NEXT_PROMPT_TOKEN = 7  # never a prompt id below (10-999) nor a sampled one (1001-)


def _batch(n_reqs: int, chunked_at: int | None) -> SimpleNamespace:
    """A stand-in ScheduleBatch with the fields upstream's function reads: the request at `chunked_at`
    (None: none) was cut short by the chunk, its next prompt token still to come."""
    reqs = [SimpleNamespace(rid=i) for i in range(n_reqs)]
    return SimpleNamespace(
        reqs=reqs,
        chunked_req=None if chunked_at is None else reqs[chunked_at],
        chunked_req_next_prompt_token=None if chunked_at is None else NEXT_PROMPT_TOKEN,
        input_ids=torch.randint(10, 1000, (3 * n_reqs,), generator=torch.Generator().manual_seed(n_reqs)),
    )


@pytest.mark.parametrize(("n_reqs", "chunked_at"), [(1, 0), (3, 2), (3, 0), (4, 1), (2, None), (1, None)])
def test_the_tails_are_upstreams(n_reqs: int, chunked_at: int | None) -> None:
    from sglang.srt.speculative.eagle_utils import _eagle_prefill_tail_tokens

    from patched_worker.prefill_tail import chunk_tail, tail_tokens

    batch = _batch(n_reqs, chunked_at)
    sampled = torch.arange(1001, 1001 + n_reqs, dtype=torch.int32)  # int32 as sampled, int64 as input ids
    got, want = tail_tokens(batch, sampled), _eagle_prefill_tail_tokens(batch, sampled)
    assert got.dtype == want.dtype == batch.input_ids.dtype and torch.equal(got, want)
    assert chunk_tail(batch) == (None if chunked_at is None else (chunked_at, NEXT_PROMPT_TOKEN))
    assert sampled.tolist() == list(range(1001, 1001 + n_reqs))  # the sampled tokens left as they were
    if chunked_at is not None:  # the prompt token landed on that request only
        assert [i for i, t in enumerate(got.tolist()) if t == NEXT_PROMPT_TOKEN] == [chunked_at]


def test_a_chunked_request_missing_from_the_batch_keeps_every_sampled_tail() -> None:
    """Upstream changes nothing when the chunked request is not among the batch's requests."""
    from sglang.srt.speculative.eagle_utils import _eagle_prefill_tail_tokens

    from patched_worker.prefill_tail import chunk_tail, tail_tokens

    batch = _batch(3, 1)
    batch.chunked_req = SimpleNamespace(rid="elsewhere")
    sampled = torch.tensor([1001, 1002, 1003])
    assert chunk_tail(batch) is None
    assert torch.equal(tail_tokens(batch, sampled), _eagle_prefill_tail_tokens(batch, sampled))


def test_install_puts_it_where_upstreams_eagle_prefill_calls_it() -> None:
    import sglang.srt.speculative.eagle_worker_v2 as eagle_worker_v2
    from sglang.srt.speculative import eagle_utils

    from patched_worker.prefill_tail import install_prefill_tail, tail_tokens

    saved = eagle_worker_v2._eagle_prefill_tail_tokens
    assert saved is eagle_utils._eagle_prefill_tail_tokens  # the name upstream's prefill resolves at call
    try:
        (target,) = install_prefill_tail()
        assert target.startswith("eagle_worker_v2._eagle_prefill_tail_tokens")
        assert eagle_worker_v2._eagle_prefill_tail_tokens is tail_tokens
    finally:
        eagle_worker_v2._eagle_prefill_tail_tokens = saved


def _flush(engine, timeout_s: float = 30.0) -> None:
    """Empty the prefix cache once the scheduler is idle: SGLang refuses a flush while it still holds a
    request, which it can for a moment after the client's last one returned (seen in CI)."""
    deadline = time.monotonic() + timeout_s
    while not engine.flush_cache().success:
        assert time.monotonic() < deadline, f"the engine did not go idle for a cache flush in {timeout_s} s"
        time.sleep(0.2)


CHUNK = 16  # tokens per prefill step: the longer prompts of mixed_prompts are cut into 2-7 chunks
ON_AT = 24  # decode steps OFF before re-enabling: chunks and decode steps interleave, all chunks run OFF


@pytest.mark.engine
def test_chunked_prompts_prefilled_on_and_off_keep_the_output_and_the_acceptance(
    engines, prompts, reference
) -> None:
    """Prompts cut into chunks, prefilled ON (upstream's draft prefill, its tail name patched) and OFF
    (the K/V written directly, re-enabled after 24 decode steps): the plain engine's outputs token for token,
    more prefill steps than prompts (the chunks ran), and the acceptance of the draft prefill's."""
    from patched_worker.state import OffPrefill
    from tests.patched_worker.helpers import (
        NEW_TOKENS,
        first_mismatch,
        prefill_off_then_reenable,
        run_staggered,
    )

    assert sum(-(-len(p) // CHUNK) for p in prompts) > len(prompts)  # some prompts need several chunks
    engine = engines.spec_chunked(1, 3, 4, chunk=CHUNK)
    engine.set_speculation(True)
    _flush(engine)  # each run prefills its prompts whole: no prefix cached from the last
    on = run_staggered(engine, prompts, [NEW_TOKENS] * len(prompts), [0.0] * len(prompts))
    assert first_mismatch(on, reference) is None, first_mismatch(on, reference)
    _flush(engine)
    got_fwd, _, accept_fwd = prefill_off_then_reenable(engine, prompts, OffPrefill.DRAFT_FORWARD, on_at=ON_AT)
    _flush(engine)
    got_kv, off_prefills, accept_kv = prefill_off_then_reenable(
        engine, prompts, OffPrefill.KV_WRITE, on_at=ON_AT
    )
    for label, got in (("draft_forward", got_fwd), ("kv_write", got_kv)):
        assert first_mismatch(got, reference) is None, (label, first_mismatch(got, reference))
    assert off_prefills > len(prompts), (
        f"{off_prefills} OFF prefill steps for {len(prompts)} prompts: nothing chunked"
    )
    assert accept_fwd > 1.5 and abs(accept_kv - accept_fwd) <= 0.1, (accept_fwd, accept_kv)
