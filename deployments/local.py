"""Run the app on a local Ray instance (`specflip serve`, the demo, benchmarks, tests)."""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from deployments.client import SpecflipClient
from deployments.config import POLICY_NAMESPACE, ConfigError, SpecFlipConfig, serve_env

__all__ = ["APP_NAME", "LocalApp", "run_local", "wait_until"]

APP_NAME = "specflip"


@dataclass(frozen=True)
class LocalApp:
    """A running app: its base URL, its config, and a client for it (with the config's control token)."""

    base: str  # http://host:port<route prefix without the trailing slash>
    config: SpecFlipConfig
    client: SpecflipClient = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "client", SpecflipClient(self.base, self.config.serve.resolved_token() or "")
        )


def wait_until(
    what: Callable[[], bool], timeout_s: float, every_s: float = 0.25, why: str = "condition"
) -> None:
    deadline = time.monotonic() + timeout_s
    while not what():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{why} not reached within {timeout_s:g} s")
        time.sleep(every_s)


def _init_ray(num_cpus: int | None, attempts: int = 2) -> None:
    """ray.init; once more if a busy host made the raylet miss Ray's fixed 30 s registration window."""
    import ray

    for attempt in range(attempts):
        try:
            ray.init(
                num_cpus=num_cpus,
                include_dashboard=False,
                log_to_driver=os.environ.get("SPECFLIP_RAY_LOGS") == "1",
            )
            return
        except Exception as err:
            if "timed out during startup" not in str(err) or attempt == attempts - 1:
                raise
            ray.shutdown()


