"""Faults under load, on an app of its own (2 CPU replicas), the way Ray Serve's controller-recovery
tests do it: concurrent streaming clients run while the policy actor, one replica's process and
the Serve controller are killed in turn; each test prints sent / succeeded / failed per phase.
Only requests in flight on a killed replica may fail; the policy forgets a dead replica within
its TTL; the replacement runs the mode the policy wants. Last, a shutdown drains in-flight streams.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from deployments.config import POLICY_NAMESPACE
from deployments.defaults import cpu_demo_config
from deployments.local import LocalApp, drain, run_local, wait_until
from tests.deployments.conftest import MODEL, TOKEN, free_port
from tests.faults.load import StreamingLoad
from tests.ray_metrics import wait_for_export
from tests.reporting import report

pytestmark = pytest.mark.serve
ROOT = Path(__file__).resolve().parents[2]
TTL_S = 10.0
ACTOR = "specflip-policy"


@pytest.fixture(scope="module")
def app(model_pair: Any) -> Iterator[LocalApp]:
    config = cpu_demo_config(
        (model_pair.target, model_pair.draft),
        policy={"high": 6, "low": 1, "dwell_s": 1.0, "tick_s": 0.25, "stale_after_s": 3.0, "ttl_s": TTL_S},
        replicas={"tick_s": 0.25},
        serve={"control_token": TOKEN, "graceful_shutdown_s": 60},
    )
    with run_local(
        config, host="127.0.0.1", port=free_port(), num_cpus=4, worker_pythonpath=str(ROOT)
    ) as local:
        yield local


def _report(name: str, load: StreamingLoad, marks: list[tuple[str, float]]) -> dict[str, dict[str, int]]:
    phases = {
        label: load.phase(start, end) for (label, start), (_, end) in zip(marks, marks[1:], strict=False)
    }
    report(f"{name}: " + "; ".join(f"{k} {v}" for k, v in phases.items()))
    return phases


def _run(
    app: LocalApp, fault: Any, recovered: Any, settle_s: float = 4.0
) -> tuple[StreamingLoad, list[tuple[str, float]]]:
    with StreamingLoad(app.base, MODEL) as load:
        marks = [("before", time.monotonic())]
        time.sleep(settle_s)
        marks.append(("during", time.monotonic()))
        fault()
        recovered()
        marks.append(("after", time.monotonic()))
        time.sleep(settle_s)
        marks.append(("end", time.monotonic()))
    return load, marks


def test_killing_the_policy_actor_under_load_loses_no_request_and_ray_restarts_the_same_actor(
    app: LocalApp,
) -> None:
    import ray

    before = app.client.status()["policy"]

    def kill() -> None:
        # the actor lives in Serve's namespace, beside the replicas (deployments.config.POLICY_NAMESPACE)
        (where,) = [
            a["namespace"] for a in ray.util.list_named_actors(all_namespaces=True) if a["name"] == ACTOR
        ]
        assert where == POLICY_NAMESPACE
        ray.kill(ray.get_actor(ACTOR, namespace=where), no_restart=False)

    def recovered() -> None:
        def back() -> bool:
            r = app.client.get("/specflip/status")
            if r.status_code != 200:
                return False
            doc = r.json()
            return doc["policy"]["restarted"] and len([x for x in doc["replicas"] if not x["stale"]]) == 2

        wait_until(back, 60, why="restarted policy actor with both replicas re-registered")

    load, marks = _run(app, kill, recovered)
    phases = _report("policy actor kill", load, marks)
    assert all(p["failed"] == 0 and p["sent"] > 0 for p in phases.values()), phases
    after = app.client.status()["policy"]
    assert after["restarted"] is True and after["restarts"] == (before["restarts"] or 0) + 1
    # every replica kept its handle: a metrics call after the restart reaches the same (restarted)
    # actor; the replica answering reads the count first (1), others as of their last call (0 or 1);
    # Ray's metrics export shows each replica's gauge
    assert app.client.get("/metrics").status_code == 200

    def restarts(text: str) -> list[float]:
        return [
            s.value
            for f in text_string_to_metric_families(text)
            for s in f.samples
            if s.name == "ray_specflip_http_policy_restarts"
        ]

    seen = restarts(wait_for_export(lambda t: 1.0 in restarts(t), why="a replica saw the restart"))
    assert set(seen) <= {0.0, 1.0}, seen


def test_killing_the_serve_controller_under_load_loses_no_request(app: LocalApp) -> None:
    import ray

    from deployments.ray_compat import actor_restarts

    controller = ray.get_actor("SERVE_CONTROLLER_ACTOR", namespace="serve")
    restarts = actor_restarts(controller) or 0

    def kill() -> None:
        ray.kill(controller, no_restart=False)

    def recovered() -> None:
        from ray import serve

        # restarted first: the controller still being killed answers serve.status() RUNNING too
        # (a run saw "during" end before any request could start in it)
        wait_until(lambda: (actor_restarts(controller) or 0) > restarts, 60, why="controller restarted")
        wait_until(
            lambda: serve.status().applications["specflip"].status == "RUNNING",
            90,
            every_s=1,
            why="controller back",
        )

    load, marks = _run(app, kill, recovered)
    phases = _report("serve controller kill", load, marks)
    assert all(p["failed"] == 0 and p["sent"] > 0 for p in phases.values()), phases


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


def _policy_creator_first(app: LocalApp, pids: list[int]) -> list[int]:
    """The replicas, the one that created the policy actor first (it listens on the actor's owner
    address): killing that one once took the actor along for good (tests/policy/test_actor.py)."""
    import ray

    from deployments.ray_compat import actor_record

    assert len(pids) == 2, pids
    actor = ray.get_actor(app.config.policy.actor_name, namespace=POLICY_NAMESPACE)
    port = actor_record(actor)["OwnerAddress"]["Port"]

    def created(pid: int) -> bool:
        listening = psutil.Process(pid).net_connections("tcp")
        return any(c.status == psutil.CONN_LISTEN and c.laddr.port == port for c in listening)

    creators = [pid for pid in pids if created(pid)]
    assert len(creators) == 1, (pids, port)  # direct data path: a replica's control routes created it
    return creators + [pid for pid in pids if pid not in creators]


def _actor_status(app: LocalApp) -> str:
    """The policy actor asked directly (not through the app's HTTP status), for a failure message."""
    import ray

    try:
        actor = ray.get_actor(app.config.policy.actor_name, namespace=POLICY_NAMESPACE)
        fleet = ray.get(actor.status.remote(), timeout=10)
        return repr([(r.replica_id, round(r.last_report_age_s, 1), r.policy_source) for r in fleet.replicas])
    except Exception as err:
        return f"failed: {type(err).__name__}: {str(err)[:300]}"


def test_killing_one_replica_fails_only_its_in_flight_requests_and_the_policy_forgets_it(
    app: LocalApp,
) -> None:
    old_ids = {r["replica_id"] for r in app.client.replicas()}
    pids = _policy_creator_first(app, _replica_pids())
    killed_at: list[float] = []

    def kill() -> None:
        killed_at.append(time.monotonic())
        os.kill(pids[0], signal.SIGKILL)

    gone: dict[str, float] = {}
    seen: list[dict[str, object]] = []  # the last status's replicas (said on a timeout)
    errors: list[str] = []  # status calls that failed (the last said on a timeout)
    stale_sources: set[str] = set()  # what the status says of the dead replica while it is stale

    def recovered() -> None:
        def replaced() -> bool:
            try:
                replicas = app.client.replicas()
            except httpx.HTTPError as err:  # HAProxy sent this status call to the dead replica before
                # it marked it down (a 5xx, or a reset): the load's own requests are judged below
                body = err.response.text[:300] if isinstance(err, httpx.HTTPStatusError) else ""
                errors.append(f"{type(err).__name__}: {err} {body}"[:400])
                return False

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
                f"{err}; old {sorted(old_ids)}, last status {seen}, {_serve_replicas()}; "
                f"{len(errors)} status calls failed, last {errors[-1:]}; the actor itself: {_actor_status(app)}"
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
