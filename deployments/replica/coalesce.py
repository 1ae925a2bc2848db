"""Fewer, larger stream packets: a replica's SSE chunks, coalesced per time window.

Every streamed packet costs a fixed amount on its way (an HTTP write from the replica's one Python
process, which also runs the engine's tokenizer manager; HAProxy's splice). On the 2026-11-30 H200
sweep, through the old ingress path, the app topped out near 2,000 packets/s in all whatever the
mode: with one token per packet (speculation OFF) that capped two replicas at ~2,050 tok/s while
their engines could do ~10x more (docs/benchmarks.md). Coalescing sends the
first packet at once (time to first token is untouched) and afterwards at most one packet per
window holding everything generated meanwhile, as Ray Serve LLM's own server batches (its
`stream_batching_interval_ms`, 50 ms by default). The end of a stream is not held: once the
source ends (or fails), what is left goes out at once instead of waiting out the window (a held
last packet added up to one window to every streamed request's total time). Ray's own `Batcher`
(ray.llm._internal.serve.utils.batcher) is not used: it waits a whole window before its first
list too, which would add up to one window to every time to first token. Packets are lists of
SSE strings; the replica's HTTP handlers join a list into one HTTP write.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import TypeVar

__all__ = ["coalesce"]

T = TypeVar("T")
_DONE = object()


class _Failed:
    def __init__(self, error: BaseException) -> None:
        self.error = error


async def coalesce(source: AsyncIterator[T], interval_s: float) -> AsyncIterator[list[T]]:
    """Yield `source`'s items in lists: the first at once, then at most one list per `interval_s`.

    Order is kept, nothing is dropped, an error from `source` is raised after the items before
    it. `interval_s <= 0` passes every item through alone. Closing this generator (a client that
    went away) cancels the read of `source`, as closing `source` directly would.
    """
    if interval_s <= 0:
        async for item in source:
            yield [item]
        return

    queue: asyncio.Queue[object] = asyncio.Queue()
    ended = asyncio.Event()  # the source is done or failed: flush without waiting out the window

    async def pump() -> None:
        try:
            async for item in source:
                queue.put_nowait(item)
        except Exception as err:  # handed to the consumer, in order
            queue.put_nowait(_Failed(err))
        queue.put_nowait(_DONE)
        ended.set()

    reader = asyncio.create_task(pump())
    try:
        last_yield: float | None = None
        while True:
            batch: list[object] = [await queue.get()]
            if last_yield is not None and batch[0] is not _DONE and not isinstance(batch[0], _Failed):
                wait = last_yield + interval_s - time.monotonic()
                if wait > 0 and not ended.is_set():
                    try:  # let the window fill, unless the source ends first
                        async with asyncio.timeout(wait):
                            await ended.wait()
                    except TimeoutError:
                        pass
            while not queue.empty():
                batch.append(queue.get_nowait())
            items: list[T] = []
            end: object | None = None
            for entry in batch:
                if entry is _DONE or isinstance(entry, _Failed):
                    end = entry
                    break
                items.append(entry)  # type: ignore[arg-type]
            if items:
                last_yield = time.monotonic()
                yield items
            if isinstance(end, _Failed):
                raise end.error
            if end is _DONE:
                return
    finally:
        if not reader.done():
            reader.cancel()
