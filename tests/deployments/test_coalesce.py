"""Stream coalescing: each token at once while the loop keeps up; one list per window while it runs
behind; the first and the last packet never held; order, errors, cancellation in both modes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from deployments.replica.coalesce import LoopLag, coalesce

ALWAYS_BEHIND = 0.0  # behind_s <= 0: the windows at every load (the behaviour before 2026-12-03)
NEVER_BEHIND = 10.0  # no loop here runs 10 s behind: every item at once


class SetLag(LoopLag):
    """A loop lag the test sets (no watcher task): which mode a stream is in, without timing luck."""

    def open(self) -> None:
        pass

    def close(self) -> None:
        pass


async def _ticks(n: int, every_s: float, fail_at: int | None = None) -> AsyncIterator[int]:
    for i in range(n):
        if i == fail_at:
            raise ValueError(f"boom at {i}")
        yield i
        await asyncio.sleep(every_s)


async def _collect(
    source: AsyncIterator[int], window_s: float, behind_s: float = NEVER_BEHIND
) -> list[tuple[float, list[int]]]:
    t0, out = time.monotonic(), []
    async for batch in coalesce(source, window_s, behind_s=behind_s):
        out.append((time.monotonic() - t0, batch))
    return out


def test_the_first_item_is_not_held_for_a_window() -> None:
    out = asyncio.run(_collect(_ticks(2, 0.0), window_s=1.0, behind_s=ALWAYS_BEHIND))
    assert out[0][1] == [0] and out[0][0] < 0.5  # sent long before a 1 s window could end


def test_while_the_loop_keeps_up_every_token_is_its_own_packet_at_once() -> None:
    """A token every 20 ms, a 1 s window: each token leaves alone, as soon as it is made (the
    50-ms windows at every load held tokens 2.. until the stream ended: ITL p99 50.6 ms on the
    H200 at one stream where SGLang's own server had 5.4)."""
    made: list[float] = []

    async def stamped() -> AsyncIterator[int]:
        for i in range(10):
            made.append(time.monotonic())
            yield i
            await asyncio.sleep(0.02)

    async def run() -> list[tuple[float, list[int]]]:
        return [(time.monotonic(), b) async for b in coalesce(stamped(), 1.0, lag=SetLag())]

    out = asyncio.run(run())
    assert [batch for _, batch in out] == [[i] for i in range(10)]
    delays = [sent - made[batch[0]] for sent, batch in out]
    assert max(delays) < 0.1, delays  # a window would hold them up to 1 s


def test_tokens_made_while_a_packet_is_on_its_way_leave_as_one() -> None:
    """At once, the source is read only once the previous packet has left: what SGLang's tokenizer
    manager gathered meanwhile comes as one output (its `_wait_one_response` drains its queue
    atomically; here a source that does the same, the fake engine of this test), so a slow send
    gets fewer, larger packets without a window."""
    pending: list[str] = []

    async def run() -> list[list[str]]:
        finished, ready = asyncio.Event(), asyncio.Event()

        async def engine() -> None:  # a token every 2 ms
            for i in range(50):
                pending.append(f"t{i} ")
                ready.set()
                await asyncio.sleep(0.002)
            finished.set()
            ready.set()

        async def drained() -> AsyncIterator[str]:  # SGLang's drain: everything pending, in one output
            while True:
                await ready.wait()
                ready.clear()
                if pending:
                    out, pending[:] = "".join(pending), []
                    yield out
                if finished.is_set() and not pending:
                    return

        task = asyncio.create_task(engine())
        packets = []
        async for batch in coalesce(drained(), 1.0, lag=SetLag()):
            packets.append(batch)
            await asyncio.sleep(0.02)  # the send is on its way this long
        await task
        return packets

    packets = asyncio.run(run())
    assert "".join(p for batch in packets for p in batch) == "".join(f"t{i} " for i in range(50))
    assert all(len(batch) == 1 for batch in packets)
    assert len(packets) < 20, len(packets)  # 50 tokens in far fewer packets, with no window


def test_while_the_loop_is_behind_one_list_per_window_nothing_lost() -> None:
    # was the default at every load; now what a stream does while its replica's loop runs behind
    out = asyncio.run(_collect(_ticks(40, 0.005), window_s=0.05, behind_s=ALWAYS_BEHIND))
    assert [i for _, batch in out for i in batch] == list(range(40))
    assert len(out) <= 1 + 40 * 0.005 / 0.05 + 2  # ~one list per window, not one per item
    gaps = [b - a for (a, _), (b, _) in zip(out[1:], out[2:], strict=False)]
    assert all(g >= 0.045 for g in gaps[:-1]), gaps  # the last list goes when the source ends


def test_a_burst_while_behind_leaves_in_one_packet_and_at_once_again_after_catching_up() -> None:
    lag = SetLag()
    lag.lag_s = 1.0  # behind

    async def run() -> list[list[int]]:
        out = []
        async for batch in coalesce(_ticks(150, 0.003), 0.05, lag=lag):
            out.append(batch)
            if sum(map(len, out)) >= 30:
                lag.lag_s = 0.0  # caught up
        return out

    out = asyncio.run(run())
    assert [i for batch in out for i in batch] == list(range(150))
    assert out[0] == [0] and len(out[1]) > 5  # the first at once; the burst after it in one packet
    caught_up = next(k for k in range(len(out)) if sum(map(len, out[: k + 1])) >= 30)
    after = out[caught_up + 1 :]
    items_after = sum(map(len, after))
    assert items_after > 100 and len(after) >= 0.8 * items_after, after  # ~one token a packet again


@pytest.mark.parametrize("behind_s", [ALWAYS_BEHIND, NEVER_BEHIND], ids=["behind", "keeping-up"])
def test_the_end_of_a_stream_is_not_held_for_the_window(behind_s: float) -> None:
    """Items after the first may wait for the window, but once the source ends they go out at
    once: the stream's last packet is not held up to a window (here 10 s) after the last token."""

    async def burst() -> AsyncIterator[int]:
        for i in range(5):
            yield i
            await asyncio.sleep(0.01)

    out = asyncio.run(_collect(burst(), window_s=10.0, behind_s=behind_s))
    assert [i for _, batch in out for i in batch] == [0, 1, 2, 3, 4]
    assert out[0][1] == [0] and (len(out) == 2 if behind_s == ALWAYS_BEHIND else len(out) == 5)
    assert out[-1][0] < 5.0  # a held end would come at ~10 s


def test_zero_window_passes_every_item_alone() -> None:
    out = asyncio.run(_collect(_ticks(5, 0.0), window_s=0, behind_s=ALWAYS_BEHIND))
    assert [batch for _, batch in out] == [[0], [1], [2], [3], [4]]


def test_a_slow_source_is_not_held_back() -> None:
    # items further apart than the window go out one by one, each as soon as it exists
    out = asyncio.run(_collect(_ticks(4, 0.25), window_s=0.01, behind_s=ALWAYS_BEHIND))
    assert [batch for _, batch in out] == [[0], [1], [2], [3]]


@pytest.mark.parametrize("behind_s", [ALWAYS_BEHIND, NEVER_BEHIND], ids=["behind", "keeping-up"])
def test_an_error_comes_after_the_items_before_it(behind_s: float) -> None:
    async def run() -> list[int]:
        seen: list[int] = []
        with pytest.raises(ValueError, match="boom at 7"):
            async for batch in coalesce(_ticks(20, 0.001, fail_at=7), 0.01, behind_s=behind_s):
                seen.extend(batch)
        return seen

    assert asyncio.run(run()) == list(range(7))


@pytest.mark.parametrize("behind_s", [ALWAYS_BEHIND, NEVER_BEHIND], ids=["behind", "keeping-up"])
def test_closing_the_consumer_stops_the_source(behind_s: float) -> None:
    """Behind, the reader task's read is cancelled; keeping up, the source the consumer reads
    itself is closed: either way the engine's stream ends with the client's."""
    state = {"stopped": False}

    async def endless() -> AsyncIterator[int]:
        i = 0
        try:
            while True:
                yield i
                i += 1
                await asyncio.sleep(0.001)
        except (asyncio.CancelledError, GeneratorExit):
            state["stopped"] = True
            raise

    async def run() -> None:
        gen = coalesce(endless(), 0.01, behind_s=behind_s)
        await gen.__anext__()
        await gen.__anext__()
        await gen.aclose()  # the client went away
        await asyncio.sleep(0.05)

    asyncio.run(run())
    assert state["stopped"]


def test_the_loop_lag_is_near_zero_on_a_free_loop_and_grows_with_a_backlog() -> None:
    async def run() -> tuple[float, float, float]:
        lag = LoopLag()
        lag.open()
        await asyncio.sleep(0.2)
        free = lag.lag_s

        async def hog() -> None:  # a loop with 30 ms of ready work at every turn
            for _ in range(15):
                time.sleep(0.03)
                await asyncio.sleep(0)

        await hog()
        busy = lag.lag_s
        lag.close()
        await asyncio.sleep(0.05)
        return free, busy, lag.lag_s

    free, busy, idle = asyncio.run(run())
    assert busy > 0.01 > free, (free, busy)
    assert idle == 0.0  # no stream open: the watcher stopped, the next stream starts at once


@pytest.mark.parametrize(("lag_s", "switches"), [(1.0, 1), (0.0, 0)], ids=["behind", "keeping-up"])
def test_a_stream_that_falls_back_to_windows_is_reported_once(lag_s: float, switches: int) -> None:
    """`on_windows` (what the replica counts as specflip_streams_windowed_total) fires once for a
    stream that switched to windows, however many windows it then sent, and never for one that
    kept up."""
    lag, calls = SetLag(), []
    lag.lag_s = lag_s

    async def run() -> list[list[int]]:
        return [
            b async for b in coalesce(_ticks(40, 0.003), 0.02, lag=lag, on_windows=lambda: calls.append(1))
        ]

    out = asyncio.run(run())
    assert [i for batch in out for i in batch] == list(range(40))
    assert len(calls) == switches
