"""Stream coalescing: first item at once, then one list per window; order, errors, cancellation."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from deployments.replica.coalesce import coalesce


async def _ticks(n: int, every_s: float, fail_at: int | None = None) -> AsyncIterator[int]:
    for i in range(n):
        if i == fail_at:
            raise ValueError(f"boom at {i}")
        yield i
        await asyncio.sleep(every_s)


async def _collect(source: AsyncIterator[int], window_s: float) -> list[tuple[float, list[int]]]:
    t0, out = time.monotonic(), []
    async for batch in coalesce(source, window_s):
        out.append((time.monotonic() - t0, batch))
    return out


def test_the_first_item_is_not_held_for_a_window() -> None:
    out = asyncio.run(_collect(_ticks(2, 0.0), window_s=1.0))
    assert out[0][1] == [0] and out[0][0] < 0.5  # sent long before a 1 s window could end


def test_after_the_first_item_one_list_per_window_nothing_lost() -> None:
    out = asyncio.run(_collect(_ticks(40, 0.005), window_s=0.05))
    assert [i for _, batch in out for i in batch] == list(range(40))
    assert len(out) <= 1 + 40 * 0.005 / 0.05 + 2  # ~one list per window, not one per item
    gaps = [b - a for (a, _), (b, _) in zip(out[1:], out[2:], strict=False)]
    assert all(g >= 0.045 for g in gaps[:-1]), gaps  # the last list goes when the source ends


def test_the_end_of_a_stream_is_not_held_for_the_window() -> None:
    """Items after the first wait for the window, but once the source ends they go out at once:
    the stream's last packet is not held up to a window (here 10 s) after the last token."""

    async def burst() -> AsyncIterator[int]:
        for i in range(5):
            yield i
            await asyncio.sleep(0.01)

    out = asyncio.run(_collect(burst(), window_s=10.0))
    assert [batch for _, batch in out] == [[0], [1, 2, 3, 4]]
    assert out[-1][0] < 5.0  # a held end would come at ~10 s


def test_zero_window_passes_every_item_alone() -> None:
    out = asyncio.run(_collect(_ticks(5, 0.0), window_s=0))
    assert [batch for _, batch in out] == [[0], [1], [2], [3], [4]]


def test_a_slow_source_is_not_held_back() -> None:
    # items further apart than the window go out one by one, each as soon as it exists
    out = asyncio.run(_collect(_ticks(4, 0.25), window_s=0.01))
    assert [batch for _, batch in out] == [[0], [1], [2], [3]]


def test_an_error_comes_after_the_items_before_it() -> None:
    async def run() -> list[int]:
        seen: list[int] = []
        with pytest.raises(ValueError, match="boom at 7"):
            async for batch in coalesce(_ticks(20, 0.001, fail_at=7), 0.01):
                seen.extend(batch)
        return seen

    assert asyncio.run(run()) == list(range(7))


def test_closing_the_consumer_cancels_the_source() -> None:
    state = {"cancelled": False}

    async def endless() -> AsyncIterator[int]:
        i = 0
        try:
            while True:
                yield i
                i += 1
                await asyncio.sleep(0.001)
        except asyncio.CancelledError:
            state["cancelled"] = True
            raise

    async def run() -> None:
        gen = coalesce(endless(), 0.01)
        await gen.__anext__()
        await gen.__anext__()
        await gen.aclose()  # the client went away
        await asyncio.sleep(0.05)

    asyncio.run(run())
    assert state["cancelled"]
