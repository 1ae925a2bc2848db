"""Kubernetes readiness and liveness probes for specflip's GPU worker pods.

Runs inside the Ray container as `python -S /opt/specflip/probe.py ready|live`
(standard library only, so `-S` keeps it fast: it runs every few seconds).

Why not KubeRay's default probes: the default worker liveness probe only asks the
raylet whether it is alive (github.com/ray-project/kuberay/issues/4685). A Serve replica that is stuck, or
that cannot be recreated on its pod because the GPU is still held by the dead
replica's engine processes, leaves the pod Running but NotReady forever: nothing
restarts it, and with one GPU per pod the replica never comes back.

- `ready`: the raylet is healthy and this pod's Serve proxy answers `/-/healthz`
  (the check KubeRay injects for RayService workers; it decides which pods the
  Serve Service routes to).
- `live`: the raylet is healthy, and this pod either hosts a RUNNING replica of the
  GPU deployment or is not needed (the fleet already has all its replicas). A pod
  that lacks its replica while the fleet is short of one is given
  SPECFLIP_PROBE_STUCK_AFTER_S seconds (model load + CUDA graph capture + JIT)
  before it reports dead and the kubelet restarts the container, which frees the GPU.
  If the head's Serve API cannot be read the answer is "alive": a head outage must
  not restart every GPU pod, and the raylet check catches a worker that lost its head.

Environment (KubeRay injects FQ_RAY_IP; the manifest sets POD_IP from the downward API):
POD_IP, FQ_RAY_IP, RAY_DASHBOARD_PORT (8265), RAY_AGENT_PORT (52365),
RAY_SERVE_PORT (8000), SPECFLIP_PROBE_STUCK_AFTER_S (900),
SPECFLIP_PROBE_DEPLOYMENT (name of the GPU deployment; if unset, the deployment whose replicas
request GPUs),
SPECFLIP_PROBE_STATE (/tmp/specflip-probe-live.json).
"""

from __future__ import annotations

import dataclasses
import enum
import http.client
import json
import os
import sys
import time
import urllib.error
import urllib.request
from typing import Any

__all__ = [
    "LiveState",
    "Verdict",
    "WorkerView",
    "check",
    "decide_liveness",
    "main",
    "worker_view",
]

# Replica states in Serve's REST API (`/api/serve/applications/`) that mean "on its way up".
_COMING_UP = {"STARTING", "UPDATING", "RECOVERING"}


class Verdict(enum.Enum):
    ALIVE = "alive"  # hosts a running replica, or the fleet does not need this pod
    WAITING = "waiting"  # replica missing or starting, still within the grace period
    STUCK = "stuck"  # replica missing or starting for longer than the grace period
    UNKNOWN = "unknown"  # Serve state unreadable: do not restart on missing evidence


@dataclasses.dataclass(frozen=True)
class WorkerView:
    """What the Serve controller says about the GPU deployment, seen from one pod."""

    deployment: str
    local_running: int
    local_coming_up: int
    fleet_running: int
    fleet_target: int


@dataclasses.dataclass(frozen=True)
class LiveState:
    """Persisted between probe runs (the container's /tmp; a restart clears it)."""

    bad_since: float | None = None


def _needs_gpu(dep: dict[str, Any]) -> bool:
    """The replica actor itself requests GPUs (ray_actor_options.num_gpus).

    A deployment that takes its GPUs through placement-group bundles shows only the actor's
    CPU here: name it in SPECFLIP_PROBE_DEPLOYMENT instead.
    """
    resources = dep.get("required_resources")
    return isinstance(resources, dict) and float(resources.get("GPU") or 0) > 0


def worker_view(details: dict[str, Any], pod_ip: str, deployment: str | None = None) -> WorkerView | None:
    """Summarise `GET /api/serve/applications/` for the pod at `pod_ip`; None if no GPU deployment is found."""
    for app in (details.get("applications") or {}).values():
        for name, dep in (app.get("deployments") or {}).items():
            if (deployment is not None and name != deployment) or (
                deployment is None and not _needs_gpu(dep)
            ):
                continue
            replicas = dep.get("replicas") or []
            local = [r for r in replicas if r.get("node_ip") == pod_ip]
            return WorkerView(
                deployment=name,
                local_running=sum(r.get("state") == "RUNNING" for r in local),
                local_coming_up=sum(r.get("state") in _COMING_UP for r in local),
                fleet_running=sum(r.get("state") == "RUNNING" for r in replicas),
                fleet_target=int(dep.get("target_num_replicas") or 0),
            )
    return None


