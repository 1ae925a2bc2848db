"""The app's client (deployments.client), the status poller and the app launchers against the stand-in app."""

from __future__ import annotations

import contextlib
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

import psutil
import pytest

from deployments.client import ControlError, SpecflipClient
from loadtests.sweep.control import StatusPoller, mean_accept_length, on_fraction, replica_samples
from loadtests.sweep.launcher import (
    DEFAULT_SPECS,
    CommandLauncher,
    ExternalApp,
    LauncherError,
    Variant,
    VariantSpec,
    parse_variant_configs,
    process_group_alive,
    wait_for_override,
)
from tests.loadtests.conftest import TOKEN

REPO = Path(__file__).resolve().parents[3]
STANDIN = REPO / "tests" / "loadtests" / "openai_standin.py"


def test_status_and_override_round_trip(standin: Callable[..., str]) -> None:
    client = SpecflipClient(standin(), TOKEN)
    assert client.models() == ["standin-tiny"]
    first = replica_samples(client)
    assert first is not None
    assert [(s.replica_id, s.mode, s.override, s.accept_length) for s in first] == [
        ("r0", "on", "auto", 3.0),
        ("r1", "on", "auto", 3.0),
    ]
    with pytest.raises(ControlError, match="401"):
        SpecflipClient(client.base, "wrong").override("off")
    with pytest.raises(ControlError, match="400"):
        client.override("sideways")
    client.override("off")
    wait_for_override(client, "off", timeout=5)
    after = client.replicas()
    assert {(r["mode"], r["override"]) for r in after} == {("off", "off")}
    client.override("on", replica_id="r1")
    assert {r["replica_id"]: r["override"] for r in client.replicas()} == {"r0": "off", "r1": "on"}
    client.probe("standin-tiny", "completions")
    with pytest.raises(ControlError, match="404"):
        client.probe("no-such-model")


def test_poller_samples_in_the_background_and_stops(standin: Callable[..., str]) -> None:
    client = SpecflipClient(standin(), TOKEN)
    with StatusPoller(client, interval=0.1) as poller:
        time.sleep(0.55)
    n = len(poller.samples)
    assert n >= 8 and n % 2 == 0  # two replicas per poll
    assert poller._thread is not None and not poller._thread.is_alive()
    time.sleep(0.2)
    assert len(poller.samples) == n
    assert mean_accept_length(poller.samples) == 3.0 and on_fraction(poller.samples) == 1.0
    assert all(s.running == 0 and s.waiting == 0 for s in poller.samples)


def test_app_without_specflip_api(standin: Callable[..., str]) -> None:
    url = standin(mode="adaptive")
    client = SpecflipClient(url, TOKEN)
    assert client.status() is None and replica_samples(client) is None and client.replicas() == []
    with StatusPoller(client, interval=0.05) as poller:
        time.sleep(0.2)
    assert not poller.available and poller.samples == [] and mean_accept_length(poller.samples) is None
    app = ExternalApp(url, TOKEN, log=lambda _: None)
    assert not app.supports(Variant.ADAPTIVE) and app.supports(Variant.ON)
    with pytest.raises(LauncherError, match="--launch-cmd"):
        app.start(Variant.ADAPTIVE)
    with pytest.raises(ControlError, match="404"):
        app.start(Variant.ON)


def test_external_app_switches_by_override_and_restores_what_it_found(standin: Callable[..., str]) -> None:
    url = standin()
    client = SpecflipClient(url, TOKEN)
    client.override("on", replica_id="r1")  # an operator had pinned r1 before the sweep
    logs: list[str] = []
    app = ExternalApp(url, TOKEN, log=logs.append)
    assert app.start(Variant.OFF) == url
    assert {r["override"] for r in client.replicas()} == {"off"}
    assert app.start(Variant.DYNAMIC) == url
    assert {r["override"] for r in client.replicas()} == {"auto"}
    app.stop()
    assert {r["replica_id"]: r["override"] for r in client.replicas()} == {"r0": "auto", "r1": "on"}
    assert logs == [
        "[launch] variant=off override=off for all replicas",
        "[launch] variant=dynamic override=auto for all replicas",
    ]


def test_variant_configs_replace_paths_only() -> None:
    specs = parse_variant_configs(["adaptive=/cfg/adaptive 2.yaml", " on = a.yaml"])
    assert specs[Variant.ADAPTIVE] == VariantSpec(
        Variant.ADAPTIVE, "/cfg/adaptive 2.yaml", None, DEFAULT_SPECS[Variant.ADAPTIVE].label
    )
    assert specs[Variant.ON].config == "a.yaml" and specs[Variant.ON].override == "on"
    assert specs[Variant.OFF] == DEFAULT_SPECS[Variant.OFF]
    for bad in (["fast=x"], ["on"], ["on="]):
        with pytest.raises(LauncherError):
            parse_variant_configs(bad)


