"""The control routes (every replica's) keep their policy
actor across failed calls (real Ray actors, no Serve): a call that times out leaves the same
healthy actor in place, and an actor Ray restarts is the same actor, counted. Only an actor that
is gone for good is created anew."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterator

import pytest

from deployments.config import POLICY_NAMESPACE, SpecFlipConfig
from deployments.http.control_routes import ControlRoutes
from policy.actor import SpeculationPolicy, get_or_create_policy_actor
from policy.types import FleetStatus
from tests.local_ray import local_ray

ray = pytest.importorskip("ray")


class SlowStatusPolicy(SpeculationPolicy):
    """Failure injection: a status call that takes longer than the control routes wait."""

    async def status(self) -> FleetStatus:
        await asyncio.sleep(8)
        return await super().status()


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[None]:
    with local_ray():
        yield


def _routes(name: str) -> ControlRoutes:
    config = SpecFlipConfig.parse({"model": {"path": "/nonexistent"}, "policy": {"actor_name": name}})
    return ControlRoutes(config)


def test_a_timed_out_status_call_keeps_the_same_healthy_actor(ray_cluster: None) -> None:
    name = f"policy-{uuid.uuid4().hex[:8]}"
    slow = get_or_create_policy_actor(
        name,
        SpecFlipConfig.parse({"model": {"path": "/x"}}).policy_config(),
        namespace=POLICY_NAMESPACE,
        actor_cls=SlowStatusPolicy,
    )
    assert ray.get(slow.metrics_text.remote(), timeout=300)  # started (a loaded host takes a while)
    routes = _routes(name)  # finds the existing (slow) actor by name
    handle = routes._policy
    actor_id = ray.get_actor(name, namespace=POLICY_NAMESPACE)._actor_id
    with pytest.raises(TimeoutError):
        asyncio.run(routes._ask_policy("status"))
    assert routes._policy is handle, "the control routes dropped their handle after a timeout"
    assert ray.get_actor(name, namespace=POLICY_NAMESPACE)._actor_id == actor_id
    assert ray.get(slow.metrics_text.remote(), timeout=30)  # still alive and answering


def test_a_restarted_actor_is_the_same_one_and_counted_and_a_killed_one_is_recreated(
    ray_cluster: None,
) -> None:
    name = f"policy-{uuid.uuid4().hex[:8]}"
    routes = _routes(name)
    first = _eventually(lambda: _status(routes))
    assert first.restarted is False and asyncio.run(routes.policy_restarts()) == 0
    actor_id = ray.get_actor(name, namespace=POLICY_NAMESPACE)._actor_id
    ray.kill(
        ray.get_actor(name, namespace=POLICY_NAMESPACE), no_restart=False
    )  # a crash: Ray restarts it in place

    # ray.kill is asynchronous: a call may still reach the old instance; wait for the restarted one
    after = _eventually(lambda: _restarted(_status(routes)))
    assert after.restarted is True
    assert ray.get_actor(name, namespace=POLICY_NAMESPACE)._actor_id == actor_id
    assert asyncio.run(routes.policy_restarts()) == 1
    ray.kill(
        ray.get_actor(name, namespace=POLICY_NAMESPACE), no_restart=True
    )  # gone for good: the next call creates a new one
    with pytest.raises(Exception):  # noqa: B017 - whatever Ray raises for a dead actor
        asyncio.run(routes._ask_policy("status"))
    fresh = _eventually(lambda: _status(routes))
    assert fresh.restarted is False and ray.get_actor(name, namespace=POLICY_NAMESPACE)._actor_id != actor_id


def _status(routes: ControlRoutes) -> FleetStatus | None:
    try:
        return asyncio.run(routes._ask_policy("status"))
    except Exception:  # starting or restarting: not yet
        return None


def _restarted(status: FleetStatus | None) -> FleetStatus | None:
    return status if status is not None and status.restarted else None


def _eventually(what: Callable[[], FleetStatus | None], timeout_s: float = 300) -> FleetStatus:
    deadline = time.monotonic() + timeout_s
    while (value := what()) is None:
        assert time.monotonic() < deadline, "the policy actor did not answer"
        time.sleep(0.5)
    return value