@contextmanager
def run_local(
    config: SpecFlipConfig,
    *,
    host: str | None = None,
    port: int | None = None,
    num_cpus: int | None = None,
    worker_pythonpath: str | None = None,
    log: Callable[[str], None] = lambda line: None,
    engine_factory: Any = None,
) -> Iterator[LocalApp]:
    """Start (or join, with $RAY_ADDRESS) Ray, run the app, wait until every replica reports; shut down after.

    worker_pythonpath: put this first on Ray workers' path (a source checkout that is not installed).
    num_cpus: logical CPUs of a new local Ray instance (default: what the replicas need, plus one).
    """
    # Serve with HAProxy (direct streaming needs it); Serve reads these at import, here and
    # in its actors, so they must be set before Ray starts (and before this process imports Serve)
    os.environ.update(serve_env(config))
    haproxy_dir = _haproxy_env()
    from ray import serve

    from deployments.app import assemble

    if worker_pythonpath:
        os.environ["PYTHONPATH"] = os.pathsep.join(
            p for p in (worker_pythonpath, os.environ.get("PYTHONPATH")) if p
        )
    host, port = host or config.serve.host, port or config.serve.port
    if not os.environ.get("RAY_ADDRESS"):  # a cluster joined may hold the port (its own Serve
        _check_port_free(host, port)  # proxy) and the model files (on its nodes only)
        _check_model_files(config)
    if num_cpus is None and not os.environ.get("RAY_ADDRESS"):
        num_cpus = int(config.replicas.count * config.replicas.num_cpus) + 1
    started = time.monotonic()
    log("starting Ray ...")
    # a busy host can take longer than Serve's 5 s to ready a fresh proxy process; Serve then kills
    # and restarts it until serve.start gives up (local instances only: a cluster has its own env)
    os.environ.setdefault("RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S", "30")
    # a stopping replica stays open this long so HAProxy can take it out (Ray's default, 30 s, is
    # for load balancers on other hosts; HAProxy here checks every 250 ms once a check fails)
    os.environ.setdefault("RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S", "2")
    _init_ray(num_cpus)
    # Ray sets this driver's root logger to INFO (JSON lines): keep the HTTP clients of the
    # status poller and the demo's load from printing a line per request
    for noisy in ("httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        serve.start(http_options={"host": host, "port": port})
        log(
            f"deploying {config.replicas.count} replica(s) of {config.model.id} on {config.engine.device.value} "
            f"(engine start takes a while) ..."
        )
        app = assemble(config) if engine_factory is None else assemble(config, engine_factory=engine_factory)
        serve.run(app, name=APP_NAME, route_prefix=config.serve.route_prefix)
        shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
        local = LocalApp(f"http://{shown}:{port}{config.serve.route_prefix.rstrip('/')}", config)

        def registered() -> bool:
            replicas = local.client.replicas()
            return len(replicas) == config.replicas.count and not any(r["stale"] for r in replicas)

        wait_until(registered, 120, why="every replica reporting to the policy")
        log(f"app up in {time.monotonic() - started:.0f} s at {local.base}")
        try:
            yield local
        finally:
            local.client.close()
    finally:
        _shutdown(
            drain_s=config.serve.graceful_shutdown_s,
            policy_actor=config.policy.actor_name,
            tick_s=config.replicas.tick_s,
        )
        stop_haproxy(haproxy_dir)


def _check_port_free(host: str, port: int) -> None:
    """Refuse a port another process holds before Ray starts (Serve's HAProxy would fail to bind it
    a minute later, with a traceback)."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as HAProxy binds: TIME_WAIT is no hold
        try:
            s.bind((host, port))
        except OSError as e:
            raise PortInUse(
                f"cannot serve on {host}:{port}: {e.strerror or e} (pick another with --port)"
            ) from e


class PortInUse(ConfigError):
    """The app's HTTP port is taken (exit 2 from the CLI, like a bad config)."""


# what builds the directories the builders name (loadtests.models): `specflip models build` the tiny
# trained pair, `specflip models shapes` the 8B-shaped configs
_BUILT_BY = {"target": "build", "draft": "build", "target-8b": "shapes", "eagle3-8b": "shapes"}


def _check_model_files(config: SpecFlipConfig) -> None:
    """Refuse model files missing on this machine before Ray starts (a replica's engine would fail
    a minute later with a traceback). Local paths only (absolute, `./`, `../`, `~`; a config file's
    relative paths are absolute by now): a bare `org/name` may be a Hugging Face hub id, which the
    engine resolves itself. A target or draft needs its config.json, `load_format: dummy` too."""
    for name in ("path", "draft_path", "tokenizer_path"):
        value = getattr(config.model, name)
        if value is None or not value.startswith(("/", ".", "~")):
            continue
        where = os.path.normpath(os.path.expanduser(value))
        if os.path.isdir(where) and (name == "tokenizer_path" or os.path.isfile(f"{where}/config.json")):
            continue
        what = "has no config.json (not a model directory)" if os.path.isdir(where) else "does not exist"
        built_by = _BUILT_BY.get(os.path.basename(where))
        fix = (
            f"build it first: specflip models {built_by} --out {os.path.dirname(where)}"
            if built_by
            else f"point model.{name} at a model directory (Hugging Face format)"
        )
        raise ModelFilesMissing(f"model.{name} {where} {what}; {fix}")


class ModelFilesMissing(ConfigError):
    """A model, draft or tokenizer directory the config names is not on this machine (exit 2)."""


_HAPROXY_PICKED = "SPECFLIP_HAPROXY_PICKED"  # "<pid> <key> ...": what _haproxy_env set, and in which process
_HAPROXY_KEYS = (
    "RAY_SERVE_HAPROXY_CONFIG_FILE_LOC",
    "RAY_SERVE_HAPROXY_SOCKET_PATH",
    "RAY_SERVE_HAPROXY_SERVER_STATE_BASE",
    "RAY_SERVE_HAPROXY_SERVER_STATE_FILE",
    "RAY_SERVE_HAPROXY_METRICS_SOCKET_PATH",
    "RAY_SERVE_HAPROXY_STATS_PORT",
    "RAY_SERVE_HAPROXY_METRICS_PORT",
)


def _haproxy_env() -> str:
    """Serve's HAProxy for this app: its files in a folder of this process, its stats and metrics
    ports free ones (Ray's defaults are fixed paths and ports 8404/9101, which a second app on the
    host, or an HAProxy orphaned by a killed one, would already hold). What an operator set is
    kept; what another app process picked (a sweep's or a test's launcher, whose environment a
    launched `specflip serve` inherits) is picked anew, else the second HAProxy cannot bind."""
    picked = os.environ.get(_HAPROXY_PICKED, "").split()
    if picked and picked[0] == str(os.getpid()):
        # a second app in this process: the same files, and the same ports while they are free. A port
        # picked long ago can since be held by something else (in CI, HAProxy's metrics port: "cannot
        # bind socket (Address already in use)", an ephemeral port by then): that one is picked anew
        for key in _HAPROXY_KEYS[-2:]:
            if key in picked[1:] and not _bindable(int(os.environ[key])):
                os.environ[key] = str(_free_port())
        return os.path.dirname(os.environ[_HAPROXY_KEYS[0]])
    for key in picked[1:]:
        os.environ.pop(key, None)
    base = haproxy_folder(os.getpid())
    ports = [_free_port(), _free_port()]
    values = (
        f"{base}/haproxy.cfg",
        f"{base}/admin.sock",
        base,
        f"{base}/server-state",
        f"{base}/metrics.sock",
        str(ports[0]),
        str(ports[1]),
    )
    unset = [key for key in _HAPROXY_KEYS if key not in os.environ]
    for key, value in zip(_HAPROXY_KEYS, values, strict=True):
        os.environ.setdefault(key, value)
    os.environ[_HAPROXY_PICKED] = " ".join([str(os.getpid()), *unset])
    return os.path.dirname(os.environ[_HAPROXY_KEYS[0]])


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _bindable(port: int) -> bool:
    """Whether HAProxy could listen on `port` now: on every address, with SO_REUSEADDR as it sets."""
    import socket

    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def haproxy_folder(pid: int) -> str:
    """Where the app process `pid` keeps Serve's HAProxy files (unless its operator set the paths)."""
    return f"/tmp/haproxy-serve-{pid}"


def stop_haproxy(*folders: str) -> None:
    """Kill every HAProxy whose files are in one of `folders` (one scan of the processes). It runs as a
    child of Serve's proxy actor, outside the app process's group: when Ray goes down hard, or the app
    process is killed before its own shutdown reaches this, it is left behind holding its ports."""
    import psutil

    # /tmp/haproxy-serve-12 is not /tmp/haproxy-serve-123's
    inside = [folder.rstrip("/") + "/" for folder in folders]
    for proc in psutil.process_iter():
        try:
            if proc.name() == "haproxy" and any(f in arg for arg in proc.cmdline() for f in inside):
                proc.kill()
        except psutil.Error:
            continue


def drain(policy_actor: str, timeout_s: float, *, tick_s: float = 1.0) -> bool:
    """Tell every replica, through the policy actor, to answer new generation requests 503 with
    Retry-After (HAProxy would answer a plain-text 404 once the app is deleted), then wait until
    no replica has a request running or waiting, at most `timeout_s`. Whether they all finished.
    `tick_s`: how long a replica may take to see it (its next report)."""
    import ray

    actor = ray.get_actor(policy_actor, namespace=POLICY_NAMESPACE)
    ray.get(actor.drain.remote(), timeout=10)
    deadline = time.monotonic() + timeout_s
    time.sleep(min(2 * tick_s, timeout_s))  # every replica reported since, and what it took before

    def idle() -> bool:
        status = ray.get(actor.status.remote(), timeout=10)
        return all(r.running + r.waiting == 0 for r in status.replicas if not r.stale)

    while not idle():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.25)
    return True


