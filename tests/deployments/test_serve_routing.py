"""Routing with class routing off, on the real app (2 CPU replicas behind Serve's HAProxy and Ray's
ingress request router): a small request goes to the idle replica while the other is busy with a
long one (with Ray's round robin every other small request queued behind a
60-s one). Unit tests of the router: tests/deployments/test_power_of_two.py."""

from __future__ import annotations

import time

import httpx
import pytest

from deployments.local import LocalApp, wait_until
from tests.deployments.conftest import MODEL, haproxy_config

pytestmark = pytest.mark.serve
TEXT = "/v1/completions"


def _running(app: LocalApp, replica: str) -> int:
    for r in app.client.status().get("replicas") or []:
        if r.get("replica_id") == replica:
            return int(r.get("running") or 0) + int(r.get("waiting") or 0)
    return 0


def test_haproxy_asks_the_router_without_waiting_for_the_body(app: LocalApp) -> None:
    """Class routing off: the body is not forwarded (RAY_SERVE_INGRESS_REQUEST_ROUTER_FORWARD_BODY
    0 from `specflip serve`), so HAProxy calls the router as soon as the headers are in, rather
    than buffering every POST's body first; the default router needs none (the test below)."""
    assert not app.config.class_routing
    haproxy = haproxy_config()
    assert "lua.route_via_ingress_request_router" in haproxy  # the router still picks the replica
    assert "wait-for-body" not in haproxy


def test_small_requests_go_to_the_idle_replica_while_the_other_runs_a_long_one(app: LocalApp) -> None:
    long_body = {
        "model": MODEL,
        "prompt": "def main():",
        "max_tokens": 1800,
        "ignore_eos": True,
        "stream": True,
    }
    small: list[tuple[str, float]] = []
    with (
        httpx.Client(base_url=app.base, timeout=300) as http,
        http.stream("POST", TEXT, json=long_body) as long_stream,
    ):
        assert long_stream.status_code == 200
        busy = long_stream.headers["x-specflip-replica"]
        lines = long_stream.iter_lines()
        next(line for line in lines if line.startswith("data: "))  # generating
        # the replica publishes its load every routing.stats_period_s (0.25 s) from its last tick
        wait_until(lambda: _running(app, busy) > 0, 30, why=f"{busy} reporting its long request")
        time.sleep(1.0)
        for i in range(4):
            time.sleep(0.5)  # small requests now and then, not back to back
            started = time.monotonic()
            r = http.post(TEXT, json={"model": MODEL, "prompt": f"x = {i}", "max_tokens": 4})
            assert r.status_code == 200, r.text
            small.append((r.headers["x-specflip-replica"], time.monotonic() - started))
        still_running = _running(app, busy) > 0
    assert still_running, "the long request ended before the small ones were sent: the test proves nothing"
    assert all(replica != busy for replica, _ in small), (busy, small)
    print(f"long request on {busy}; small requests (replica, seconds): {small}")