def test_command_template_substitution_quotes_the_config() -> None:
    launcher = CommandLauncher("serve --config {config} --port {port} --tag {variant} --json '{\"a\": 1}'")
    spec = replace_config(Variant.DYNAMIC, "my cfg.yaml")
    assert (
        launcher.command(spec, 8123)
        == "serve --config 'my cfg.yaml' --port 8123 --tag dynamic --json '{\"a\": 1}'"
    )


def replace_config(v: Variant, config: str) -> VariantSpec:
    return VariantSpec(v, config, DEFAULT_SPECS[v].override, DEFAULT_SPECS[v].label)


SPECS = {v: replace_config(v, "adaptive" if v is Variant.ADAPTIVE else "dynamic") for v in Variant}


def _refused(url: str, wait_s: float = 0.0) -> bool:
    """Nothing listens at `url`'s port (within `wait_s`). A connect that reaches itself (the kernel
    picking the port as its own source port: TCP simultaneous open) is no listener either."""
    parts = urlsplit(url)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            sock = socket.create_connection((parts.hostname, parts.port), timeout=1)
        except OSError:
            return True
        with sock:
            if sock.getsockname() == sock.getpeername():
                return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)


def _listeners(url: str) -> str:
    """Who listens at `url`'s port, for an assertion's message."""
    port = urlsplit(url).port
    try:
        found = [c for c in psutil.net_connections("tcp") if c.laddr and c.laddr.port == port]
        return "; ".join(
            f"pid {c.pid} ({psutil.Process(c.pid).cmdline() if c.pid else '?'}) {c.status}" for c in found
        )
    except (psutil.Error, OSError) as err:
        return f"listeners unknown: {err!r}"


def test_command_launcher_starts_reuses_restarts_and_kills_the_group(tmp_path: Path) -> None:
    template = (
        f"{shlex.quote(sys.executable)} {shlex.quote(str(STANDIN))} --port {{port}} --mode {{config}} "
        f"--token {TOKEN} --startup-delay 1.2 --register-delay 1.0"
    )
    logs: list[str] = []
    launcher = CommandLauncher(
        template, token=TOKEN, specs=SPECS, log_dir=tmp_path, log=logs.append, progress_every=0.5
    )
    try:
        url = launcher.start(Variant.ON)
        assert launcher.proc is not None
        first_pid = launcher.proc.pid
        assert any("waiting for" in line and "/v1/models" in line for line in logs)  # progress while starting
        # /v1/models answers before the replicas report: ready waits for them, so the override hits all
        assert any("0/2 replicas reporting" in line for line in logs)
        assert any(line.startswith("[launch] variant=on ready at") for line in logs)
        assert {r["mode"] for r in SpecflipClient(url, TOKEN).replicas()} == {"on"}

        assert launcher.start(Variant.DYNAMIC) == url  # same config: same process, override only
        assert launcher.proc.pid == first_pid
        assert {r["override"] for r in SpecflipClient(url, TOKEN).replicas()} == {"auto"}

        url2 = launcher.start(Variant.ADAPTIVE)  # other config: restart
        assert launcher.proc.pid != first_pid and not process_group_alive(first_pid) and _refused(url)
        assert SpecflipClient(url2, TOKEN).status() is None  # the adaptive stand-in has no specflip API
        pid2 = launcher.proc.pid
    finally:
        launcher.stop()
    assert not process_group_alive(pid2)
    # the port is free once the group is gone (one fresh-clone CI run found it answering right after
    # stop, 2026-12-05: a short wait, and the listener named if it happens again)
    assert _refused(url2, wait_s=5.0), _listeners(url2)
    assert (tmp_path / "launch-adaptive.log").read_text().startswith("standin listening on")


def test_command_launcher_reports_an_early_exit_with_the_log_tail(tmp_path: Path) -> None:
    launcher = CommandLauncher(
        "echo booting; echo 'bad config {config}'; exit 3",
        specs=SPECS,
        token=TOKEN,
        log_dir=tmp_path,
        log=lambda _: None,
    )
    with pytest.raises(LauncherError, match=r"exited with code 3(.|\n)*bad config dynamic"):
        launcher.start(Variant.DYNAMIC)


