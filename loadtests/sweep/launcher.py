"""Bringing up the app in each configuration the sweep compares.

Four variants: speculation always ON, always OFF, `dynamic` (specflip's policy),
and `adaptive` (SGLang's engine-internal `speculative_adaptive`, the upstream
alternative). ON/OFF/dynamic are one app with the operator override set to
on/off/auto for all replicas; adaptive is a differently configured app.

`VariantSpec` is the one place that says how: which config the launch command
gets and which override to apply once the app answers. `AppLauncher` is the
protocol the sweep runner drives: `start(variant) -> base URL`, `stop()`.
- `ExternalApp(url, token)`: an app that is already running; reaches only the
  variants it can switch to by override.
- `CommandLauncher(template, ...)`: runs a shell command per config, e.g.
  `specflip serve --config {config} --port {port}` ({config}, {port} and
  {variant} are substituted), waits for `/v1/models`, kills the whole process
  group on stop, and reuses the running app when the next variant has the same
  config (only the override changes).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol

import httpx
import psutil

from deployments.client import ControlError, SpecflipClient
from deployments.local import haproxy_folder, stop_haproxy

__all__ = [
    "DEFAULT_SPECS",
    "AppLauncher",
    "CommandLauncher",
    "ExternalApp",
    "LauncherError",
    "Variant",
    "VariantSpec",
    "fleet_ready",
    "parse_variant_configs",
    "process_group_alive",
    "wait_for_override",
]


class Variant(StrEnum):
    ON = "on"
    OFF = "off"
    DYNAMIC = "dynamic"
    ADAPTIVE = "adaptive"


@dataclass(frozen=True)
class VariantSpec:
    """How to get one variant: the launch config, and the override to set (None: leave alone)."""

    variant: Variant
    config: str
    override: str | None
    label: str


# The CPU example configs; `--variant-config VARIANT=PATH` replaces a path
# (loadtests/sweep/h200_sweep.sh does).
DEFAULT_SPECS: Mapping[Variant, VariantSpec] = {
    Variant.ON: VariantSpec(Variant.ON, "deployments/examples/cpu-tiny.yaml", "on", "speculation always ON"),
    Variant.OFF: VariantSpec(
        Variant.OFF, "deployments/examples/cpu-tiny.yaml", "off", "speculation always OFF"
    ),
    Variant.DYNAMIC: VariantSpec(
        Variant.DYNAMIC, "deployments/examples/cpu-tiny.yaml", "auto", "specflip dynamic policy"
    ),
    Variant.ADAPTIVE: VariantSpec(
        Variant.ADAPTIVE,
        "deployments/examples/cpu-tiny-adaptive.yaml",
        None,
        "SGLang speculative_adaptive (steps [0,1,3])",
    ),
}


class LauncherError(RuntimeError):
    """The app could not be brought up in the asked variant."""


class AppLauncher(Protocol):
    def start(self, variant: Variant) -> str:
        """Bring the app up in `variant`; return its base URL once it answers."""
        ...

    def stop(self) -> None:
        """Leave things as found (stop what was started, reset overrides)."""
        ...


def parse_variant_configs(
    items: list[str], base: Mapping[Variant, VariantSpec] = DEFAULT_SPECS
) -> dict[Variant, VariantSpec]:
    """Apply `VARIANT=PATH` items (from `--variant-config`) to the specs."""
    specs = dict(base)
    for item in items:
        name, eq, path = item.partition("=")
        try:
            v = Variant(name.strip())
        except ValueError as e:
            raise LauncherError(
                f"--variant-config {item!r}: variant must be one of on, off, dynamic, adaptive"
            ) from e
        if not eq or not path.strip():
            raise LauncherError(f"--variant-config {item!r}: expected VARIANT=PATH")
        specs[v] = replace(specs[v], config=path.strip())
    return specs


def fleet_ready(client: SpecflipClient) -> tuple[bool, str]:
    """Whether every replica the app was deployed with reports to the policy (an app without
    the specflip status API counts as ready once it answers), and a note on what is missing.
    Serve answers /v1/models as soon as one replica is up; an override sent before the
    replicas register would miss them."""
    doc = client.status()
    if doc is None:
        return True, "no specflip status API"
    live = [d for d in doc.get("replicas") or [] if not d.get("stale")]
    expected = doc.get("expected_replicas") or 1
    return len(live) >= expected, f"{len(live)}/{expected} replicas reporting"


def wait_for_override(
    client: SpecflipClient,
    mode: str,
    timeout: float = 60.0,
    flip_timeout: float = 10.0,
    log: Callable[[str], None] = print,
) -> None:
    """Block until every replica reports the override; then, for on/off, until every replica's
    engine runs in that mode (`engine.enabled`; a replica whose engine document has no `enabled`,
    e.g. an app from before it, by its `mode`), sending short requests meanwhile: a held engine takes the mode
    at its next step, the flip reaches the status with the replica's next report, and the `mode`
    of an idle engine is the requested one already. Not flipped by `timeout + flip_timeout`: a
    line, no error (the measurement goes ahead)."""
    t0 = time.time()
    while True:
        doc = client.status()
        if doc is None:
            raise ControlError("the app has no /specflip/status: it cannot be switched by override")
        last = list(doc.get("replicas") or [])
        if last and all(r.get("override") == mode for r in last):
            break
        if time.time() - t0 > timeout:
            state = ", ".join(f"{r['replica_id']}:override={r.get('override')}" for r in last)
            raise ControlError(f"replicas did not take override={mode} within {timeout:.0f}s ({state})")
        time.sleep(0.25)
    if mode == "auto":
        return
    model: str | None = None
    models_asked = False
    while not all(_engine_on(r) is (mode == "on") for r in last):
        left = t0 + timeout + flip_timeout - time.time()
        if left < 0:
            state = " ".join(f"{r['replica_id']}:{_engine_on(r)}" for r in last)
            log(f"[launch] note: override={mode} set, engines not flipped (enabled: {state}); going ahead")
            return
        try:  # an idle engine flips only at its next step: give it one
            if not models_asked:  # once: an app without models does not grow one while we wait
                model, models_asked = next(iter(client.models()), None), True
            if model is not None:
                client.probe(model, api="completions", timeout=max(left, 5.0))
        except (ControlError, httpx.HTTPError) as e:
            log(f"[launch] note: override={mode} set, a request to flip the engines failed: {e}")
            return
        time.sleep(0.25)
        last = client.replicas() or last


def _engine_on(replica: Mapping[str, Any]) -> bool | None:
    """Whether a replica's engine runs speculation (by its `mode` where it has no engine document)."""
    engine = replica.get("engine")
    if isinstance(engine, Mapping) and isinstance(engine.get("enabled"), bool):
        return engine["enabled"] is True
    # an app from before the engine object had `enabled` (seen: a before/after run waited out
    # every switch on it, 2026-12-06): its `mode`
    return {"on": True, "off": False}.get(str(replica.get("mode")))