def _shutdown(
    serve_timeout_s: float = 30.0, drain_s: float = 0.0, policy_actor: str | None = None, tick_s: float = 1.0
) -> None:
    """Drain the app first (`drain`: new requests 503, in-flight ones, streams included, finish, for up to
    `drain_s`), delete it (Serve's own drain, short by then), then the app's policy actor (detached: it
    outlives the app otherwise, on a cluster that keeps running), then serve.shutdown; each bounded: a
    SIGTERM sent to our whole process group may have taken Ray's own processes down already, and Serve
    would then wait on them; ray.shutdown stops the rest."""
    import threading

    import ray
    from ray import serve

    from deployments.ray_compat import stop_serve

    def drain_then_stop() -> None:
        if policy_actor is not None:
            with contextlib.suppress(Exception):  # no actor, or Ray going down already
                drain(policy_actor, drain_s, tick_s=tick_s)
        with contextlib.suppress(Exception):  # already gone, or Serve not reachable any more
            serve.delete(APP_NAME, _blocking=True)
        if policy_actor is not None:
            with contextlib.suppress(Exception):  # never created, or already gone (in Serve's namespace)
                ray.kill(ray.get_actor(policy_actor, namespace=POLICY_NAMESPACE), no_restart=True)
        stop_serve(serve_timeout_s)  # serve.shutdown, without its alarming line at every clean stop

    stopper = threading.Thread(target=drain_then_stop, name="serve-shutdown", daemon=True)
    stopper.start()
    stopper.join(serve_timeout_s + 2 * drain_s + 2 * tick_s)  # drain, then Serve's own (short by then)
    ray.shutdown()
