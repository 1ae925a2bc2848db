"""The real Ray actor on CPU: register/report/decide round trips, TTL expiry, overrides,
metrics, and a kill mid-stream (clients fall back locally, the restarted actor resumes)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterator

import pytest

from tests.local_ray import local_ray

ray = pytest.importorskip("ray")

from policy.actor import PolicyClient, SpeculationPolicy, get_or_create_policy_actor  # noqa: E402
from policy.types import (  # noqa: E402
    ClientDecision,
    DecisionSource,
    Observation,
    Override,
    PolicyConfig,
    Reason,
    SpecMode,
    UnknownReplicaError,
)

NS = "specflip-policy-tests"
ON, OFF = SpecMode.ON, SpecMode.OFF
CONFIG = PolicyConfig(tick_s=0.1, dwell_s=0, on_persist_s=0, high=32, low=12, stale_after_s=2, ttl_s=3)


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[None]:
    with local_ray(NS):
        yield


def _name() -> str:
    return f"policy-{uuid.uuid4().hex[:8]}"


def _obs(rid: str, load: int, mode: SpecMode) -> Observation:
    return Observation(rid, running=load, waiting=0, mode=mode, patched=True, accept_length=3.0)


def _until(what: Callable[[], bool], timeout_s: float, every_s: float = 0.1) -> None:
    deadline = time.monotonic() + timeout_s
    while not what():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(every_s)


def test_several_replicas_register_report_and_get_their_desired_mode_in_the_same_call(
    ray_cluster: None,
) -> None:
    name = _name()
    actor = get_or_create_policy_actor(name, CONFIG, namespace=NS)
    loads = {"hot": (100, ON), "cold": (2, ON), "idle-off": (0, OFF)}
    clients = {rid: PolicyClient(rid, name, CONFIG, namespace=NS, timeout_s=10) for rid in loads}

    first = {rid: c.report(_obs(rid, *loads[rid])) for rid, c in clients.items()}
    for rid, d in first.items():  # registered: keep running what you run until a tick decides
        assert (d.desired, d.source, d.reason) == (loads[rid][1], DecisionSource.ACTOR, Reason.NEW.value)

    actions = ray.get(actor.tick_now.remote())
    assert {(a.replica_id, a.enabled) for a in actions} == {("hot", False), ("idle-off", True)}
    second = {rid: c.report(_obs(rid, *loads[rid])) for rid, c in clients.items()}
    assert {rid: d.desired for rid, d in second.items()} == {"hot": OFF, "cold": ON, "idle-off": ON}
    assert "load 100 >= high 32" in second["hot"].reason

    again = get_or_create_policy_actor(name, CONFIG, namespace=NS)  # get_if_exists: the same actor
    status = ray.get(again.status.remote())
    assert {r.replica_id: (r.desired, r.actual) for r in status.replicas} == {
        "hot": (OFF, ON),
        "cold": (ON, ON),
        "idle-off": (ON, OFF),
    }
    assert status.ticks.ticks >= 1 and status.ticks.flips_total >= 2 and not status.restarted
    text = ray.get(actor.metrics_text.remote())
    assert 'specflip_policy_desired_mode{replica="hot"} 0.0' in text
    assert 'specflip_policy_actual_mode{replica="hot"} 1.0' in text
    assert 'specflip_policy_flips_total{replica="hot"} 1.0' in text
    assert 'specflip_policy_accept_length{replica="cold"} 3.0' in text
    assert "specflip_policy_decision_seconds_count" in text
    ray.kill(actor)


def test_replicas_that_stop_reporting_expire_after_the_ttl(ray_cluster: None) -> None:
    config = PolicyConfig(tick_s=0.1, dwell_s=0, on_persist_s=0, stale_after_s=0.5, ttl_s=1.5)
    name = _name()
    actor = get_or_create_policy_actor(name, config, namespace=NS)
    alive = PolicyClient("alive", name, config, namespace=NS, timeout_s=10)
    gone = PolicyClient("gone", name, config, namespace=NS, timeout_s=10)
    gone.report(_obs("gone", 5, ON))
    started = time.monotonic()
    while time.monotonic() - started < 2.5:  # the background tick runs meanwhile
        alive.report(_obs("alive", 5, ON))
        time.sleep(0.1)
    status = ray.get(actor.status.remote())
    assert [r.replica_id for r in status.replicas] == ["alive"]
    assert status.ticks.expired_total == 1
    with pytest.raises(UnknownReplicaError, match="unknown replica 'gone'"):
        ray.get(actor.set_override.remote("gone", Override.FORCE_ON))
    assert gone.report(_obs("gone", 5, ON)).reason == Reason.NEW.value  # reporting again re-registers
    ray.kill(actor)


def test_operator_override_wins_until_cleared(ray_cluster: None) -> None:
    name = _name()
    actor = get_or_create_policy_actor(name, CONFIG, namespace=NS)
    client = PolicyClient("r", name, CONFIG, namespace=NS, timeout_s=10)
    client.report(_obs("r", 100, ON))
    with pytest.raises(UnknownReplicaError):
        ray.get(actor.set_override.remote("nobody", Override.FORCE_OFF))
    ray.get(actor.set_override.remote("r", Override.FORCE_ON))
    ray.get(actor.tick_now.remote())
    d = client.report(_obs("r", 100, ON))
    assert (d.desired, d.overridden) == (ON, True)
    (r,) = ray.get(actor.status.remote()).replicas
    assert (r.override, r.desired, r.load) == (Override.FORCE_ON, ON, 100)
    ray.get(actor.set_override.remote("r", Override.AUTO))
    ray.get(actor.tick_now.remote())
    d = client.report(_obs("r", 100, ON))
    assert (d.desired, d.overridden) == (OFF, False)
    ray.kill(actor)


def test_a_drain_reaches_every_replica_at_its_next_report_and_the_policy_still_decides(
    ray_cluster: None,
) -> None:
    name = _name()
    actor = get_or_create_policy_actor(name, CONFIG, namespace=NS)
    clients = [PolicyClient(rid, name, CONFIG, namespace=NS, timeout_s=10) for rid in ("a", "b")]
    assert not any(c.report(_obs(c.replica_id, 1, ON)).draining for c in clients)
    ray.get(actor.drain.remote())
    decisions = [c.report(_obs(c.replica_id, 1, ON)) for c in clients]
    assert all(d.draining and d.source is DecisionSource.ACTOR for d in decisions), decisions
    assert [d.desired for d in decisions] == [ON, ON]
    ray.kill(actor)


class SlowRestartPolicy(SpeculationPolicy):
    """Failure injection: after a restart, takes 4 s to come back (a node being replaced)."""

    def __init__(self, config: PolicyConfig) -> None:
        super().__init__(config)
        if ray.get_runtime_context().was_current_actor_reconstructed:
            time.sleep(4.0)


def test_killed_actor_clients_fall_back_locally_then_the_restarted_actor_resumes(ray_cluster: None) -> None:
    name = _name()
    actor = get_or_create_policy_actor(name, CONFIG, namespace=NS, actor_cls=SlowRestartPolicy)
    sync_client = PolicyClient("hot", name, CONFIG, namespace=NS, fail_after=2, timeout_s=0.3)
    async_client = PolicyClient("cold", name, CONFIG, namespace=NS, fail_after=2, timeout_s=0.3)
    modes = {"hot": ON, "cold": OFF}
    loads = {"hot": 100, "cold": 0}
    seen: dict[str, list[DecisionSource]] = {"hot": [], "cold": []}

    def tick() -> dict[str, ClientDecision]:
        out = {
            "hot": sync_client.report(_obs("hot", loads["hot"], modes["hot"])),
            "cold": asyncio.run(async_client.report_async(_obs("cold", loads["cold"], modes["cold"]))),
        }
        for rid, d in out.items():
            modes[rid] = d.desired  # the replica applies what it is told
            seen[rid].append(d.source)
        return out

    _until(
        lambda: all(
            d.source is DecisionSource.ACTOR and d.reason != Reason.NEW.value for d in tick().values()
        ),
        30,
    )
    assert modes == {"hot": OFF, "cold": ON}  # the actor decided
    # the replicas are now told to stay; flip them back so the local rule has something to decide
    modes.update(hot=ON, cold=OFF)

    ray.kill(actor, no_restart=False)
    _until(lambda: all(d.source is DecisionSource.LOCAL_FALLBACK for d in tick().values()), 30, every_s=0.05)
    local = tick()
    assert sync_client.state.source is DecisionSource.LOCAL_FALLBACK
    assert async_client.state.consecutive_failures >= 2
    assert (local["hot"].desired, local["cold"].desired) == (OFF, ON)  # threshold on their own load
    assert "local fallback" in local["hot"].reason
    assert DecisionSource.ACTOR_CACHED in seen["hot"]  # the first failure kept the actor's last answer

    _until(lambda: all(d.source is DecisionSource.ACTOR for d in tick().values()), 60, every_s=0.2)
    status = ray.get(actor.status.remote())
    assert status.restarted and {r.replica_id for r in status.replicas} == {"hot", "cold"}
    loads.update(hot=0, cold=100)  # load moves: the restarted actor must be the one deciding
    _until(lambda: {rid: d.desired for rid, d in tick().items()} == {"hot": ON, "cold": OFF}, 30, every_s=0.2)
    assert (
        sync_client.state.source is DecisionSource.ACTOR and async_client.state.source is DecisionSource.ACTOR
    )
    ray.kill(actor)


def test_an_operator_override_outlives_an_actor_restart(ray_cluster: None) -> None:
    """Overrides live in the actor's memory; the replica carries a copy and brings it back."""
    name = _name()
    actor = get_or_create_policy_actor(name, CONFIG, namespace=NS, actor_cls=SlowRestartPolicy)
    client = PolicyClient("r", name, CONFIG, namespace=NS, fail_after=2, timeout_s=0.3)
    mode = ON

    def tick() -> ClientDecision:
        nonlocal mode
        d = client.report(_obs("r", 0, mode))  # idle: the rule alone would keep it ON
        mode = d.desired
        return d

    # The first report may outlive the client's 0.3 s timeout while the new actor starts (CI did);
    # the override needs the replica registered, so wait for an answer from the actor itself.
    _until(lambda: tick().source is DecisionSource.ACTOR, 30)
    ray.get(actor.set_override.remote("r", Override.FORCE_OFF))
    _until(lambda: tick().desired is OFF, 30)
    assert tick().source is DecisionSource.OVERRIDE  # the actor answers with the operator's word

    ray.kill(actor, no_restart=False)
    _until(lambda: tick().source is DecisionSource.LOCAL_FALLBACK, 30, every_s=0.05)
    local = tick()
    assert (local.desired, local.overridden) == (OFF, True) and "override off kept" in local.reason

    # the restarted actor takes the override back from the replica's report and answers with it
    _until(lambda: tick().source is DecisionSource.OVERRIDE, 60, every_s=0.2)
    ray.get(actor.tick_now.remote())
    back = tick()
    assert (back.desired, back.overridden) == (OFF, True)
    status = ray.get(actor.status.remote())
    assert status.restarted and status.replicas[0].override is Override.FORCE_OFF
    ray.kill(actor)