def decide_liveness(
    view: WorkerView | None, state: LiveState, now: float, stuck_after_s: float
) -> tuple[Verdict, LiveState, str]:
    """Pure liveness rule: the clock is an argument, the state comes back."""
    if view is None:
        return Verdict.UNKNOWN, state, "no GPU deployment in the Serve state (not deployed yet?)"
    if view.local_running > 0:
        return Verdict.ALIVE, LiveState(), f"{view.local_running} running {view.deployment} replica(s) here"
    if view.fleet_running >= view.fleet_target:
        return (
            Verdict.ALIVE,
            LiveState(),
            (
                f"no replica here, but the fleet has {view.fleet_running}/"
                f"{view.fleet_target}: this pod is spare"
            ),
        )
    since = state.bad_since if state.bad_since is not None else now
    waited = now - since
    what = "starting" if view.local_coming_up else "missing"
    msg = (
        f"{view.deployment} replica {what} on this pod for {waited:.0f}s "
        f"(fleet {view.fleet_running}/{view.fleet_target} running, limit {stuck_after_s:.0f}s)"
    )
    if waited >= stuck_after_s:
        return Verdict.STUCK, LiveState(bad_since=since), msg
    return Verdict.WAITING, LiveState(bad_since=since), msg


# ---- shell: HTTP, files, exit codes -------------------------------------------------------------


def _get(url: str, timeout: float) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:  # noqa: S310 (fixed local/cluster URLs)
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")
    except (OSError, ValueError, http.client.HTTPException) as e:
        return 0, f"{type(e).__name__}: {e}"


def _env(name: str, default: str) -> str:
    return os.environ.get(name) or default


def _raylet_ok() -> tuple[bool, str]:
    # Ray >= 2.53: one endpoint on the dashboard agent for the raylet (and the GCS on the head).
    status, body = _get(f"http://127.0.0.1:{_env('RAY_AGENT_PORT', '52365')}/api/healthz", timeout=3)
    return status == 200, f"raylet: HTTP {status} {body.strip()[:200]}"


def _ready() -> tuple[bool, str]:
    ok, msg = _raylet_ok()
    if not ok:
        return False, msg
    status, body = _get(f"http://127.0.0.1:{_env('RAY_SERVE_PORT', '8000')}/-/healthz", timeout=8)
    return status == 200 and "success" in body, f"serve proxy: HTTP {status} {body.strip()[:200]}"


def _load_state(path: str) -> LiveState:
    try:
        with open(path) as f:
            since = json.load(f).get("bad_since")
        return LiveState(bad_since=float(since) if since is not None else None)
    except (OSError, ValueError, AttributeError, TypeError):
        return LiveState()


def _save_state(path: str, state: LiveState) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(dataclasses.asdict(state), f)
    os.replace(tmp, path)


def _live(now: float) -> tuple[bool, str]:
    ok, msg = _raylet_ok()
    if not ok:
        return False, msg
    pod_ip, head = os.environ.get("POD_IP"), os.environ.get("FQ_RAY_IP")
    if not pod_ip or not head:
        return True, "POD_IP or FQ_RAY_IP unset: replica check skipped"
    status, body = _get(
        f"http://{head}:{_env('RAY_DASHBOARD_PORT', '8265')}/api/serve/applications/", timeout=8
    )
    try:
        view = worker_view(json.loads(body), pod_ip, os.environ.get("SPECFLIP_PROBE_DEPLOYMENT") or None)
    except (ValueError, AttributeError, TypeError) as e:
        return True, f"Serve state unreadable (HTTP {status}, {type(e).__name__}): replica check skipped"
    state_path = _env("SPECFLIP_PROBE_STATE", "/tmp/specflip-probe-live.json")
    verdict, state, why = decide_liveness(
        view, _load_state(state_path), now, float(_env("SPECFLIP_PROBE_STUCK_AFTER_S", "900"))
    )
    if verdict is not Verdict.UNKNOWN:
        _save_state(state_path, state)
    return verdict is not Verdict.STUCK, f"{verdict.value}: {why}"


def check(kind: str, now: float) -> tuple[bool, str]:
    """Run one probe (`ready` or `live`) at wall-clock time `now`: (passed, one-line reason)."""
    if kind == "ready":
        return _ready()
    if kind == "live":
        return _live(now)
    raise ValueError(f"unknown probe {kind!r}")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args not in (["ready"], ["live"]):
        print("usage: probe.py ready|live", file=sys.stderr)
        return 2
    ok, msg = check(args[0], time.time())
    print(msg)  # the kubelet shows this in the pod's events when the probe fails
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
