"""k8s/probe.py restarts a GPU pod that has lost its replica (KubeRay 4685), and only then.

The Serve state fed to the probe is built with Ray 2.60's own schema classes and serialised
the way the controller serves GET /api/serve/applications/, so a renamed field in Ray breaks
these tests rather than the probe in a cluster. The end-to-end cases run the probe's real
HTTP code against a fake Ray (a local HTTP server on 127.0.0.1 standing in for the dashboard
agent, the Serve proxy and the head's Serve API): a fake, because it injects failures.
"""

from __future__ import annotations

import http.server
import importlib.util
import json
import os
import subprocess
import sys
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.k8s.manifests import K8S


def _load_probe() -> Any:
    spec = importlib.util.spec_from_file_location("specflip_k8s_probe", K8S / "probe.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


probe = _load_probe()
POD, OTHER = "10.0.0.5", "10.0.0.6"
GPU = "SpecFlipServer:llama-3_1-8b-instruct"  # the Serve deployment build_llm_deployment names


def serve_details(replicas: list[tuple[str, str]], target: int = 2, gpus: float = 1.0) -> dict[str, Any]:
    """What the head serves at /api/serve/applications/: a GPU deployment (replicas as (node_ip, state))
    plus a CPU ingress with a running replica on this pod."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from ray.serve._private.common import DeploymentStatus, DeploymentStatusTrigger, ReplicaState
        from ray.serve.schema import (
            APIType,
            ApplicationDetails,
            ApplicationStatus,
            DeploymentDetails,
            DeploymentSchema,
            ReplicaDetails,
            ServeActorDetails,
            ServeInstanceDetails,
        )

    def deployment(
        name: str, reps: list[tuple[str, str]], resources: dict[str, float], n: int
    ) -> DeploymentDetails:
        return DeploymentDetails(
            name=name,
            status=DeploymentStatus.HEALTHY,
            message="",
            status_trigger=DeploymentStatusTrigger.CONFIG_UPDATE_COMPLETED,
            deployment_config=DeploymentSchema(name=name, num_replicas=n),
            target_num_replicas=n,
            required_resources=resources,
            replicas=[
                ReplicaDetails(
                    replica_id=f"{name}-{i}",
                    state=ReplicaState(state),
                    node_ip=ip,
                    node_id=f"node-{ip}",
                    start_time_s=0.0,
                )
                for i, (ip, state) in enumerate(reps)
            ],
        )

    app = ApplicationDetails(
        name="specflip",
        route_prefix="/",
        docs_path=None,
        status=ApplicationStatus.RUNNING,
        message="",
        last_deployed_time_s=0.0,
        deployed_app_config=None,
        source=APIType.DECLARATIVE,
        external_scaler_enabled=False,
        deployments={
            "Ingress": deployment("Ingress", [(POD, "RUNNING")], {"CPU": 1.0}, 1),
            GPU: deployment(GPU, replicas, {"CPU": 1.0, "GPU": gpus}, target),
        },
    )
    details = ServeInstanceDetails(
        controller_info=ServeActorDetails(), proxies={}, applications={"specflip": app}, target_groups=[]
    )
    return json.loads(json.dumps(details._get_user_facing_json_serializable_dict(exclude_unset=True)))


VIEWS = [
    # (what, replicas as (node_ip, state), target, expected WorkerView fields)
    ("running here", [(POD, "RUNNING"), (OTHER, "RUNNING")], 2, (1, 0, 2, 2)),
    ("starting here", [(POD, "STARTING"), (OTHER, "RUNNING")], 2, (0, 1, 1, 2)),
    ("stopping here, nothing new yet", [(POD, "STOPPING"), (OTHER, "RUNNING")], 2, (0, 0, 1, 2)),
    ("missing here", [(OTHER, "RUNNING")], 2, (0, 0, 1, 2)),
    ("spare pod", [(OTHER, "RUNNING")], 1, (0, 0, 1, 1)),
]


@pytest.mark.parametrize(("what", "replicas", "target", "expected"), VIEWS, ids=[v[0] for v in VIEWS])
def test_worker_view_reads_ray_serve_details(what: str, replicas: list, target: int, expected: tuple) -> None:
    view = probe.worker_view(serve_details(replicas, target), POD)
    assert view.deployment == GPU, "found by its GPU request, not by name"
    assert (view.local_running, view.local_coming_up, view.fleet_running, view.fleet_target) == expected


def test_worker_view_without_a_gpu_deployment_is_none_unless_named() -> None:
    details = serve_details([(POD, "RUNNING")], target=1, gpus=0)  # e.g. GPUs taken through placement groups
    assert probe.worker_view(details, POD) is None
    assert probe.worker_view(details, POD, deployment=GPU).local_running == 1
    assert probe.worker_view({"applications": {}}, POD) is None


def view(local_running: int = 0, coming_up: int = 0, fleet_running: int = 1, target: int = 2) -> Any:
    return probe.WorkerView(GPU, local_running, coming_up, fleet_running, target)


def test_liveness_tick_by_tick() -> None:
    """Missing replica: WAITING until the grace runs out, then STUCK; a running replica resets the clock."""
    limit = 900.0
    state = probe.LiveState()
    timeline = [
        (0.0, view(local_running=1, fleet_running=2), probe.Verdict.ALIVE),
        (30.0, view(), probe.Verdict.WAITING),  # replica died; clock starts at 30
        (330.0, view(coming_up=1), probe.Verdict.WAITING),  # replacement loading
        (600.0, view(), probe.Verdict.WAITING),  # replacement failed (GPU still held?)
        (929.0, view(coming_up=1), probe.Verdict.WAITING),  # a new attempt does not restart the clock
        (930.0, view(coming_up=1), probe.Verdict.STUCK),  # 900 s after it first went missing
        (960.0, view(), probe.Verdict.STUCK),
    ]
    for now, v, expected in timeline:
        verdict, state, why = probe.decide_liveness(v, state, now, limit)
        assert verdict is expected, (now, why)
    assert state.bad_since == 30.0
    verdict, state, _ = probe.decide_liveness(view(local_running=1, fleet_running=2), state, 1000.0, limit)
    assert verdict is probe.Verdict.ALIVE and state.bad_since is None


@pytest.mark.parametrize(
    ("what", "v", "expected"),
    [
        ("spare pod: fleet complete without it", view(fleet_running=2, target=2), probe.Verdict.ALIVE),
        ("unknown Serve state", None, probe.Verdict.UNKNOWN),
    ],
)
def test_liveness_never_restarts_without_need(what: str, v: Any, expected: Any) -> None:
    state = probe.LiveState(bad_since=0.0)
    verdict, new_state, _ = probe.decide_liveness(v, state, 10_000.0, 900.0)
    assert verdict is expected, what
    if expected is probe.Verdict.UNKNOWN:
        assert new_state == state, "missing evidence neither starts nor resets the clock"


# ---- end to end through HTTP, against a fake Ray ---------------------------------------------------------


class FakeRay:
    """Answers the three URLs the probe reads; tests set what each one says."""

    def __init__(self) -> None:
        self.raylet = (200, "raylet: success\ngcs: success (no local gcs)")
        self.proxy = (200, "success")
        self.details: tuple[int, str] | None = (
            200,
            json.dumps(serve_details([(POD, "RUNNING"), (OTHER, "RUNNING")])),
        )

    def answer(self, path: str) -> tuple[int, str] | None:
        return {
            "/api/healthz": self.raylet,
            "/-/healthz": self.proxy,
            "/api/serve/applications/": self.details,
        }.get(path, (404, "not found"))


@pytest.fixture
def fake_ray(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FakeRay]:
    fake = FakeRay()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server API)
            answer = fake.answer(self.path)
            if answer is None:
                self.close_connection = True
                return
            status, body = answer
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    port = str(server.server_address[1])
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    # One local port plays the agent, the proxy and the head's dashboard.
    for name in ("RAY_AGENT_PORT", "RAY_SERVE_PORT", "RAY_DASHBOARD_PORT"):
        monkeypatch.setenv(name, port)
    monkeypatch.setenv("FQ_RAY_IP", "127.0.0.1")
    monkeypatch.setenv("POD_IP", POD)
    monkeypatch.setenv("SPECFLIP_PROBE_STATE", str(tmp_path / "live.json"))
    monkeypatch.setenv("SPECFLIP_PROBE_STUCK_AFTER_S", "900")
    yield fake
    server.shutdown()
    server.server_close()


def test_ready_needs_raylet_and_serve_proxy(fake_ray: FakeRay) -> None:
    assert probe.main(["ready"]) == 0
    fake_ray.proxy = (503, "This node is being drained.")
    assert probe.main(["ready"]) == 1
    fake_ray.proxy = (200, "success")
    fake_ray.raylet = (503, "raylet: Local Raylet failed")
    assert probe.main(["ready"]) == 1


def test_live_restarts_a_pod_whose_replica_stays_missing(fake_ray: FakeRay) -> None:
    """Each probe run is a new process: the clock state survives in SPECFLIP_PROBE_STATE."""
    assert probe.check("live", now=0.0)[0]  # running here
    fake_ray.details = (200, json.dumps(serve_details([(OTHER, "RUNNING")])))  # lost it
    assert probe.check("live", now=100.0)[0]
    assert probe.check("live", now=999.0)[0]  # 899 s missing
    ok, why = probe.check("live", now=1000.0)  # 900 s missing: restart
    assert not ok and why.startswith("stuck:") and "missing" in why
    assert probe.main(["live"]) == 1, "the exit code the kubelet sees"


@pytest.mark.parametrize(
    "details",
    [
        (503, "Failed to get a response from the controller. The GCS may be down"),
        (200, "<html>not json</html>"),
        (200, '{"applications": ["not", "a", "mapping"]}'),
        None,  # connection dropped without a response
    ],
)
def test_live_does_not_restart_when_serve_state_is_unreadable(fake_ray: FakeRay, details: Any) -> None:
    fake_ray.details = details
    assert probe.main(["live"]) == 0


def test_live_does_not_restart_when_the_head_is_unreachable(
    fake_ray: FakeRay, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAY_DASHBOARD_PORT", "1")  # nothing listens there: connection refused
    assert probe.main(["live"]) == 0


def test_live_fails_when_the_raylet_is_down(fake_ray: FakeRay) -> None:
    fake_ray.raylet = (503, "raylet: Local Raylet failed")
    assert probe.main(["live"]) == 1


def test_probe_runs_with_the_standard_library_only() -> None:
    """The pod runs it as `python -S probe.py` (no site-packages): it must not import anything else."""
    env = {
        "PATH": os.environ.get("PATH", ""),
        "RAY_AGENT_PORT": "1",
    }  # nothing listens: the raylet check fails
    done = subprocess.run(
        [sys.executable, "-S", str(K8S / "probe.py"), "ready"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    assert done.stdout.startswith("raylet: HTTP 0"), done.stdout


def test_usage_error() -> None:
    assert probe.main([]) == 2
    assert probe.main(["alive"]) == 2