@ray.remote
class ReplicaStandIn:
    """What creates the policy actor in the app: a Serve replica, which Ray LLM places in a
    placement group that captures the actors it creates."""

    def create(self, name: str) -> str:
        actor = get_or_create_policy_actor(name, CONFIG, namespace=NS, detached=True)
        return str(ray.get(actor.status.remote(), timeout=30).config.tick_s)


def test_the_actor_outlives_the_placement_group_of_the_replica_that_created_it(ray_cluster: None) -> None:
    # a CI run lost the policy for good: the replica that created it was killed, Serve removed that
    # replica's placement group, Ray killed the actor in it and never placed its restart
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    group = placement_group([{"CPU": 1}], strategy="STRICT_PACK")
    ray.get(group.ready(), timeout=60)
    inside = PlacementGroupSchedulingStrategy(group, placement_group_capture_child_tasks=True)
    replica = ReplicaStandIn.options(num_cpus=1, scheduling_strategy=inside).remote()
    name = _name()
    assert ray.get(replica.create.remote(name), timeout=60) == str(CONFIG.tick_s)
    actor = ray.get_actor(name, namespace=NS)
    ray.kill(replica)
    remove_placement_group(group)  # what Serve does once the replica is dead
    time.sleep(2.0)
    decision = ray.get(actor.report.remote(_obs("r", 1, ON)), timeout=30)  # the same actor, alive
    assert decision.replica_id == "r" and not ray.get(actor.status.remote(), timeout=30).restarted
    ray.kill(actor, no_restart=True)
