"""Class routing end to end, through Ray Serve's own request router: the real app (2 CPU replicas of
the patched engine, tiny trained pair), specflip's router configured as the replica deployment's
`request_router_config`, a two-class Locust run (real Locust, weighted user classes).

The fleet is made mixed with the override control (replica A ON, B OFF); then the modes are
swapped and new interactive requests must follow the ON mode to the other replica. With both
replicas ON, requests sharing a prompt prefix go back to the replica that had it (prefix affinity).

Its own app and Ray: it lives outside tests/deployments, whose package-wide app has Ray up."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from deployments.defaults import cpu_demo_config
from deployments.local import LocalApp, run_local, wait_until
from loadtests.locust.config import LoadConfig
from loadtests.locust.run import run_locust
from tests.deployments.conftest import MODEL, TOKEN, free_port, haproxy_config
from tests.prom import total
from tests.ray_metrics import wait_for_export

pytestmark = pytest.mark.serve
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def app(model_pair: Any) -> Iterator[LocalApp]:
    # the rule never flips (policy off): modes move only by override, so the test sets the fleet
    config = cpu_demo_config(
        (model_pair.target, model_pair.draft),
        policy={"enabled": False, "tick_s": 0.25},
        replicas={"tick_s": 0.25},
        serve={"control_token": TOKEN},
        # generous staleness: a 2-core CI box can delay the controller's stats reads by seconds
        routing={"class_routing": True, "stats_period_s": 0.2, "stale_after_s": 10.0, "max_imbalance": 8},
    )
    assert config.class_routing
    with run_local(
        config, host="127.0.0.1", port=free_port(), num_cpus=4, worker_pythonpath=str(ROOT)
    ) as local:
        yield local


def test_haproxy_waits_for_the_body_and_forwards_it_to_the_router(app: LocalApp) -> None:
    """Class routing reads the body (service_tier, max_tokens, the prompt for affinity): `specflip
    serve` switches the forwarding on for this config only (deployments.config.serve_env)."""
    haproxy = haproxy_config()
    assert "http-request wait-for-body" in haproxy


def _modes(app: LocalApp) -> dict[str, str]:
    return {r["replica_id"]: r["mode"] for r in app.client.replicas()}


def _set_fleet(app: LocalApp, on: str, off: str) -> None:
    assert app.client.send_override("on", on).status_code == 200
    assert app.client.send_override("off", off).status_code == 200
    wait_until(lambda: _modes(app) == {on: "on", off: "off"}, 30, why=f"{on} ON, {off} OFF")


def _interactive(app: LocalApp) -> httpx.Response:
    body = {"model": MODEL, "prompt": "def add(a, b):", "max_tokens": 8, "temperature": 0}
    r = app.client.post("/v1/completions", body, headers={"x-specflip-class": "interactive"})
    assert r.status_code == 200, r.text
    return r


def _routed_total(metrics: str, cls: str, mode: str) -> float:
    """Routing decisions of the request router (it pushes its counts to the policy actor)."""
    return total(metrics, "specflip_routed_requests_total", **{"class": cls, "mode": mode})


def test_interactive_requests_land_on_on_replicas_and_follow_a_flip(app: LocalApp, tmp_path: Path) -> None:
    a, b = sorted(_modes(app))
    _set_fleet(app, on=a, off=b)
    # the router sees the new modes once Serve has read the replicas' routing stats
    wait_until(lambda: _interactive(app).headers.get("x-specflip-replica") == a, 30, why="router sees A ON")

    # a two-class Locust run over the mixed fleet: 2 interactive users, 2 batch users
    cfg = LoadConfig(
        model=MODEL,
        api="completions",
        input_len=16,
        output_len=12,
        shape="fixed:users=4,duration=15",
    )
    run = run_locust(
        app.base,
        cfg,
        tmp_path / "two-class",
        locustfile=ROOT / "loadtests" / "locust" / "two_class.py",
        env={"SPECFLIP_LT_INTERACTIVE_WEIGHT": "1", "SPECFLIP_LT_BATCH_WEIGHT": "1"},
    )
    done = [r for r in run.records if r.ok]
    by_class = Counter(r.request_class for r in done)
    assert by_class["interactive"] >= 5 and by_class["batch"] >= 5, by_class
    # every interactive request went to the ON replica; batch ones to the OFF one (4 users in
    # flight never exceed max_imbalance, so no batch request had reason to spill onto A)
    assert {(r.replica, r.mode) for r in done if r.request_class == "interactive"} == {(a, "on")}
    assert {(r.replica, r.mode) for r in done if r.request_class == "batch"} == {(b, "off")}
    assert _modes(app) == {a: "on", b: "off"}  # the fleet stayed mixed throughout

    # status and metrics count what was routed, per class and mode, as the router last pushed it
    time.sleep(1.5)  # the router pushes its counts once a second
    status = app.client.get("/specflip/status").json()["routing"]
    assert status["class_routing"] is True
    assert status["by_class_and_mode"]["interactive"]["on"] >= by_class["interactive"]
    assert status["by_class_and_mode"]["batch"]["off"] >= by_class["batch"]
    metrics = app.client.metrics()
    assert _routed_total(metrics, "interactive", "on") >= by_class["interactive"]
    assert _routed_total(metrics, "interactive", "off") == 0
    # what the replicas served, per class and mode: Ray's metrics export (each replica records its own)
    served = "ray_specflip_served_requests_total"
    wait_for_export(
        lambda t: (
            total(t, served, **{"class": "interactive", "mode": "on"}) >= by_class["interactive"]
            and total(t, served, **{"class": "batch", "mode": "off"}) >= by_class["batch"]
        ),
        why="interactive requests served ON and batch ones OFF",
    )

    # flip the fleet: new interactive requests go where speculation is now ON
    _set_fleet(app, on=b, off=a)
    wait_until(lambda: _interactive(app).headers.get("x-specflip-replica") == b, 30, why="router sees B ON")
    after = [_interactive(app) for _ in range(6)]
    assert {(r.headers["x-specflip-replica"], r.headers["x-specflip-mode"]) for r in after} == {(b, "on")}
    assert {r.headers["x-specflip-class"] for r in after} == {"interactive"}


def test_requests_sharing_a_prefix_go_back_to_the_replica_that_had_it(app: LocalApp) -> None:
    a, b = sorted(_modes(app))
    for replica in (a, b):
        assert app.client.send_override("on", replica).status_code == 200
    wait_until(lambda: set(_modes(app).values()) == {"on"}, 30, why="both replicas ON")
    time.sleep(1.0)  # the router's view of the stats: both ON
    before = app.client.get("/specflip/status").json()["routing"]["prefix_affinity"]
    shared = "# utilities for parsing the config file of the service\nimport os\nimport sys\n\n"
    replicas = []
    for i in range(12):  # one at a time: every replica idle, so only affinity decides
        body = {"model": MODEL, "prompt": f"{shared}def helper_{i}(x):", "max_tokens": 4, "temperature": 0}
        r = app.client.post("/v1/completions", body, headers={"x-specflip-class": "interactive"})
        assert r.status_code == 200, r.text
        replicas.append(r.headers["x-specflip-replica"])
    # without affinity two idle ON replicas split requests at random (all 12 on one: p = 2^-11)
    assert len(set(replicas)) == 1, replicas
    time.sleep(1.5)  # the router pushes its counts once a second
    after = app.client.get("/specflip/status").json()["routing"]["prefix_affinity"]
    assert after["hits"] - before["hits"] >= 11 and after["misses"] - before["misses"] <= 1, (before, after)
    assert total(app.client.metrics(), "specflip_routed_prefix_total", result="hit") >= 11
