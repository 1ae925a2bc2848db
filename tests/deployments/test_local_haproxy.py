"""Serve's HAProxy settings of a local app: each app process picks its own files and ports (an app
launched by another app process, as the sweep and the tests do, must not inherit the launcher's
ports: two HAProxies on one port and the second app never starts), and an operator's are kept."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from deployments import local

PICKS = """
import json, os
from deployments import local
local._haproxy_env()
print(json.dumps({k: os.environ[k] for k in local._HAPROXY_KEYS}))
"""


@pytest.fixture
def clean_env() -> Iterator[None]:
    """No HAProxy settings at the start; this process's own ones (an app fixture's) back after."""
    keys = (*local._HAPROXY_KEYS, local._HAPROXY_PICKED)
    saved = {k: os.environ.pop(k) for k in keys if k in os.environ}
    try:
        yield
    finally:
        for k in keys:
            os.environ.pop(k, None)
        os.environ.update(saved)


def _child_picks(env: dict[str, str]) -> dict[str, str]:
    out = subprocess.run([sys.executable, "-c", PICKS], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def test_an_app_launched_by_an_app_process_picks_its_own_ports_and_folder(clean_env: None) -> None:
    folder = local._haproxy_env()
    mine = {k: os.environ[k] for k in local._HAPROXY_KEYS}
    assert folder == f"/tmp/haproxy-serve-{os.getpid()}"
    assert local._haproxy_env() == folder and {k: os.environ[k] for k in local._HAPROXY_KEYS} == mine
    child = _child_picks(dict(os.environ))
    assert child["RAY_SERVE_HAPROXY_STATS_PORT"] != mine["RAY_SERVE_HAPROXY_STATS_PORT"]
    assert child["RAY_SERVE_HAPROXY_METRICS_PORT"] != mine["RAY_SERVE_HAPROXY_METRICS_PORT"]
    assert child["RAY_SERVE_HAPROXY_CONFIG_FILE_LOC"] != mine["RAY_SERVE_HAPROXY_CONFIG_FILE_LOC"]
    assert all(child[k] != mine[k] for k in local._HAPROXY_KEYS)


def test_what_an_operator_set_is_kept_in_the_app_and_in_what_it_launches(clean_env: None) -> None:
    os.environ["RAY_SERVE_HAPROXY_STATS_PORT"] = "18404"
    local._haproxy_env()
    assert os.environ["RAY_SERVE_HAPROXY_STATS_PORT"] == "18404"
    child = _child_picks(dict(os.environ))
    assert child["RAY_SERVE_HAPROXY_STATS_PORT"] == "18404"
    assert child["RAY_SERVE_HAPROXY_METRICS_PORT"] != os.environ["RAY_SERVE_HAPROXY_METRICS_PORT"]


def _listen(port: int) -> socket.socket:
    """A socket listening on `port`, every address: what a port taken since looks like to HAProxy."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port))
    s.listen()
    return s


def test_a_second_app_in_the_process_picks_a_port_taken_since_anew_and_keeps_the_rest(
    clean_env: None,
) -> None:
    folder = local._haproxy_env()
    first = {k: os.environ[k] for k in local._HAPROXY_KEYS}
    with _listen(int(first["RAY_SERVE_HAPROXY_METRICS_PORT"])):
        assert local._haproxy_env() == folder
        now = {k: os.environ[k] for k in local._HAPROXY_KEYS}
    assert now["RAY_SERVE_HAPROXY_METRICS_PORT"] != first["RAY_SERVE_HAPROXY_METRICS_PORT"]
    assert local._bindable(int(now["RAY_SERVE_HAPROXY_METRICS_PORT"]))
    assert {k: v for k, v in now.items() if k != "RAY_SERVE_HAPROXY_METRICS_PORT"} == {
        k: v for k, v in first.items() if k != "RAY_SERVE_HAPROXY_METRICS_PORT"
    }


def test_a_port_the_operator_set_is_kept_even_when_taken(clean_env: None) -> None:
    with _listen(0) as held:
        port = str(held.getsockname()[1])
        os.environ["RAY_SERVE_HAPROXY_STATS_PORT"] = port
        local._haproxy_env()
        local._haproxy_env()  # the second app in this process too: the operator's choice, not ours
        assert os.environ["RAY_SERVE_HAPROXY_STATS_PORT"] == port and not local._bindable(int(port))


def test_stop_haproxy_kills_the_haproxies_of_the_folders_given_and_no_other(tmp_path: Path) -> None:
    """Processes named haproxy (a copy of `tail`, following a file in the folder as HAProxy names its
    config there): the ones in the folders given go, the one in a folder whose name only starts the same
    stays."""
    import shutil
    import time

    binary = tmp_path / "haproxy"
    shutil.copy(shutil.which("tail") or "/usr/bin/tail", binary)
    procs = {}
    for name in ("haproxy-serve-12", "haproxy-serve-13", "haproxy-serve-123"):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "haproxy.cfg").write_text("")
        procs[name] = subprocess.Popen([str(binary), "-f", str(folder / "haproxy.cfg")])
    try:
        time.sleep(0.3)  # each process is running its binary, so its name is haproxy
        local.stop_haproxy(str(tmp_path / "haproxy-serve-12"), str(tmp_path / "haproxy-serve-13") + "/")
        assert procs["haproxy-serve-12"].wait(timeout=5) != 0
        assert procs["haproxy-serve-13"].wait(timeout=5) != 0
        assert procs["haproxy-serve-123"].poll() is None
    finally:
        for p in procs.values():
            p.kill()
            p.wait()