def _apply_override(client: SpecflipClient, spec: VariantSpec, log: Callable[[str], None]) -> None:
    if spec.override is None:
        return
    log(f"[launch] variant={spec.variant.value} override={spec.override} for all replicas")
    client.override(spec.override)
    wait_for_override(client, spec.override, log=log)


class ExternalApp:
    """An app someone else started; variants are reached by override only."""

    def __init__(
        self,
        url: str,
        token: str,
        specs: Mapping[Variant, VariantSpec] = DEFAULT_SPECS,
        log: Callable[[str], None] = print,
    ) -> None:
        self.url = url.rstrip("/")
        self.client = SpecflipClient(self.url, token, timeout=10.0)
        self.specs = specs
        self.log = log
        self._found: dict[str, str] | None = None  # replica -> override before we touched it

    def supports(self, variant: Variant) -> bool:
        return self.specs[variant].override is not None

    def start(self, variant: Variant) -> str:
        spec = self.specs[variant]
        if spec.override is None:
            raise LauncherError(
                f"variant {variant.value} needs its own app ({spec.config}): use --launch-cmd"
            )
        if self._found is None:
            self._found = {r["replica_id"]: r.get("override", "auto") for r in self.client.replicas()}
        _apply_override(self.client, spec, self.log)
        return self.url

    def stop(self) -> None:
        """Put back the overrides the app had before the sweep."""
        found, self._found = self._found, None
        if found is None:
            return
        try:
            modes = set(found.values())
            if len(modes) <= 1:
                self.client.override(modes.pop() if modes else "auto")
            else:
                for rid, mode in found.items():
                    self.client.override(mode, replica_id=rid)
        except (ControlError, httpx.HTTPError) as e:
            self.log(f"[launch] could not restore the overrides {found}: {e}")


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


