"""`PowerOfTwoRouter`: the replicas' request router when class routing is off: Ray Serve's power
of two choices, ordered by the load each replica publishes.

Ray's direct-streaming builder pins Serve's `RoundRobinRouter` unless the deployment names a
router: a small request then waits behind a minute-long one while another replica idles.
Serve's own `PowerOfTwoChoicesRequestRouter` is no fix by itself on this path: HAProxy asks
Ray's ingress request router (`LLMRouter`), which picks through `handle.choose_replica(...,
_reserve=False)`, and that takes the first replica of the first rank the router returns, with no
queue-length probe; Serve's power of two would be a random pick there. So this router keeps Ray's
choice of candidates (`PowerOfTwoChoicesRequestRouter.choose_replicas`: two at random, aware of
multiplexing and locality) and puts the less loaded one first. A replica's load: the running +
waiting requests it published in its routing stats (`SpecFlipServer.record_routing_stats`, every
`routing.stats_period_s`), plus the requests this router sent it after that reading (or in the
last `_UNSEEN_S` without one). On a reserving handle call Serve still probes both and takes the
shorter queue, as it always did.

Serve imports this module in the process that routes (Ray's LLMRouter); it holds no state outside
the router instance.
"""

from __future__ import annotations

import collections
import time
from typing import Any

from ray.serve.request_router import PendingRequest, ReplicaID, RunningReplica

from deployments.ray_compat import PowerOfTwoChoicesRequestRouter
from policy.routing import ReplicaStats

__all__ = ["PowerOfTwoRouter"]

_UNSEEN_S = 2.0  # picks of a replica without stats count this long
_PICKS_KEPT = 4096  # recent picks remembered per replica


class PowerOfTwoRouter(PowerOfTwoChoicesRequestRouter):
    def initialize_state(self, **kwargs: Any) -> None:
        self._clock = time.time  # wall clock: a replica's stats carry the wall-clock time of their reading
        self._picks: dict[ReplicaID, collections.deque[float]] = {}

    async def choose_replicas(
        self, candidate_replicas: list[RunningReplica], pending_request: PendingRequest | None = None
    ) -> list[list[RunningReplica]]:
        ranks: list[list[RunningReplica]] = await super().choose_replicas(candidate_replicas, pending_request)
        if not ranks or not ranks[0]:
            return ranks
        now = self._clock()
        # stable sort: equal loads keep Ray's random order; between a replica's published requests
        # and this router's guesses (picks since a reading, which may be done already), trust the former
        pair = sorted(ranks[0], key=lambda r: self.load(r, now))
        self._picks.setdefault(pair[0].replica_id, collections.deque(maxlen=_PICKS_KEPT)).append(now)
        return [pair, *ranks[1:]]

    def load(self, replica: RunningReplica, now: float) -> tuple[int, int]:
        """(requests on `replica` as it last published them plus those sent it since, the published ones)."""
        stats = ReplicaStats.from_routing_stats(replica.routing_stats)
        since = stats.at if stats is not None else now - _UNSEEN_S
        published = stats.load if stats is not None else 0
        picks = self._picks.get(replica.replica_id, ())
        return published + sum(1 for t in picks if t > since), published
