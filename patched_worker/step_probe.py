"""Where a slow step's host time went: its own phases, the garbage collector, the CUDA allocators.

A prefill step whose host call lasts as long as the prefill itself waited on something. A
`StepProbe` is opened around each step (`SpecSwitch.step`) and read only when the step was slow: the
phases its code marked (`mark`: the OFF prefill marks its target extend, its shifted rows and its
draft K/V write), the garbage collector's pauses inside it (`gc.callbacks`, process-wide), and for an
extend step on CUDA the allocator calls it made (PyTorch's own counts: a cudaMalloc that fails makes
the caching allocator free its cache, and cudaFree synchronizes, before it retries; a new pinned
block is a cudaHostAlloc). On an H100 (2026-12-07) nine of ten slow OFF prefills made no allocator
call at all: the phases and the collector are the next split.
"""

from __future__ import annotations

import gc
import time

__all__ = ["COUNTERS", "PhaseMeans", "StepProbe", "counters", "gc_paused_s", "install_gc_clock", "moved"]

# (PyTorch's counter, the name in a slow-step line)
_DEVICE = (
    ("num_alloc_retries", "alloc retries"),
    ("num_device_alloc", "cudaMalloc"),
    ("num_device_free", "cudaFree"),
    ("num_sync_all_streams", "syncs"),
)
_HOST = (("num_host_alloc", "cudaHostAlloc"), ("num_host_free", "cudaFreeHost"))
COUNTERS = tuple(name for _, name in _DEVICE + _HOST)

_gc_paused = 0.0  # seconds the collector has run since install_gc_clock
_gc_started: float | None = None


def _on_gc(phase: str, info: dict) -> None:
    global _gc_paused, _gc_started
    if phase == "start":
        _gc_started = time.perf_counter()
    elif _gc_started is not None:
        _gc_paused += time.perf_counter() - _gc_started
        _gc_started = None


def install_gc_clock() -> None:
    """Time the garbage collector's runs from now on (once per process; a callback per collection)."""
    if _on_gc not in gc.callbacks:
        gc.callbacks.append(_on_gc)


def gc_paused_s() -> float:
    """Seconds the garbage collector has run since `install_gc_clock` (0 before)."""
    return _gc_paused


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


class StepProbe:
    """One step's clock, its marked phases, the collector's pauses and (`allocator`) the allocators'
    counts from its start; `note` says them for a slow step's line."""

    __slots__ = ("_allocs", "_gc", "_marks", "started")

    def __init__(self, allocator: bool = False) -> None:
        self._allocs = counters() if allocator else None
        self._gc = _gc_paused
        self._marks: list[tuple[str, float]] = []
        self.started = time.perf_counter()

    def mark(self, phase: str) -> None:
        """The phase `phase` ended now (it began at the previous mark, or at the step's start)."""
        self._marks.append((phase, time.perf_counter()))

    def phases(self, ended: float) -> list[tuple[str, float]]:
        """(phase, seconds) of the marked phases and the rest up to `ended`; [] if none was marked."""
        out, t = [], self.started
        for phase, at in self._marks:
            out.append((phase, at - t))
            t = at
        return [*out, ("rest", ended - t)] if out else []

    def note(self, ended: float) -> str:
        """'target 270 ms, draft K/V 3 ms, rest 1 ms; gc 0 ms; allocator: none' for a step that
        ended at `ended` (perf_counter): phases only if marked, the allocator only if read."""
        phases = ", ".join(f"{phase} {seconds * 1e3:.0f} ms" for phase, seconds in self.phases(ended))
        parts = [phases] if phases else []
        parts.append(f"gc {(_gc_paused - self._gc) * 1e3:.0f} ms")
        allocs = moved(self._allocs, counters()) if self._allocs is not None else ""
        return "; ".join([*parts, allocs] if allocs else parts)


class PhaseMeans:
    """Every step's host time, not only a slow one's: per kind of step, the mean host time and the mean
    of each marked phase over its last `every` steps, said once per `every` (a line a run, not a line a
    step). Whether every OFF prefill waits in its target call or only a few do reads here."""

    def __init__(self, every: int) -> None:
        self.every = every
        self._sums: dict[str, tuple[int, float, dict[str, float]]] = {}

    def add(self, kind: str, probe: StepProbe, ended: float) -> str | None:
        """Count one step of `kind`; the line for the last `every` of them when this one completes them."""
        n, host, phases = self._sums.get(kind, (0, 0.0, {}))
        for phase, seconds in probe.phases(ended):
            phases[phase] = phases.get(phase, 0.0) + seconds
        n, host = n + 1, host + ended - probe.started
        if n < self.every:
            self._sums[kind] = (n, host, phases)
            return None
        del self._sums[kind]
        split = ", ".join(f"{phase} {seconds / n * 1e3:.1f}" for phase, seconds in phases.items())
        return f"{kind} steps' host time, mean of the last {n}: {host / n * 1e3:.1f} ms" + (
            f" ({split} ms)" if split else ""
        )
