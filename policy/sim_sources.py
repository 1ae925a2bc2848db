"""Where the simulator's requests come from. Pure.

`OpenSource` replays a Trace's precomputed arrivals. `UserSource` runs ClosedLoop users: a
request is created when its user sends it, and the next one is scheduled when it finishes.
Both hand out (record, pinned replica or None) in time order and keep every record made.
"""

from __future__ import annotations

import heapq
import random
from typing import TYPE_CHECKING

from policy.sim_trace import ClosedLoop, Trace

if TYPE_CHECKING:
    from policy.sim import RequestRecord

__all__ = ["OpenSource", "UserSource", "make_source"]

_NEVER = float("inf")


class OpenSource:
    def __init__(self, trace: Trace, seed: int, record_cls: type[RequestRecord]) -> None:
        self.records = [record_cls(a.at, a.prompt_tokens, a.output_tokens) for a in trace.arrivals(seed)]
        self._next = 0

    def next_at(self) -> float:
        return self.records[self._next].arrival if self._next < len(self.records) else _NEVER

    def take(self, t: float) -> tuple[RequestRecord, int | None] | None:
        q = self.records[self._next]
        self._next += 1
        return q, None

    def finished(self, q: RequestRecord, t: float) -> None:
        pass


class UserSource:
    def __init__(self, trace: ClosedLoop, seed: int, replicas: int, record_cls: type[RequestRecord]) -> None:
        self.records: list[RequestRecord] = []
        self._trace, self._record_cls = trace, record_cls
        self._rng = random.Random(seed)
        self._pin = trace.pinning(replicas, seed)
        self._starts = [start for _, start, _ in trace.bounds()]  # phase starts still to come
        self._heap: list[tuple[float, int]] = []  # (send time, user)
        self._live: set[int] = set()  # users thinking or waiting for an answer

    def next_at(self) -> float:
        return min(self._heap[0][0] if self._heap else _NEVER, self._starts[0] if self._starts else _NEVER)

    def take(self, t: float) -> tuple[RequestRecord, int | None] | None:
        if self._starts and self._starts[0] <= t:  # a phase starts: its users not yet live begin thinking
            self._starts.pop(0)
            for user in range(self._trace.users_at(t)):
                self._schedule(user, t)
            return None
        _, user = heapq.heappop(self._heap)
        if user >= self._trace.users_at(t):  # the phase has fewer users now: this one stops
            self._live.discard(user)
            return None
        q = self._record_cls(
            t, self._trace.prompt_tokens, self._rng.randint(self._trace.out_min, self._trace.out_max)
        )
        q.user = user
        self.records.append(q)
        return q, None if self._pin is None else self._pin[user]

    def finished(self, q: RequestRecord, t: float) -> None:
        self._live.discard(q.user)
        if q.user < self._trace.users_at(t):
            self._schedule(q.user, t)

    def _schedule(self, user: int, t: float) -> None:
        if user not in self._live:
            self._live.add(user)
            heapq.heappush(self._heap, (t + self._rng.expovariate(1 / self._trace.think_s), user))


def make_source(
    trace: Trace | ClosedLoop, seed: int, replicas: int, record_cls: type[RequestRecord]
) -> OpenSource | UserSource:
    if isinstance(trace, ClosedLoop):
        return UserSource(trace, seed, replicas, record_cls)
    return OpenSource(trace, seed, record_cls)
