"""The spec-decode allocation patch (patched_worker.spec_alloc) leaves every request's allocated length
as upstream's `alloc_for_spec_decode` sets it, at page size 1 (lengths read as a list) and above
(passed through). Upstream's own function runs on both sides; the engine-level proof (token-identical
outputs, no KV leak at idle) is every engine test, which runs with the patch installed."""

from __future__ import annotations

import types

import pytest
import torch

from patched_worker.cpu import shim

if not torch.cuda.is_available():
    shim.enable()


def _reqs(lens: list[int]) -> list[types.SimpleNamespace]:
    return [types.SimpleNamespace(kv=types.SimpleNamespace(kv_allocated_len=n)) for n in lens]


@pytest.mark.parametrize("page_size", [1, 16])
def test_allocated_lengths_are_upstreams(page_size: int) -> None:
    import sglang.srt.mem_cache.allocation as allocation
    import sglang.srt.speculative.eagle_utils as eagle_utils

    from patched_worker.spec_alloc import install_spec_alloc

    upstream = allocation.alloc_for_spec_decode
    saved = eagle_utils.alloc_for_spec_decode
    try:
        install_spec_alloc()
        patched = eagle_utils.alloc_for_spec_decode
        assert patched is not upstream and patched.__wrapped__ is upstream
        before, nxt = [5, 40, 17, 9], [12, 33, 17, 20]
        cache = types.SimpleNamespace(token_to_kv_pool_allocator=types.SimpleNamespace(page_size=page_size))
        results = []
        for fn in (upstream, patched):
            reqs = _reqs(before)
            # no new slots needed: the call runs only the per-request bookkeeping
            fn(
                cache, None, reqs=reqs, req_pool_indices=None, cur_kv_lens=None, cur_kv_lens_cpu=None,
                nxt_kv_lens=None, nxt_kv_lens_cpu=torch.tensor(nxt, dtype=torch.int32), num_needed_tokens=0,
            )  # fmt: skip
            results.append([r.kv.kv_allocated_len for r in reqs])
        assert results[0] == results[1] == [max(a, b) for a, b in zip(before, nxt, strict=True)]
        assert all(type(n) is int for n in results[1])
    finally:
        eagle_utils.alloc_for_spec_decode = saved
