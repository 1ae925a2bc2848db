"""Spec-decode KV allocation without one tensor index per request per step.

sglang 0.5.17 `alloc_for_spec_decode` (srt/mem_cache/allocation.py:674) ends every speculative decode
step with `req.kv.kv_allocated_len = max(..., int(nxt_kv_lens_cpu[i]))` for each request
(allocation.py:719-720): a 0-d tensor made and read per request. `eagle_prepare_for_decode`
(srt/speculative/eagle_utils.py:879) calls it once per decode step, so while speculation is OFF it
runs once per token; on the H200 at c=128 that line was ~4% of the OFF scheduler's py-spy samples
(docs/benchmarks.md, third serving run). At page size 1 `nxt_kv_lens_cpu` is read nowhere else in
the function, so it is handed over as a list: the same values, read as Python ints. Page sizes > 1
pass through unchanged (the paged allocator reads the tensor).
This goes when upstream reads the lengths as a list (or vectorizes the loop).
"""

from __future__ import annotations

import functools

__all__ = ["install_spec_alloc"]


def install_spec_alloc() -> tuple[str, ...]:
    """Patch the name `eagle_utils` calls; returns what was patched."""
    import sglang.srt.mem_cache.allocation as allocation
    import sglang.srt.speculative.eagle_utils as eagle_utils

    upstream = allocation.alloc_for_spec_decode

    @functools.wraps(upstream)
    def alloc_for_spec_decode(tree_cache, req_to_token_pool, *, nxt_kv_lens_cpu, **kwargs):
        if tree_cache.token_to_kv_pool_allocator.page_size == 1:
            nxt_kv_lens_cpu = nxt_kv_lens_cpu.tolist()
        return upstream(tree_cache, req_to_token_pool, nxt_kv_lens_cpu=nxt_kv_lens_cpu, **kwargs)

    eagle_utils.alloc_for_spec_decode = alloc_for_spec_decode
    return ("eagle_utils.alloc_for_spec_decode (page size 1: lengths as a list)",)
