"""`GET /specflip/status` and `GET /metrics` of a replica cost at most two round trips each: one
call to the real policy actor (the fleet and the routing totals read in one call) and one read of
Ray's GCS actor table (the actor's restarts). No HTTP metric families travel to the actor: Ray's
metrics agent exports them (deployments.http.metrics). The actor and the GCS are real (a local
Ray); the counters wrap them without changing what they answer."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import ray

from deployments.config import POLICY_NAMESPACE, SpecFlipConfig
from deployments.http import control_routes
from deployments.http.control_routes import ControlRoutes
from deployments.http.metrics import HttpMetrics
from deployments.routing.journal import JOURNAL, Routed, routed_families
from policy.routing import RankReason, RequestClass
from policy.types import Observation, SpecMode
from tests.local_ray import local_ray


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[None]:
    with local_ray():
        yield


class _Counted:
    """The real actor handle, counting the calls made through it."""

    def __init__(self, handle: Any, calls: list[str]) -> None:
        self._handle, self._calls = handle, calls

    def __getattr__(self, method: str) -> Any:
        real = getattr(self._handle, method)
        calls = self._calls

        class _Method:
            def remote(self, *args: Any) -> Any:
                calls.append(method)
                return real.remote(*args)

        return _Method()


def _routes(monkeypatch: pytest.MonkeyPatch, calls: list[str]) -> ControlRoutes:
    config = SpecFlipConfig.model_validate(
        {"model": {"path": "/m"}, "policy": {"actor_name": f"specflip-policy-{uuid.uuid4().hex[:8]}"}}
    )
    routes = ControlRoutes(config, HttpMetrics(), replica_id="replica-a")
    routes._policy = _Counted(routes._policy, calls)
    real_restarts = control_routes.actor_restarts

    def counted_restarts(handle: Any) -> int | None:
        calls.append("gcs")
        return real_restarts(handle._handle)

    monkeypatch.setattr(control_routes, "actor_restarts", counted_restarts)
    return routes


def test_status_asks_the_actor_once_and_the_gcs_once(
    ray_cluster: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    routes = _routes(monkeypatch, calls)
    JOURNAL.record(Routed("replica-a", "on", RequestClass.INTERACTIVE, RankReason.PREFERRED))
    report = Observation("replica-a", 0, 0, SpecMode.ON, True, None)
    ray.get(routes._policy._handle.report.remote(report))
    ray.get(routes._policy._handle.push_metrics.remote("router:1", routed_families()))  # the router's push
    response = asyncio.run(routes.status())
    assert response.status_code == 200
    assert sorted(calls) == ["gcs", "status_view"], calls
    document = json.loads(bytes(response.body))
    assert document["policy"]["restarts"] == 0
    assert document["routing"]["by_class_and_mode"]["interactive"]["on"] >= 1  # the push reached the sums
    ray.kill(ray.get_actor(routes.config.policy.actor_name, namespace=POLICY_NAMESPACE))


def test_metrics_read_in_one_actor_call_without_http_families(
    ray_cluster: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    routes = _routes(monkeypatch, calls)
    routes.metrics.requests.labels("/v1/completions", "200").inc()
    report = Observation("replica-a", 0, 0, SpecMode.ON, True, None)
    ray.get(routes._policy._handle.report.remote(report))
    text = bytes(asyncio.run(routes.metrics_text()).body).decode()
    assert sorted(calls) == ["gcs", "metrics_text"], calls
    assert 'specflip_policy_actual_mode{replica="replica-a"} 1.0' in text  # the policy's own families
    assert "specflip_requests" not in text and "specflip_served" not in text  # no HTTP families shipped
    ray.kill(ray.get_actor(routes.config.policy.actor_name, namespace=POLICY_NAMESPACE))
