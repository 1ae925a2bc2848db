"""Faults on a fresh app of their own: a replica killed under streaming load, then a shutdown.

Apart from tests/faults/test_faults.py (the policy actor and the Serve controller killed): in two
of three full runs where a replica was killed on the app whose policy actor and Serve controller
had been killed before, the replacement never registered with the policy, the status kept showing
the dead replica as fresh for 240 s, and the drain that followed did not reach the replicas.
Cause not isolated (open; see the closing note of 2026-12-02): each fault here runs on an app no
other fault touched."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import httpx
import psutil
import pytest

from deployments.local import LocalApp, drain, wait_until
from tests.deployments.conftest import MODEL
from tests.faults.test_faults import TTL_S, _report, _run, app

pytestmark = pytest.mark.serve
__all__ = ["app"]  # the module-scoped app fixture: a fresh one for this module


def _replica_pids() -> list[int]:
    """This test's replicas: descendants of this process (other apps may run on the machine)."""
    pids = []
    for p in psutil.Process().children(recursive=True):
        try:
            if " ".join(p.cmdline()).startswith("ray::ServeReplica:specflip:SpecFlipServer"):
                pids.append(p.pid)
        except psutil.Error:
            continue
    return pids


def _serve_replicas() -> str:
    """Serve's own view of the app's replicas (states), for a failure message."""
    from ray import serve

    try:
        app = serve.status().applications["specflip"]
        return "; ".join(f"{name}: {d.replica_states}" for name, d in app.deployments.items())
    except Exception as err:  # the status itself failing says something too
        return f"serve.status() failed: {err!r}"


def test_killing_one_replica_fails_only_its_in_flight_requests_and_the_policy_forgets_it(
    app: LocalApp,
) -> None:
    old_ids = {r["replica_id"] for r in app.client.replicas()}
    pids = _replica_pids()
    assert len(pids) == 2, pids
    killed_at: list[float] = []

    def kill() -> None:
        killed_at.append(time.monotonic())
        os.kill(pids[0], signal.SIGKILL)

    gone: dict[str, float] = {}
    seen: list[dict[str, object]] = []  # the last status's replicas (said on a timeout)
    stale_sources: set[str] = set()  # what the status says of the dead replica while it is stale

    def recovered() -> None:
        def replaced() -> bool:
            try:
                replicas = app.client.replicas()
            except httpx.HTTPError:  # HAProxy sent this status call to the dead replica before it
                return False  # marked it down (a 5xx, or a reset): the load's own requests are judged below

            stale_sources.update(
                r["policy_source"] for r in replicas if r["stale"] and r["replica_id"] in old_ids
            )
            ids = {r["replica_id"] for r in replicas}
            seen[:] = [
                {k: r.get(k) for k in ("replica_id", "stale", "mode", "policy_source")} for r in replicas
            ]
            for rid in old_ids - ids:
                gone.setdefault(rid, time.monotonic())
            new = ids - old_ids
            return len(gone) == 1 and len(new) == 1 and len(ids) == 2

        try:
            wait_until(replaced, 240, every_s=0.5, why="dead replica forgotten and a new one registered")
        except TimeoutError as err:
            raise TimeoutError(
                f"{err}; old {sorted(old_ids)}, last status {seen}, {_serve_replicas()}"
            ) from None

    load, marks = _run(app, kill, recovered)
    phases = _report("replica kill", load, marks)
    # requests started "before" may still be in flight on the killed replica (checked just below)
    assert phases["after"]["failed"] == 0, phases
    # a failed request was in flight at the kill, or was sent to the dead replica in the moment before
    # HAProxy and the router took it out (HAProxy then closes the connection with no response at all:
    # nothing was generated, a retry is safe); at most the replica's share of the clients
    failures = load.failures()
    in_flight = [f for f in failures if f.started <= killed_at[0] <= f.ended]
    unanswered = [
        f
        for f in failures
        if killed_at[0] < f.started <= killed_at[0] + 2.0 and "without sending a response" in f.detail
    ]
    assert len(in_flight) + len(unanswered) == len(failures), failures
    assert len(failures) <= 4, failures
    assert all("Traceback" not in f.detail and "OOM" not in f.detail for f in failures), failures
    # forgotten within the TTL of its last report (it stopped reporting when it was killed)
    (dead,) = gone
    # a dead replica is never shown as deciding locally: its report is stale, so "stale"
    assert stale_sources == {"stale"}, stale_sources
    assert gone[dead] - killed_at[0] <= TTL_S + 5, gone[dead] - killed_at[0]
    # the replacement reports to the actor and runs the mode the policy wants for it
    (new,) = {r["replica_id"] for r in app.client.replicas()} - old_ids

    def settled() -> bool:
        mine = next(r for r in app.client.replicas() if r["replica_id"] == new)
        return mine["mode"] == mine["desired_mode"] and mine["policy_source"] == "actor" and not mine["stale"]

    wait_until(settled, 30, why="new replica in the policy's mode")


def test_a_shutdown_lets_in_flight_streams_finish_with_done(app: LocalApp) -> None:
    from ray import serve

    body = {
        "model": MODEL,
        "prompt": "def add(a, b):",
        "max_tokens": 160,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
    }
    events: list[str] = []
    first = threading.Event()

    def client() -> None:
        with (
            httpx.Client(timeout=300) as http,
            http.stream("POST", f"{app.base}/v1/completions", json=body) as r,
        ):
            for line in r.iter_lines():
                if line.startswith("data: "):
                    events.append(line[6:])
                    first.set()

    reader = threading.Thread(target=client)
    reader.start()
    assert first.wait(120), "no first chunk"
    # what `specflip serve` does on SIGTERM (deployments.local._shutdown): drain, then delete
    drained: list[bool] = []
    drainer = threading.Thread(
        target=lambda: drained.append(drain(app.config.policy.actor_name, 120, tick_s=0.25))
    )
    drainer.start()
    time.sleep(1.0)  # two replica ticks: every replica knows
    refused = httpx.post(
        f"{app.base}/v1/completions", json={**body, "stream": False, "max_tokens": 4}, timeout=30
    )
    assert refused.status_code == 503, refused.text
    assert refused.headers.get("retry-after") == "5" and refused.headers.get("x-specflip-replica"), (
        refused.headers
    )
    assert refused.json()["error"]["type"] == "ServiceUnavailable" and "shutting down" in refused.text
    drainer.join(150)
    assert drained == [True], "the stream in flight did not finish within the drain"
    serve.delete("specflip", _blocking=True)  # Serve's own drain: nothing left in flight
    reader.join(300)
    assert events and events[-1] == "[DONE]", events[-3:]
    chunks = [json.loads(e) for e in events[:-1]]
    errors = [c for c in chunks if "error" in c]
    text_chunks = [c for c in chunks if c.get("choices")]
    # finished whole: the drain waited for it
    assert not errors and text_chunks[-1]["choices"][0]["finish_reason"] == "length", chunks[-2:]
