"""CUDA allocator counters around an extend step, so a slow step's line says whether the wait was the
allocator's.

A prefill step whose host call took as long as the prefill itself waited on the device. Two waits
that step code does not ask for come from the allocators: PyTorch's caching allocator, when a
cudaMalloc fails, frees its cached blocks (cudaFree synchronizes the device) and retries; a new
pinned host block comes from cudaHostAlloc. `counters` reads PyTorch's own counts of those calls
(`torch.cuda.memory_stats`, `torch.cuda.host_memory_stats`) and `moved` says which a step moved.
Read for extend steps only, before and after each (two dict reads of PyTorch's stats; their cost on
the GPU host is not measured yet); None without CUDA.
"""

from __future__ import annotations

__all__ = ["COUNTERS", "counters", "moved"]

# (PyTorch's counter, the name in a slow-step line)
_DEVICE = (
    ("num_alloc_retries", "alloc retries"),
    ("num_device_alloc", "cudaMalloc"),
    ("num_device_free", "cudaFree"),
    ("num_sync_all_streams", "syncs"),
)
_HOST = (("num_host_alloc", "cudaHostAlloc"), ("num_host_free", "cudaFreeHost"))
COUNTERS = tuple(name for _, name in _DEVICE + _HOST)


def counters() -> tuple[int, ...] | None:
    """The allocators' call counts in `COUNTERS` order, or None without CUDA."""
    import torch

    if not torch.cuda.is_available():
        return None
    device = torch.cuda.memory_stats()
    host_stats = getattr(torch.cuda, "host_memory_stats", None)  # torch >= 2.6
    host = host_stats() if host_stats is not None else {}
    return tuple(int(device.get(key, 0)) for key, _ in _DEVICE) + tuple(
        int(host.get(key, 0)) for key, _ in _HOST
    )


def moved(before: tuple[int, ...] | None, after: tuple[int, ...] | None) -> str:
    """'allocator: cudaMalloc +2, cudaFree +5' for the counters that moved, 'allocator: none' if
    none did, '' without counts (no CUDA)."""
    if before is None or after is None:
        return ""
    changes = [f"{name} +{b - a}" for name, a, b in zip(COUNTERS, before, after, strict=True) if b != a]
    return "allocator: " + (", ".join(changes) if changes else "none")
