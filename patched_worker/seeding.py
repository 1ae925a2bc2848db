"""Per-request `seed` for sampled decoding (OpenAI's `seed`, SGLang's `sampling_seed`).

SGLang 0.5.17 reads `sampling_seed` only under `--enable-deterministic-inference`
(srt/sampling/sampling_batch_info.py:89 builds the per-request seed tensor only then), which also
turns on batch-invariant kernels and restricts the attention backends (none of them runs on CPU).
Its seeded sampling itself needs neither: `multinomial_with_seed` (srt/layers/sampler.py) draws
each token from a hash of (seed, position, token), so a request's samples do not depend on what
else is in the batch, and EAGLE's verify derives its coins the same way (`_seeded_verify_coins`).

Patched here (installed by `patched_worker.install`):
- `SamplingBatchInfo.from_schedule_batch` fills the seed tensor for every batch: the request's
  seed, or one drawn from its request id (unseeded requests stay random across requests). Only
  with the `pytorch` sampling backend, the one whose top-k/top-p path takes seeds (flashinfer's
  asserts there are none); the app selects it.
- `top_k_top_p_min_p_sampling_from_probs_torch` (sampler.py:563): upstream's, without the assert
  that refuses min_p with a seed (the Gumbel draw over unnormalised log-probabilities is the same
  draw as over normalised ones).
- `murmur_hash32` (kernels/ops/sampling/murmur_hash.py) on CPU tensors: the Triton kernel in
  plain torch, bit for bit.
These go when SGLang honours `sampling_seed` without deterministic inference.
"""

from __future__ import annotations

import functools
import hashlib

import torch

__all__ = ["install_seeding", "murmur_hash32_torch"]

_M32 = 0xFFFFFFFF


def _rotl(x: torch.Tensor, r: int) -> torch.Tensor:
    return ((x << r) | (x >> (32 - r))) & _M32


def _mix(h: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    k = (k * 0xCC9E2D51) & _M32  # int64 products wrap mod 2**64: the low 32 bits are exact
    k = _rotl(k, 15)
    k = (k * 0x1B873593) & _M32
    h = _rotl(h ^ k, 13)
    return (h * 5 + 0xE6546B64) & _M32


def murmur_hash32_torch(seed: torch.Tensor, positions: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """SGLang's murmur_hash32_kernel: (n,) seeds and positions x (m,) columns -> (n, m) hashes."""
    s = seed.to(torch.int64).view(-1, 1)
    pos = positions.to(torch.int64).view(-1, 1) & _M32
    col = cols.to(torch.int64).view(1, -1) & _M32
    h = torch.zeros_like(s)
    h = _mix(h, s & _M32)
    h = _mix(h, (s >> 32) & _M32)
    h = _mix(h, pos)
    h = _mix(h.expand(-1, col.shape[1]), col)
    h = h ^ 16
    h = h ^ (h >> 16)
    h = (h * 0x85EBCA6B) & _M32
    h = h ^ (h >> 13)
    h = (h * 0xC2B2AE35) & _M32
    return h ^ (h >> 16)


def _request_seed(rid: object) -> int:
    return int.from_bytes(hashlib.blake2b(str(rid).encode(), digest_size=8).digest(), "little") >> 1


def install_seeding() -> tuple[str, ...]:
    """Patch this process's SGLang; returns the names of what was patched."""
    import sglang.kernels.ops.sampling.murmur_hash as murmur_mod
    import sglang.srt.layers.sampler as sampler_mod
    from sglang.srt.runtime_context import get_exec
    from sglang.srt.sampling.sampling_batch_info import SamplingBatchInfo

    upstream_hash = murmur_mod.murmur_hash32

    @functools.wraps(upstream_hash)
    def murmur_hash32(seed, positions, col_indices):
        if seed.device.type == "cpu":
            return murmur_hash32_torch(seed, positions, col_indices)
        return upstream_hash(seed, positions, col_indices)

    upstream_build = SamplingBatchInfo.from_schedule_batch.__func__  # type: ignore[attr-defined]

    @functools.wraps(upstream_build)
    def from_schedule_batch(cls, batch, vocab_size):
        info = upstream_build(cls, batch, vocab_size)
        if info.sampling_seed is None and get_exec().kernel.sampling_backend == "pytorch":
            seeds = [
                r.sampling_params.sampling_seed
                if r.sampling_params.sampling_seed is not None
                else _request_seed(r.rid)
                for r in batch.reqs
            ]
            info.sampling_seed = torch.tensor(seeds, dtype=torch.int64).to(batch.device, non_blocking=True)
        return info

    upstream_topk = sampler_mod.top_k_top_p_min_p_sampling_from_probs_torch

    @functools.wraps(upstream_topk)
    def top_k_top_p_min_p(probs, top_ks, top_ps, min_ps, need_min_p_sampling, sampling_seed, positions):
        if not (need_min_p_sampling and sampling_seed is not None):
            return upstream_topk(probs, top_ks, top_ps, min_ps, need_min_p_sampling, sampling_seed, positions)
        probs_sort, probs_idx = probs.sort(dim=-1, descending=True)
        probs_sum = torch.cumsum(probs_sort, dim=-1)
        columns = torch.arange(0, probs.shape[-1], device=probs.device).view(1, -1)
        probs_sort[columns >= top_ks.view(-1, 1)] = 0.0
        probs_sort[(probs_sum - probs_sort) > top_ps.view(-1, 1)] = 0.0
        min_p_thresholds = probs_sort[:, 0] * min_ps
        probs_sort[probs_sort < min_p_thresholds.view(-1, 1)] = 0.0
        logprobs = probs_sort.to(torch.float64).log_()
        sampled = sampler_mod.multinomial_with_seed(logprobs, sampling_seed, positions)
        return torch.gather(probs_idx.to(torch.int32), dim=1, index=sampled).view(-1)

    murmur_mod.murmur_hash32 = murmur_hash32
    sampler_mod.murmur_hash32 = murmur_hash32
    SamplingBatchInfo.from_schedule_batch = classmethod(from_schedule_batch)  # type: ignore[method-assign,assignment]
    sampler_mod.top_k_top_p_min_p_sampling_from_probs_torch = top_k_top_p_min_p
    return (
        "SamplingBatchInfo.from_schedule_batch",
        "sampler.top_k_top_p_min_p_sampling_from_probs_torch",
        "murmur_hash32 (cpu tensors)",
    )
