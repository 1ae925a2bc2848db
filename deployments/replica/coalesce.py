"""Stream packets as SGLang's own server sends them, coalesced only while the replica is behind.

Every streamed packet costs a fixed amount on its way (the chunk through the replica's handlers, an
HTTP write from the replica's one Python process, which also runs the engine's tokenizer manager;
HAProxy's splice). A replica therefore sends each token as soon as it is made while its event loop
keeps up, as SGLang's own server does: on the H200 a fixed 50-ms window (the behaviour until
2026-12-03) made the app's ITL p99 at one stream 50.6 ms where SGLang's server had 5.4 ms at equal
TPOT. What piles up while a packet is on its way is never a packet each: the source is read only
when the previous packet has left, and SGLang's tokenizer manager hands over everything generated
meanwhile as one output (`_wait_one_response` drains its queue atomically), so a slow client or a
busy loop already gets fewer, larger packets. Beyond that, once the replica's event loop runs
behind (`LoopLag`: how late a 10-ms timer fires, averaged, above `behind_s`), a stream switches to
windows: a reader task pumps its chunks into a queue and the consumer sends at most one packet per
`interval_s` with everything read meanwhile, giving the loop back the per-packet work (on the
2026-11-30 H200 sweep, through the old ingress path, the app topped out near 2,000 packets/s; Ray
Serve LLM's own server batches every stream per `stream_batching_interval_ms`, 50 ms). When the lag
falls below `behind_s` again, that stream's packets go at once again.

The first packet always goes at once (time to first token is untouched), and the end of a stream
is never held: once the source ends (or fails), what is left goes out at once instead of waiting
out a window (a held last packet added up to one window to every streamed request's total time).
Ray's own `Batcher` (ray.llm._internal.serve.utils.batcher) is not used: it waits a whole window
before its first list too, and at every load. Packets are lists of SSE strings; the replica's HTTP
handlers join a list into one HTTP write.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import TypeVar

__all__ = ["BEHIND_S", "LoopLag", "coalesce"]

T = TypeVar("T")
BEHIND_S = 0.005  # default lag above which streams coalesce (serve.stream_batching_lag_ms)
_DONE = object()


class _Failed:
    def __init__(self, error: BaseException) -> None:
        self.error = error


class LoopLag:
    """How far behind the event loop runs: the moving average of how late a `period_s` timer fires,
    measured while at least one stream is open (one watcher task per replica, not per stream).

    A ready loop fires a timer within about a millisecond; a loop with a backlog of ready callbacks
    (chunks to build and write for many streams) fires it only after working through them.
    """

    def __init__(self, period_s: float = 0.01, alpha: float = 0.2) -> None:
        self.period_s, self.alpha = period_s, alpha
        self.lag_s = 0.0
        self._streams = 0
        self._watcher: asyncio.Task[None] | None = None

    def behind(self, threshold_s: float) -> bool:
        return threshold_s <= 0 or self.lag_s > threshold_s

    def open(self) -> None:
        self._streams += 1
        if self._watcher is None or self._watcher.done():
            self._watcher = asyncio.get_running_loop().create_task(self._watch())

    def close(self) -> None:
        self._streams -= 1

    async def _watch(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._streams > 0:
                start = loop.time()
                await asyncio.sleep(self.period_s)
                late = max(0.0, loop.time() - start - self.period_s)
                self.lag_s += self.alpha * (late - self.lag_s)
        finally:
            self.lag_s = 0.0  # nothing streams: the next stream starts sending at once


async def coalesce(
    source: AsyncIterator[T],
    interval_s: float,
    *,
    behind_s: float = BEHIND_S,
    lag: LoopLag | None = None,
    on_windows: Callable[[], None] | None = None,
) -> AsyncIterator[list[T]]:
    """Yield `source`'s items in lists: each as soon as it is read while `lag` (the loop's, shared
    by a replica's streams; a private one if None) stays at or below `behind_s`; once above, at most
    one list per `interval_s` (the first list and the last always at once).

    Order is kept, nothing is dropped, an error from `source` is raised after the items before
    it. `interval_s <= 0` passes every item through alone; `behind_s <= 0` always coalesces per
    window. Closing this generator (a client that went away) cancels the read of `source`, as
    closing `source` directly would. `on_windows` is called once if the stream switches to
    windows (the replica counts it: `specflip_streams_windowed_total`).
    """
    if interval_s <= 0:
        async for item in source:
            yield [item]
        return
    lag = lag if lag is not None else LoopLag()
    items = source.__aiter__()
    windows = False
    lag.open()
    try:
        # at once: the consumer reads the source itself, so nothing is read while a packet is on its way
        last_yield: float | None = None
        while last_yield is None or not lag.behind(behind_s):
            try:
                item = await items.__anext__()
            except StopAsyncIteration:
                return
            last_yield = time.monotonic()
            yield [item]
        # behind: windows, the source read on by a task while the consumer waits
        windows = True
        if on_windows is not None:
            on_windows()
        async for batch in _windows(items, interval_s, behind_s, lag, last_yield):
            yield batch
    finally:
        lag.close()
        close = getattr(items, "aclose", None)
        if not windows and close is not None:  # a closed consumer closes the source it reads itself
            await close()


async def _windows(
    items: AsyncIterator[T], interval_s: float, behind_s: float, lag: LoopLag, last_yield: float
) -> AsyncIterator[list[T]]:
    """The rest of a stream while the loop is behind: after a packet, the next one waits for the
    window to end (unless the source ends first), or goes at once once the loop has caught up."""
    queue: asyncio.Queue[object] = asyncio.Queue()
    ended = asyncio.Event()  # the source is done or failed: flush without waiting out the window

    async def pump() -> None:
        try:
            async for item in items:
                queue.put_nowait(item)
        except Exception as err:  # handed to the consumer, in order
            queue.put_nowait(_Failed(err))
        queue.put_nowait(_DONE)
        ended.set()

    reader = asyncio.create_task(pump())
    try:
        while True:
            batch: list[object] = [await queue.get()]
            if batch[0] is not _DONE and not isinstance(batch[0], _Failed) and lag.behind(behind_s):
                wait = last_yield + interval_s - time.monotonic()
                if wait > 0 and not ended.is_set():
                    try:  # let the window fill, unless the source ends first
                        async with asyncio.timeout(wait):
                            await ended.wait()
                    except TimeoutError:
                        pass
            while not queue.empty():
                batch.append(queue.get_nowait())
            out: list[T] = []
            end: object | None = None
            for entry in batch:
                if entry is _DONE or isinstance(entry, _Failed):
                    end = entry
                    break
                out.append(entry)  # type: ignore[arg-type]
            if out:
                last_yield = time.monotonic()
                yield out
            if isinstance(end, _Failed):
                raise end.error
            if end is _DONE:
                return
    finally:
        if not reader.done():
            reader.cancel()