def test_command_launcher_takes_another_port_when_the_app_could_not_bind(tmp_path: Path) -> None:
    """The first start finds its port taken (HAProxy's line), the second runs: one variant, two ports."""
    marker = tmp_path / "tried"
    template = (
        f"if [ ! -e {marker} ]; then touch {marker}; echo 'boot on {{port}}'; "
        "echo 'cannot bind socket (Address already in use) for [0.0.0.0:{port}]'; exit 1; fi; "
        f"exec {shlex.quote(sys.executable)} {shlex.quote(str(STANDIN))} --port {{port}} --mode {{config}} "
        f"--token {TOKEN}"
    )
    logs: list[str] = []
    launcher = CommandLauncher(template, token=TOKEN, specs=SPECS, log_dir=tmp_path, log=logs.append)
    try:
        url = launcher.start(Variant.ON)
        assert any("was taken before the app bound it; again on another port" in line for line in logs), logs
        assert {r["mode"] for r in SpecflipClient(url, TOKEN).replicas()} == {"on"}
        first_port = (tmp_path / "launch-on.log").read_text().split("boot on ")[1].split()[0]
        assert urlsplit(url).port != int(first_port)
    finally:
        launcher.stop()


def test_command_launcher_keeps_a_given_port_and_other_failures_final(tmp_path: Path) -> None:
    held = "echo 'boot'; echo 'cannot bind socket (Address already in use)'; exit 1"
    given = CommandLauncher(held, token=TOKEN, specs=SPECS, port=8123, log_dir=tmp_path, log=lambda _: None)
    with pytest.raises(LauncherError, match="Address already in use"):
        given.start(Variant.ON)
    assert (tmp_path / "launch-on.log").read_text().count("boot") == 1  # the user's port: no second try
    other = CommandLauncher(
        "echo 'boot'; exit 3", token=TOKEN, specs=SPECS, log_dir=tmp_path, log=lambda _: None
    )
    with pytest.raises(LauncherError, match="exited with code 3"):
        other.start(Variant.OFF)
    assert (tmp_path / "launch-off.log").read_text().count("boot") == 1


def test_command_launcher_times_out_and_kills(tmp_path: Path) -> None:
    launcher = CommandLauncher(
        "sleep 60", specs=SPECS, token=TOKEN, ready_timeout=1.0, log_dir=tmp_path, log=lambda _: None
    )
    with pytest.raises(LauncherError, match=r"not ready within 1s \(waiting for http"):
        launcher.start(Variant.ON)
    assert launcher.proc is None


def test_override_variants_need_a_token() -> None:
    with pytest.raises(LauncherError, match="token"):
        CommandLauncher("true", specs=SPECS).start(Variant.OFF)


def _standin_haproxy(tmp_path: Path) -> Path:
    """A stand-in HAProxy (an injected leftover): a copy of sh, so its process is named haproxy."""
    fake = tmp_path / "bin" / "haproxy"
    fake.parent.mkdir()
    fake.write_bytes(Path("/bin/sh").read_bytes())
    fake.chmod(0o755)
    return fake


def _haproxies(folder: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if p.name() == "haproxy" and any(folder + "/" in arg for arg in p.cmdline()):
                found.append(p)
    return found


def test_stop_ends_the_haproxy_an_app_left_outside_its_group(tmp_path: Path) -> None:
    """Serve's HAProxy runs outside the app process's group; an app killed before its own shutdown
    stopped it (a CPU app still shutting down after the grace, CI 2026-12-05) left it holding its
    ports. The launcher ends it by the launched process's folder, and only that one."""
    fake = _standin_haproxy(tmp_path)
    other = subprocess.Popen(  # another app's HAProxy, a folder whose name starts the same: kept
        ["setsid", str(fake), "-c", "sleep 300; true", "/tmp/haproxy-serve-1/x/haproxy.cfg"]
    )
    template = (
        # in a subshell that exits: no child of the app's processes, as HAProxy is a Ray worker's child
        f"(setsid {fake} -c 'sleep 300; true' /tmp/haproxy-serve-$$/x/haproxy.cfg &); "
        f"exec {shlex.quote(sys.executable)} {shlex.quote(str(STANDIN))} --port {{port}} --mode {{config}} "
        f"--token {TOKEN}"
    )
    launcher = CommandLauncher(template, token=TOKEN, specs=SPECS, log_dir=tmp_path, log=lambda _: None)
    try:
        launcher.start(Variant.ON)
        assert launcher.proc is not None
        folder = f"/tmp/haproxy-serve-{launcher.proc.pid}"
        deadline = time.time() + 5
        while not _haproxies(folder) and time.time() < deadline:
            time.sleep(0.1)
        (leftover,) = _haproxies(folder)
    finally:
        launcher.stop()
    try:
        with contextlib.suppress(psutil.TimeoutExpired):
            leftover.wait(5)
        assert _haproxies(folder) == []
        assert other.poll() is None  # /tmp/haproxy-serve-1 is not the launched app's folder
    finally:
        other.kill()
        other.wait()
