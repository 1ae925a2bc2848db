"""deployments.routing.router.SpecFlipRouter outside Serve (Ray's RequestRouter built in this process by
the compat module's standalone_request_router): the prompt text it matches, and prefix-cache
affinity through Ray's prefix tree without pulling a request off its class's mode."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

import pytest

from deployments.ray_compat import standalone_request_router
from deployments.routing.journal import routed_families
from deployments.routing.router import SpecFlipRouter, prompt_text
from policy.routing import ReplicaStats
from policy.types import SpecMode

SYSTEM = "You are a careful assistant. Answer in one short paragraph and cite the manual. " * 4


@pytest.mark.parametrize(
    ("body", "text"),
    [
        (SimpleNamespace(prompt="def f(x):"), "def f(x):"),
        (SimpleNamespace(prompt=["ab", "cd"]), "abcd"),
        (SimpleNamespace(prompt=[1, 2, 3]), ""),  # token ids: nothing to match as text
        (
            SimpleNamespace(
                messages=[{"role": "system", "content": "sys"}, {"role": "user", "content": "q"}]
            ),
            "sysq",
        ),
        (
            SimpleNamespace(
                messages=[{"role": "user", "content": [{"type": "text", "text": "a"}, {"text": "b"}]}]
            ),
            "ab",
        ),
        (SimpleNamespace(messages=[SimpleNamespace(role="user", content="obj")]), "obj"),
        (SimpleNamespace(prompt="x" * 50), "x" * 16),  # cut at the limit
        (None, ""),
    ],
)
def test_prompt_text(body: Any, text: str) -> None:
    assert prompt_text(body, 16) == text


def _fleet(replica_id: Any, modes: list[SpecMode], loads: list[int]) -> list[Any]:
    now = time.time()
    return [
        SimpleNamespace(
            replica_id=replica_id(f"r{i}"),
            routing_stats=ReplicaStats(mode, load, 0, 2.5, 0.01, now).to_routing_stats(),
            max_ongoing_requests=64,
        )
        for i, (mode, load) in enumerate(zip(modes, loads, strict=True))
    ]


def _counted() -> dict[str, float]:
    """The router's counters as it pushes them to the policy actor (`/metrics`), by sample."""
    return {
        s.name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items())) + "}": s.value
        for family in routed_families()
        for s in family.samples
    }


def _counted_since(before: dict[str, float]) -> dict[str, float]:
    """The counters that moved since `before`, by how much."""
    return {k: v - before.get(k, 0) for k, v in _counted().items() if v != before.get(k, 0)}


HIT, MISS = 'specflip_routed_prefix_total{result="hit"}', 'specflip_routed_prefix_total{result="miss"}'


def _pending(prompt: str, cls: str, request_id: str) -> Any:
    from ray.serve.request_router import PendingRequest

    request = SimpleNamespace(model="m", prompt=prompt, max_tokens=8, stream=True, priority=None)
    headers = {"x-specflip-class": cls}
    metadata = SimpleNamespace(internal_request_id=request_id)
    return PendingRequest(args=[request, SimpleNamespace(headers=headers)], kwargs={}, metadata=metadata)  # type: ignore[arg-type]


def test_a_shared_prefix_goes_back_to_its_replica_within_the_class_mode() -> None:
    router, replica_id = standalone_request_router(SpecFlipRouter, routing={"affinity_max_gap": 4})
    on_a, on_b, off_c = fleet = _fleet(replica_id, [SpecMode.ON, SpecMode.ON, SpecMode.OFF], [1, 2, 0])

    async def run() -> None:
        first = _pending(SYSTEM + "Question one?", "interactive", "req-1")
        ranks, _, _ = router.rank_candidates(fleet, first)
        assert ranks[0] == [on_a, on_b]  # nothing known yet: least loaded ON first
        # Serve took the second ON replica (say its queue was shorter): its prefix is now known there
        before = _counted()
        router.on_request_routed(first, on_b.replica_id, None)
        assert _counted_since(before)[MISS] == 1 and HIT not in _counted_since(before)

        again = _pending(SYSTEM + "Question two?", "interactive", "req-2")
        ranks, _, _ = router.rank_candidates(fleet, again)
        assert ranks == [[on_b], [on_a], [off_c]]  # the holder alone first, then the rest
        before = _counted()
        router.on_request_routed(again, on_b.replica_id, None)
        assert _counted_since(before)[HIT] == 1 and MISS not in _counted_since(before)

        # a batch request with the same prefix still goes to the OFF replica: no fight with the class
        batch = _pending(SYSTEM + "Summarise everything.", "batch", "req-3")
        ranks, _, _ = router.rank_candidates(fleet, batch)
        assert ranks[0] == [off_c]
        # an unrelated prompt has no holder
        other = _pending("Completely different text, no shared start.", "interactive", "req-4")
        assert router.rank_candidates(fleet, other)[0][0] == [on_a, on_b]

    asyncio.run(run())


