"""Where the simulator's requests come from. Pure.

`OpenSource` replays a Trace's precomputed arrivals. `UserSource` runs ClosedLoop users: a
request is created when its user sends it, and the next one is scheduled when it finishes.
Both hand out (request, pinned replica or None) in time order and keep every request made.
"""

from __future__ import annotations

import bisect
import heapq
import random
from dataclasses import dataclass

from loadtests.sim.trace import ClosedLoop, Trace, TwoClassTrace

__all__ = ["OpenSource", "SimRequest", "UserSource", "make_source"]

_NEVER = float("inf")


@dataclass(slots=True)
class SimRequest:
    """One simulated request, mutated as the simulation runs (first token, done). Times in
    simulated seconds. Measured requests are `loadtests.locust.records.RequestRecord`, a different thing:
    frozen, from a real stream."""

    arrival: float
    prompt_tokens: int
    output_tokens: int
    replica: int = -1
    user: int = -1  # closed-loop traces: who sent it
    first_token: float | None = None
    done: float | None = None
    interactive: bool = False  # two-class traces: the latency class

    @property
    def ttft(self) -> float | None:
        return None if self.first_token is None else self.first_token - self.arrival

    @property
    def tpot(self) -> float | None:
        if self.done is None or self.first_token is None or self.output_tokens < 2:
            return None
        return (self.done - self.first_token) / (self.output_tokens - 1)


class OpenSource:
    def __init__(self, trace: Trace | TwoClassTrace, seed: int) -> None:
        if isinstance(trace, TwoClassTrace):
            inter = [
                SimRequest(a.at, a.prompt_tokens, a.output_tokens, interactive=True)
                for a in trace.interactive.arrivals(seed)
            ]
            batch = [
                SimRequest(a.at, a.prompt_tokens, a.output_tokens) for a in trace.batch.arrivals(seed + 1)
            ]
            self.records = sorted(inter + batch, key=lambda q: q.arrival)
        else:
            self.records = [SimRequest(a.at, a.prompt_tokens, a.output_tokens) for a in trace.arrivals(seed)]
        self._next = 0

    def next_at(self) -> float:
        return self.records[self._next].arrival if self._next < len(self.records) else _NEVER

    def take(self, t: float) -> tuple[SimRequest, int | None] | None:
        q = self.records[self._next]
        self._next += 1
        return q, None

    def finished(self, q: SimRequest, t: float) -> None:
        pass


class UserSource:
    def __init__(self, trace: ClosedLoop, seed: int, replicas: int) -> None:
        self.records: list[SimRequest] = []
        self._trace = trace
        self._rng = random.Random(seed)
        self._pin = trace.pinning(replicas, seed)
        bounds = trace.bounds()
        self._starts = [start for _, start, _ in bounds]  # phase starts still to come
        self._ends = [end for _, _, end in bounds]
        self._users = [p.users for p in trace.phases]
        self._heap: list[tuple[float, int]] = []  # (send time, user)
        self._live: set[int] = set()  # users thinking or waiting for an answer

    def next_at(self) -> float:
        return min(self._heap[0][0] if self._heap else _NEVER, self._starts[0] if self._starts else _NEVER)

    def take(self, t: float) -> tuple[SimRequest, int | None] | None:
        if self._starts and self._starts[0] <= t:  # a phase starts: its users not yet live begin thinking
            self._starts.pop(0)
            for user in range(self._users_at(t)):
                self._schedule(user, t)
            return None
        _, user = heapq.heappop(self._heap)
        if user >= self._users_at(t):  # the phase has fewer users now: this one stops
            self._live.discard(user)
            return None
        out = self._rng.randint(self._trace.out_min, self._trace.out_max)
        q = SimRequest(t, self._trace.prompt_tokens, out, user=user)
        self.records.append(q)
        return q, None if self._pin is None else self._pin[user]

    def finished(self, q: SimRequest, t: float) -> None:
        self._live.discard(q.user)
        if q.user < self._users_at(t):
            self._schedule(q.user, t)

    def _users_at(self, t: float) -> int:
        """Users of the phase running at t (0 after the last one)."""
        i = bisect.bisect_right(self._ends, t)
        return self._users[i] if i < len(self._users) else 0

    def _schedule(self, user: int, t: float) -> None:
        if user not in self._live:
            self._live.add(user)
            think = self._trace.think_s
            if not self._trace.fixed_think:
                think = self._rng.expovariate(1 / think)
            heapq.heappush(self._heap, (t + think, user))


def make_source(
    trace: Trace | ClosedLoop | TwoClassTrace, seed: int, replicas: int
) -> OpenSource | UserSource:
    if isinstance(trace, ClosedLoop):
        return UserSource(trace, seed, replicas)
    return OpenSource(trace, seed)