BIND_ATTEMPTS = 3
# what the app's log says when its HTTP port is held: specflip's own check, Serve's HAProxy, uvicorn
BIND_FAILED = ("cannot serve on", "Address already in use", "error while attempting to bind")


class CommandLauncher:
    """Starts the app with a shell command per config; kills its process group on stop."""

    def __init__(
        self,
        cmd_template: str,
        *,
        token: str = "",
        specs: Mapping[Variant, VariantSpec] = DEFAULT_SPECS,
        host: str = "127.0.0.1",
        port: int | None = None,
        ready_timeout: float = 900.0,
        stop_grace: float = 30.0,
        progress_every: float = 10.0,
        log_dir: Path | None = None,
        env: Mapping[str, str] | None = None,
        log: Callable[[str], None] = print,
    ) -> None:
        self.template = cmd_template
        self.token = token
        self.specs = specs
        self.host = host
        self.port = port
        self.ready_timeout = ready_timeout
        self.stop_grace = stop_grace
        self.progress_every = progress_every
        self.log_dir = log_dir
        self.env = dict(env) if env is not None else None
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None
        self.config: str | None = None
        self.url = ""
        self._log_path: Path | None = None
        self._log_start = 0  # where the current start's lines begin in its log

    def command(self, spec: VariantSpec, port: int) -> str:
        return (
            self.template.replace("{config}", shlex.quote(spec.config))
            .replace("{port}", str(port))
            .replace("{variant}", spec.variant.value)
        )

    def start(self, variant: Variant) -> str:
        spec = self.specs[variant]
        if spec.override is not None and not self.token:
            raise LauncherError(
                f"variant {variant.value} is set by override: pass the control token (--token)"
            )
        if self.proc is None or self.proc.poll() is not None or self.config != spec.config:
            self.stop()
            for attempt in range(BIND_ATTEMPTS):
                try:
                    self._launch(spec)
                    break
                except LauncherError:
                    # a port picked free can be taken before the app binds it (Ray's own ports are
                    # picked the same way): another free one, unless the port was given
                    if self.port is not None or attempt + 1 == BIND_ATTEMPTS or not self._bind_failed():
                        raise
                    self.stop()  # whatever the failed start left running
                    self.log(
                        f"[launch] variant={variant.value}: {self.url} was taken before the app bound it; "
                        "again on another port"
                    )
        with SpecflipClient(self.url, self.token, timeout=10.0) as client:
            _apply_override(client, spec, self.log)
        return self.url

    def _launch(self, spec: VariantSpec) -> None:
        port = self.port or free_port(self.host)
        self.url = f"http://{self.host}:{port}"
        cmd = self.command(spec, port)
        log_dir = self.log_dir or Path(".")
        log_dir.mkdir(parents=True, exist_ok=True)
        self._log_path = log_dir / f"launch-{spec.variant.value}.log"
        self._log_start = self._log_path.stat().st_size if self._log_path.exists() else 0
        self.log(f"[launch] variant={spec.variant.value} $ {cmd}  (log: {self._log_path})")
        with self._log_path.open("ab") as fh:
            self.proc = subprocess.Popen(
                cmd, shell=True, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True, env=self.env
            )
        self.config = spec.config
        self._wait_ready(spec)

    def _bind_failed(self) -> bool:
        """Whether the last start's own log lines (the log is appended to) say its port was held."""
        if self._log_path is None or not self._log_path.exists():
            return False
        with self._log_path.open("rb") as fh:
            fh.seek(self._log_start)
            text = fh.read().decode(errors="replace")
        return any(sign in text for sign in BIND_FAILED)

    def _tail(self, n: int = 20) -> str:
        if self._log_path is None or not self._log_path.exists():
            return ""
        return "\n".join(self._log_path.read_text(errors="replace").splitlines()[-n:])

    def _wait_ready(self, spec: VariantSpec) -> None:
        with SpecflipClient(self.url, self.token, timeout=5.0) as client:
            self._poll_ready(spec, client)

    def _poll_ready(self, spec: VariantSpec, client: SpecflipClient) -> None:
        t0 = time.time()
        next_note = t0 + self.progress_every
        while True:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise LauncherError(
                    f"the app exited with code {self.proc.returncode} before answering "
                    f"{self.url}/v1/models; last lines of {self._log_path}:\n{self._tail()}"
                )
            note = f"waiting for {self.url}/v1/models"
            try:
                if client.models():
                    note = f"waiting for {self.url}/specflip/status"
                    ready, note = fleet_ready(client)
                    if ready:
                        self.log(
                            f"[launch] variant={spec.variant.value} ready at {self.url} in {time.time() - t0:.0f}s"
                        )
                        return
            except (httpx.HTTPError, ValueError):
                pass
            now = time.time()
            if now - t0 > self.ready_timeout:
                self.stop()
                raise LauncherError(
                    f"{self.url} was not ready within {self.ready_timeout:.0f}s ({note}); "
                    f"last lines of {self._log_path}:\n{self._tail()}"
                )
            if now >= next_note:
                self.log(f"[launch] variant={spec.variant.value} {note} ({now - t0:.0f}s)")
                next_note = now + self.progress_every
            time.sleep(0.5)

    def stop(self) -> None:
        proc, self.proc, self.config = self.proc, None, None
        if proc is None:
            return
        self.log(f"[launch] stopping process group {proc.pid}")
        # the app's driver first (the command, and its process when a shell runs it): it shuts Serve
        # down in order (Serve's HAProxy included); a group-wide signal would hit Ray's workers first
        drivers = {proc.pid}
        with contextlib.suppress(psutil.Error):
            for p in [psutil.Process(proc.pid), *psutil.Process(proc.pid).children()]:
                drivers.add(p.pid)
                with contextlib.suppress(psutil.Error):
                    p.terminate()
        try:
            self._end_group(proc)
        finally:
            # a driver killed before its shutdown stopped HAProxy leaves it running outside the group
            # (seen in CI: a 2-replica CPU app still shutting down after the grace, 2026-12-05)
            stop_haproxy(*(haproxy_folder(pid) for pid in drivers))

    def _end_group(self, proc: subprocess.Popen[bytes]) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(self.stop_grace)
        for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, sig)
            deadline = time.time() + wait
            while time.time() < deadline and (proc.poll() is None or process_group_alive(proc.pid)):
                time.sleep(0.1)
            if proc.poll() is not None and not process_group_alive(proc.pid):
                return
        self.log(f"[launch] process group {proc.pid} survived SIGKILL: check for leftover processes")


def process_group_alive(pgid: int) -> bool:
    """Whether any non-zombie process is left in the group (zombies wait for PID 1 to reap them)."""
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        return True
    for d in proc.iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False