def test_a_busy_holder_gives_way_and_a_gone_replica_is_forgotten(monkeypatch: pytest.MonkeyPatch) -> None:
    router, replica_id = standalone_request_router(SpecFlipRouter, routing={"affinity_max_gap": 4})
    on_a, on_b, off_c = _fleet(replica_id, [SpecMode.ON, SpecMode.ON, SpecMode.OFF], [0, 9, 0])

    async def no_probe(*_: Any, **__: Any) -> list[Any]:
        return []

    monkeypatch.setattr(router, "_probe_queue_lens", no_probe)

    async def run() -> None:
        router.on_request_routed(_pending(SYSTEM + "q1", "interactive", "r1"), on_b.replica_id, None)
        ranks, _, _ = router.rank_candidates(
            [on_a, on_b, off_c], _pending(SYSTEM + "q2", "interactive", "r2")
        )
        assert ranks[0] == [on_a, on_b]  # the holder carries 9 > 0 + 4: plain least-loaded ranking
        router.update_replicas([on_a, off_c])  # on_b left the deployment
        assert str(on_b.replica_id.unique_id) not in router._tree.tenant_to_char_count

    asyncio.run(run())


def test_a_failing_prefix_tree_never_fails_a_routing_decision() -> None:
    router, replica_id = standalone_request_router(SpecFlipRouter)
    fleet = _fleet(replica_id, [SpecMode.ON, SpecMode.OFF], [0, 0])

    class BrokenTree:  # a fake, to inject the failure
        tenant_to_char_count: dict[str, int] = {}

        def prefix_match(self, *_: Any) -> Any:
            raise RuntimeError("injected")

    router._tree = BrokenTree()

    async def run() -> None:
        ranks, _, _ = router.rank_candidates(fleet, _pending(SYSTEM, "interactive", "b1"))
        assert ranks == [[fleet[0]], [fleet[1]]]  # the class ranking, without affinity
        assert router._tree is None  # switched off after the failure
        before = _counted()
        router.on_request_routed(_pending(SYSTEM, "interactive", "b2"), fleet[0].replica_id, None)
        moved = _counted_since(before)  # routed and counted, but neither a prefix hit nor a miss
        assert sum(v for k, v in moved.items() if k.startswith("specflip_routed_requests_total")) == 1
        assert HIT not in moved and MISS not in moved

    asyncio.run(run())


def test_the_prefix_holders_of_requests_never_routed_are_dropped_oldest_first() -> None:
    """Rankings Serve never followed by a pick (cancelled requests) are forgotten beyond 4,096, the
    oldest first: a request still in flight keeps what its ranking saw (it used to lose it when
    the table was cleared whole)."""
    router, replica_id = standalone_request_router(SpecFlipRouter, routing={"affinity_max_gap": 4})
    on_a, on_b, off_c = fleet = _fleet(replica_id, [SpecMode.ON, SpecMode.ON, SpecMode.OFF], [1, 2, 0])

    async def run() -> None:
        router.on_request_routed(_pending(SYSTEM + "seed", "interactive", "seed"), on_b.replica_id, None)
        for i in range(4096):  # rankings without a pick
            router.rank_candidates(fleet, _pending(SYSTEM + f"q{i}", "interactive", f"gone-{i}"))
        live = _pending(SYSTEM + "the live one", "interactive", "live")
        router.rank_candidates(fleet, live)
        assert "live" in router._holders and "gone-0" not in router._holders and len(router._holders) == 4096
        before = _counted()
        router.on_request_routed(live, on_b.replica_id, None)
        assert _counted_since(before)[HIT] == 1

    asyncio.run(run())


def test_a_routed_request_is_classified_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """choose_replicas (Ray's ingress router path) ranks and records with one reading of the class."""
    router, replica_id = standalone_request_router(SpecFlipRouter)
    fleet = _fleet(replica_id, [SpecMode.ON, SpecMode.OFF], [0, 0])
    calls: list[str] = []
    # the globals the router's code runs with (an app build earlier in the session can leave another
    # copy of its module in sys.modules: patch where the class looks, not where an import finds)
    module_globals = SpecFlipRouter.rank_candidates.__globals__
    real = module_globals["classify"]
    monkeypatch.setitem(module_globals, "classify", lambda *a: calls.append("classify") or real(*a))

    async def run() -> None:
        router.update_replicas(fleet)  # type: ignore[arg-type]
        before = _counted()
        ranks = await router.choose_replicas(fleet, _pending("Summarise it.", "batch", "req-once"))
        assert ranks[0] == [fleet[1]]  # batch -> OFF
        assert _counted_since(before)['specflip_routed_requests_total{class="batch",mode="off"}'] == 1

    asyncio.run(run())
    assert calls == ["classify"]
