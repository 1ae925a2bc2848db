"""Run Locust headless in a subprocess and collect its per-request records while it runs.

A subprocess, not Locust's library API in-process: Locust monkey-patches the
interpreter with gevent on import, which the sweep runner (threads, subprocesses,
matplotlib) must not inherit; a subprocess also gives each run a clean process.
The command is the one a person would type (see `locust_command`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from loadtests.locust.config import LoadConfig
from loadtests.locust.records import RequestRecord
from loadtests.sim.trace import Phase

__all__ = ["LOCUSTFILE", "LocustError", "LocustRun", "RecordTail", "locust_command", "run_locust"]

LOCUSTFILE = Path(__file__).resolve().with_name("locustfile.py")
REPO_ROOT = LOCUSTFILE.parents[2]


class LocustError(RuntimeError):
    """Locust did not run to completion."""


@dataclass
class RecordTail:
    """Reads the JSONL records of a run incrementally (only complete lines)."""

    out_dir: Path
    records: list[RequestRecord] = field(default_factory=list)
    _offsets: dict[Path, int] = field(default_factory=dict)

    def poll(self) -> list[RequestRecord]:
        for path in sorted(self.out_dir.glob("requests-*.jsonl")):
            with path.open("rb") as fh:
                fh.seek(self._offsets.get(path, 0))
                data = fh.read()
            end = data.rfind(b"\n") + 1
            if end == 0:
                continue
            self._offsets[path] = self._offsets.get(path, 0) + end
            for line in data[:end].decode("utf-8", errors="replace").splitlines():
                if line.strip():
                    try:
                        self.records.append(RequestRecord.from_json(line))
                    except (ValueError, TypeError):
                        continue
        return self.records


@dataclass(frozen=True)
class LocustRun:
    """What one Locust run left behind. `t0`: epoch time of the shape's run time 0."""

    out_dir: Path
    returncode: int
    t0: float
    phases: tuple[Phase, ...]
    records: list[RequestRecord]

    @property
    def load_start(self) -> float:
        """When the first request left: `t0` with one process; with `--processes` the
        workers get their users from the master a moment (~1 s) after `t0`."""
        return min((r.start for r in self.records), default=self.t0)


def locust_command(
    host: str,
    config_path: Path,
    csv_prefix: Path,
    stop_timeout: float,
    processes: int = 1,
    locustfile: Path = LOCUSTFILE,
) -> list[str]:
    # --processes N forks N worker processes (one core each) under a master that runs the shape
    extra = ["--processes", str(processes)] if processes > 1 else []
    return [
        sys.executable, "-m", "locust", "-f", str(locustfile), "--headless", "--host", host,
        "--csv", str(csv_prefix), "--only-summary", "--exit-code-on-error", "0",
        "--stop-timeout", f"{stop_timeout:g}", "--loglevel", "WARNING", "--lt-config", str(config_path), *extra,
    ]  # fmt: skip


def _tail(path: Path, n: int = 25) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-n:]) if path.exists() else ""


def run_locust(
    host: str,
    cfg: LoadConfig,
    out_dir: Path,
    *,
    stop_timeout: float = 0.0,
    on_progress: Callable[[float, list[RequestRecord]], None] | None = None,
    progress_every: float = 5.0,
    start_timeout: float = 120.0,
    processes: int = 1,
    locustfile: Path = LOCUSTFILE,
    env: dict[str, str] | None = None,
) -> LocustRun:
    """Run the shape of `cfg` against `host`; records go to `out_dir`. `locustfile` picks the users
    (loadtests/locust/two_class.py: interactive and batch), `env` adds to Locust's environment."""
    out_dir.mkdir(parents=True, exist_ok=True)
    cfg = cfg.replace(out_dir=str(out_dir))
    config_path = out_dir / "loadtest.json"
    config_path.write_text(cfg.to_json())
    log_path = out_dir / "locust.log"
    cmd = locust_command(host, config_path, out_dir / "locust", stop_timeout, processes, locustfile)
    env = {**os.environ, **(env or {})}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH", "")]))
    limit = cfg.schedule.duration + stop_timeout + start_timeout
    tail = RecordTail(out_dir)
    started = time.time()
    with log_path.open("wb") as log:
        (out_dir / "command.txt").write_text(" ".join(cmd) + "\n")
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO_ROOT, env=env)
        try:
            next_note = started + progress_every
            while proc.poll() is None:
                time.sleep(0.2)
                now = time.time()
                if now - started > limit:
                    proc.kill()
                    proc.wait()
                    raise LocustError(
                        f"locust ran past {limit:.0f}s; last lines of {log_path}:\n{_tail(log_path)}"
                    )
                if on_progress is not None and now >= next_note:
                    on_progress(now, tail.poll())
                    next_note = now + progress_every
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    if proc.returncode != 0:
        raise LocustError(
            f"locust exited with code {proc.returncode}; last lines of {log_path}:\n{_tail(log_path)}"
        )
    meta_path = out_dir / "run_meta.json"
    if not meta_path.exists():
        raise LocustError(f"locust wrote no {meta_path.name}; last lines of {log_path}:\n{_tail(log_path)}")
    meta = json.loads(meta_path.read_text())
    phases = tuple(Phase(**p) for p in meta["phases"])
    return LocustRun(out_dir, proc.returncode, float(meta["t0"]), phases, list(tail.poll()))
