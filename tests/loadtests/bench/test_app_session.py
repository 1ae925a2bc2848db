"""`loadtests.bench.app_session`: the replica's engine log comes back with the results, and the app
of another source tree starts with that tree's modules."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from loadtests.bench.app_session import app_command, keep_logs


def test_keep_logs_copies_each_worker_log_and_names_one_it_cannot_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ray_logs = tmp_path / "ray"
    ray_logs.mkdir()
    err = ray_logs / "worker-ab-123.err"
    out = ray_logs / "worker-ab-123.out"
    err.write_text(
        "[2026-12-04 19:30:01] Decode batch, #running-req: 126, gen throughput (token/s): 5400.1\n"
    )
    out.write_text("specflip replica up\n")
    gone = ray_logs / "worker-cd-456.err"  # rotated away before the sweep ended

    kept = keep_logs([err, out, gone], tmp_path / "sweep" / "app", "replica")

    assert [p.name for p in kept] == ["replica-0.err", "replica-1.out"]
    assert [p.read_text() for p in kept] == [err.read_text(), out.read_text()]
    assert f"log {gone} not kept" in capsys.readouterr().out


def test_app_command_starts_the_app_of_another_tree_with_none_of_this_trees_modules(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--app-tree`: a before/after on one host runs an older commit's app; its `python -m
    deployments` must be that tree's, even with this tree's root on PYTHONPATH (the GPU chain's)."""
    here = Path(__file__).resolve().parents[3]
    other = tmp_path / "before"  # a stand-in tree whose app only says where it was loaded from
    (other / "deployments").mkdir(parents=True)
    (other / "deployments" / "__init__.py").write_text("")
    (other / "deployments" / "__main__.py").write_text(
        "import sys, deployments, policy\nprint(deployments.__file__, policy.__file__, sys.argv[1:])\n"
    )
    (other / "policy").mkdir()
    (other / "policy" / "__init__.py").write_text("")
    site = tmp_path / "site"
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(here), str(site)]))

    cmd, env = app_command(other)

    assert env["PYTHONPATH"].split(os.pathsep) == [str(other.resolve()), str(site)]
    line = cmd.replace("{config}", "/abs/cfg.yaml").replace("{port}", "8123")
    done = subprocess.run(line, shell=True, env=env, cwd=here, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    loaded = done.stdout.split()
    assert loaded[0] == str(other.resolve() / "deployments" / "__init__.py")
    assert loaded[1] == str(other.resolve() / "policy" / "__init__.py")
    assert "'/abs/cfg.yaml'" in done.stdout and "'8123'" in done.stdout

    plain, plain_env = app_command(None)  # this tree's app: the environment as it is
    assert plain.startswith(f"{sys.executable} -m deployments serve") and plain_env["PYTHONPATH"] == str(
        os.environ["PYTHONPATH"]
    )
    with pytest.raises(SystemExit, match="--app-tree .*no deployments/__main__.py"):
        app_command(tmp_path / "site")


def test_a_target_that_does_not_answer_is_named_in_one_line(tmp_path: Path) -> None:
    """client_sweep and client_transition print this error and exit 1 (no traceback)."""
    import argparse

    from loadtests.bench.app_session import AppSession
    from loadtests.sweep.launcher import LauncherError

    args = argparse.Namespace(target="http://127.0.0.1:9", config="deployments/examples/cpu-tiny.yaml")
    session = AppSession(args, ["off"], tmp_path)
    try:
        with pytest.raises(LauncherError, match=r"no specflip app answers at http://127\.0\.0\.1:9: "):
            session.switch("off")
    finally:
        session.close()
