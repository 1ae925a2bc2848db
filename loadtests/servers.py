"""Servers the benchmarks start and stop themselves, and the CPU they (and their clients) use.

`ServerProcess` runs one command in a process group of its own, waits until a URL answers
(noticing when the process died instead), and stops the whole group. `CpuMeter` reads the
CPU time of process trees between two instants: a client or server near `cores x 100%` is
the bottleneck of a measurement, whatever the numbers say.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import httpx
import psutil

__all__ = ["CpuMeter", "ServerError", "ServerProcess", "tree_cpu_seconds"]


class ServerError(RuntimeError):
    """A server did not come up; the message ends with the last lines of its log."""


class ServerProcess:
    """`cmd` in its own session; `wait_ready(url)`; `stop()` ends the whole group."""

    def __init__(
        self,
        cmd: Sequence[str],
        log_path: Path,
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        log: Callable[[str], None] = print,
    ) -> None:
        self.cmd, self.log_path, self.log = list(cmd), log_path, log
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log(f"[server] $ {' '.join(self.cmd)}  (log: {log_path})")
        with log_path.open("ab") as fh:
            self.proc = subprocess.Popen(
                self.cmd,
                stdout=fh,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=dict(env) if env is not None else None,
                cwd=cwd,
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def tail(self, n: int = 25) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])

    def wait_ready(
        self, url: str, timeout_s: float, progress_every_s: float = 15.0, fatal: tuple[str, ...] = ()
    ) -> float:
        """Poll `url` until it answers 200; seconds it took. ServerError if the process exits first,
        or its log shows one of the `fatal` lines (a server that failed but lives on)."""
        t0 = time.monotonic()
        next_note = t0 + progress_every_s
        while True:
            if self.proc.poll() is not None:
                raise ServerError(
                    f"{self.cmd[0]} exited with code {self.proc.returncode} before {url} answered; "
                    f"last lines of {self.log_path}:\n{self.tail()}"
                )
            if fatal and any(line in self.tail(5) for line in fatal):
                self.stop()
                raise ServerError(f"{self.cmd[0]} failed before {url} answered:\n{self.tail()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url, timeout=5, follow_redirects=False).status_code == 200:
                    return time.monotonic() - t0
            now = time.monotonic()
            if now - t0 > timeout_s:
                self.stop()
                raise ServerError(
                    f"{url} did not answer within {timeout_s:.0f} s; last lines:\n{self.tail()}"
                )
            if now >= next_note:
                self.log(f"[server] waiting for {url} ({now - t0:.0f} s)")
                next_note = now + progress_every_s
            time.sleep(0.5)

    def stop(self, grace_s: float = 20.0) -> None:
        if self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        # children that left the group (SGLang's schedulers do not) still go with their parent
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)


def tree_cpu_seconds(pid: int, children: bool = True) -> float:
    """User + system CPU seconds of a process and (`children`) all its descendants (0 if it is gone)."""
    try:
        root = psutil.Process(pid)
    except psutil.Error:
        return 0.0
    procs = [root]
    if children:
        with contextlib.suppress(psutil.Error):
            procs += root.children(recursive=True)
    total = 0.0
    for p in procs:
        with contextlib.suppress(psutil.Error):
            t = p.cpu_times()
            total += t.user + t.system
    return total


class CpuMeter:
    """CPU use of process trees over a window: `start()`, later `stop() -> {name: cores busy}`.

    Process trees are looked up at both ends (`pids` is called each time), so children that
    appear or finish in between are counted as far as they were alive at the ends; with
    `children=False` each process alone (a replica without the engine processes it started).
    """

    def __init__(self, pids: Callable[[], Mapping[str, Sequence[int]]], children: bool = True) -> None:
        self.pids, self.children = pids, children
        self._t0 = 0.0
        self.wall_s = 0.0  # the last window's length (set by stop)
        self._cpu0: dict[str, float] = {}

    def _read(self) -> dict[str, float]:
        return {name: sum(tree_cpu_seconds(p, self.children) for p in ps) for name, ps in self.pids().items()}

    def start(self) -> None:
        self._t0, self._cpu0 = time.monotonic(), self._read()

    def stop(self) -> dict[str, float]:
        self.wall_s = dt = max(1e-6, time.monotonic() - self._t0)
        now = self._read()
        return {name: max(0.0, (now[name] - self._cpu0.get(name, 0.0)) / dt) for name in now}
