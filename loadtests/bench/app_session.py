"""The app the benchmark clients drive: one `specflip serve` (or an app that runs already) held ON,
held OFF or left to its policy (`dynamic`) by the operator override, with the engine's own token
count (the replicas' status) and, where the one replica's engine logs at info, its batch and queue."""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx

__all__ = [
    "APP_VARIANTS",
    "AppSession",
    "Served",
    "add_app_args",
    "app_command",
    "app_variants",
    "keep_logs",
    "settle",
    "log",
]

APP_VARIANTS = {"on": "on", "off": "off", "dynamic": "auto"}  # variant -> the override that makes it


def add_app_args(p: argparse.ArgumentParser) -> None:
    """Which app the client drives: one it starts from this tree (default), from another tree, or
    one that runs already."""
    p.add_argument(
        "--target",
        help="URL of an app that runs already: its variants by override ($SPECFLIP_CONTROL_TOKEN), "
        "no app started; --config still names the model and the raw servers' engine",
    )
    p.add_argument(
        "--app-tree",
        type=Path,
        help="start the app from this source tree instead of this one (e.g. an older commit's, "
        "`git archive REV | tar -x -C DIR`), with --config's engine and model: a before/after on one host",
    )


def app_command(tree: Path | None, python: str = sys.executable) -> tuple[str, dict[str, str]]:
    """The app's launch command ({config}, {port} left for the launcher) and its environment. From
    another tree, the command runs there with that tree first on PYTHONPATH and this tree's root
    off it, so no module of this tree stands in for one the other tree lacks."""
    env = dict(os.environ)
    cmd = f"{python} -m deployments serve --config {{config}} --port {{port}}"
    if tree is None:
        return cmd, env
    tree = tree.resolve()
    if not (tree / "deployments" / "__main__.py").is_file():
        raise SystemExit(f"--app-tree {tree}: no deployments/__main__.py there (a specflip source tree?)")
    here = Path(__file__).resolve().parents[2]
    kept = [e for e in env.get("PYTHONPATH", "").split(os.pathsep) if e and Path(e).resolve() != here]
    env["PYTHONPATH"] = os.pathsep.join([str(tree), *kept])
    return f"cd {shlex.quote(str(tree))} && exec {cmd}", env


def log(msg: str) -> None:
    print(f"[client-sweep {time.strftime('%H:%M:%S')}] {msg}", flush=True)


@dataclass
class Served:
    """One app variant, ready: its URL, a control client, the engine's token count and its log lines."""

    variant: str
    url: str
    client: Any  # deployments.client.SpecflipClient with the control token
    referee: Any  # loadtests.rawvsapp.referee.StatusReferee
    lines: Any  # loadtests.rawvsapp.referee.LogReferee over the one replica's engine log, or None


class AppSession:
    """One app for several variants (on, off, dynamic): `args.target` (an app that runs already, its
    overrides put back at `close`) or one `specflip serve --config args.config`; `switch(v)` sets
    v's override and gives the app back ready for it. The app starts on the first switch."""

    def __init__(self, args: argparse.Namespace, variants: list[str], out: Path) -> None:
        from loadtests.sweep.launcher import CommandLauncher, ExternalApp, Variant, VariantSpec

        self.token = os.environ.get("SPECFLIP_CONTROL_TOKEN") or "client-sweep"
        self.target: str | None = args.target
        specs = {
            Variant(v): VariantSpec(Variant(v), str(args.config), APP_VARIANTS[v], f"app {v}")
            for v in variants
        }
        self.launcher: CommandLauncher | ExternalApp
        if args.target:
            self.launcher = ExternalApp(args.target, self.token, specs=specs, log=log)
        else:
            tree = getattr(args, "app_tree", None)
            if tree is not None:  # the app starts in the other tree's folder: the config by its full path
                specs = {
                    v: replace(spec, config=str(Path(spec.config).resolve())) for v, spec in specs.items()
                }
            cmd, env = app_command(tree)
            env["SPECFLIP_CONTROL_TOKEN"] = self.token
            self.launcher = CommandLauncher(
                cmd, token=self.token, specs=specs, ready_timeout=args.ready_timeout, log_dir=out / "app",
                env=env, log=log,
            )  # fmt: skip
        self._out = out
        self._url = ""
        self._client: Any = None
        self._referee: Any = None
        self._lines: Any = None

    def switch(self, variant: str) -> Served:
        from deployments.client import SpecflipClient
        from loadtests.rawvsapp.profiles import serving_processes
        from loadtests.rawvsapp.referee import LogReferee, StatusReferee, replica_log_paths
        from loadtests.sweep.launcher import LauncherError, Variant

        try:
            url = self.launcher.start(Variant(variant))
        except httpx.HTTPError as e:  # an app given by --target that does not answer
            raise LauncherError(f"no specflip app answers at {self.target or 'the app started'}: {e}") from e
        if url != self._url:  # the first start, or the app started again after it died
            self._close_clients()
            self._url, self._referee = url, StatusReferee(url)
            self._client = SpecflipClient(url, self.token, timeout=10.0)
            proc = getattr(self.launcher, "proc", None)
            logs = (
                [] if proc is None else replica_log_paths(serving_processes("app", proc.pid).get("replica"))
            )
            # one replica whose engine logs at info: its batch and queue
            self._lines = LogReferee(logs) if logs else None
        return Served(variant, url, self._client, self._referee, self._lines)

    def _close_clients(self) -> None:
        for part in (self._referee, self._client):
            if part is not None:
                part.close()
        self._url, self._client, self._referee, self._lines = "", None, None, None

    def close(self) -> None:
        try:
            self._keep_replica_logs()
            self._close_clients()
        finally:
            self.launcher.stop()

    def _keep_replica_logs(self) -> None:
        if self._lines is not None:
            keep_logs(self._lines.log_paths, self._out / "app", "replica")


def settle(policy: Any) -> None:
    """Idle after a warm-up at a high level until the app's policy can have decided for low load again
    (turning ON waits up to `on_persist_max_s` of low load, `dwell_s` after the last flip), so the first
    measured run starts in the mode the policy gives its load, not the warm-up's."""
    pause = policy.longest_on_wait_s + policy.dwell_s + 2 * policy.tick_s
    log(f"app settles {pause:.1f} s after its warm-up (turning ON's wait + dwell_s + two ticks)")
    time.sleep(pause)


def keep_logs(paths: list[Path], folder: Path, name: str) -> list[Path]:
    """Copy a replica's Ray worker logs (its engine's prefill and decode lines, step by step) into
    `folder` as NAME-K.out / .err, beside the raw servers' logs: Ray's session folder does not come
    back from a GPU host, and these lines split the engine's step time from the serving path's.
    Returns the copies; a log that cannot be read is named in a line, not raised."""
    kept = []
    for k, path in enumerate(paths):
        dest = folder / f"{name}-{k}{path.suffix}"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, dest)
        except OSError as err:
            log(f"log {path} not kept: {err}")
            continue
        kept.append(dest)
    return kept


def app_variants(args: argparse.Namespace, variants: list[str], out: Path) -> Iterator[Served]:
    """Each of `variants` on one app, in turn (a transition runs every phase per variant)."""
    session = AppSession(args, variants, out)
    try:
        for v in variants:
            yield session.switch(v)
    finally:
        session.close()
