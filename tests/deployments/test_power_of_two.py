"""deployments.routing.power_of_two.PowerOfTwoRouter outside Serve (built in this process by the compat
module's standalone_request_router): Ray's two random candidates, the less loaded one first, where
load is what a replica published plus what this router sent it since. Ray's ingress request router
takes the first replica of the first rank without probing (the HAProxy path), so this order is
the routing decision; a real-app test is in tests/deployments/test_serve_routing.py."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from types import SimpleNamespace
from typing import Any

from deployments.ray_compat import standalone_request_router
from deployments.routing.power_of_two import PowerOfTwoRouter
from policy.routing import ReplicaStats
from policy.types import SpecMode


async def _queue_len(**_: Any) -> int:  # Serve probes new replicas once; nothing here reads it
    return 0


def _fleet(replica_id: Any, loads: list[int], at: float) -> list[Any]:
    return [
        SimpleNamespace(
            replica_id=replica_id(f"r{i}"),
            routing_stats=ReplicaStats(SpecMode.ON, load, 0, 2.5, 0.01, at).to_routing_stats(),
            max_ongoing_requests=64,
            node_id="node",
            availability_zone=None,
            multiplexed_model_ids=set(),
            get_queue_len=_queue_len,
        )
        for i, load in enumerate(loads)
    ]


def _firsts(loads: list[int], picks: int, at: float | None = None) -> Counter[str]:
    router, replica_id = standalone_request_router(PowerOfTwoRouter)
    fleet = _fleet(replica_id, loads, time.time() if at is None else at)

    async def run() -> Counter[str]:
        router.update_replicas(fleet)
        firsts: Counter[str] = Counter()
        for _ in range(picks):
            ranks = await router.choose_replicas(fleet, None)
            firsts[ranks[0][0].replica_id.unique_id] += 1
        return firsts

    return asyncio.run(run())


def test_the_idle_replica_comes_first_while_the_other_is_busy() -> None:
    """Issue 31, finding 6: round robin sent every other request to a replica busy with a
    minute-long one. A replica that published 64 running requests is never first against an idle one
    within 20 picks (each pick counts as one more request on the idle one)."""
    assert _firsts([64, 0], 20) == Counter({"r1": 20})
    # one long request against one pick just made (maybe done already): the published one weighs more
    assert _firsts([1, 0], 2) == Counter({"r1": 2})


def test_picks_since_the_last_reading_count_as_load() -> None:
    """Stats lag a period behind: within it, requests alternate instead of piling onto the replica
    that looked idle; a reading taken after the picks replaces them."""
    assert _firsts([0, 0], 10) == Counter({"r0": 5, "r1": 5})
    assert _firsts([3, 0], 9) == Counter({"r0": 3, "r1": 6})
    assert _firsts([1, 0], 10, at=time.time() + 60) == Counter({"r1": 10})
