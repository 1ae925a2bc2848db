"""Where the CPU goes during one `client_sweep` run (`--profile-at C,...`): every process on the
serving path and the client, sampled at once by py-spy with each one's CPU use over the same window
(`loadtests.rawvsapp.profiles.record`), from `delay_s` after the run's start for `seconds`.

The app's processes are Ray Serve's proxy, HAProxy, Ray's LLMRouter, the first `SpecFlipServer`
replica and that replica's SGLang scheduler and detokenizer (found by their titles on the host); a raw
server's are its HTTP + tokenizer process, scheduler and detokenizer; the client is this process
(SGLang's benchmark client runs in it). Why: at c=256 on the H200 the app's OFF engine stepped 0.91x
of SGLang's plain server while the engine alone steps 0.98x, and whether the scheduler process shares
its cores with the serving processes is the open question (a scheduler near one full core with
others busy beside it, against the same scheduler in SGLang's server).

Writes `profiles/<run>/<process>.txt` (py-spy's raw stacks) and appends the run's tables to
`profiles.md` (CPU cores per process, the top functions of each) in the sweep's --out.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from types import TracebackType

from loadtests.rawvsapp.profiles import ProcessProfile, profiles_markdown, record, serving_processes
from loadtests.servers import CpuMeter

__all__ = ["DELAY_S", "FRONT", "SECONDS", "RunCpu", "RunProfile", "serving_pids"]

DELAY_S = 5.0  # past the first wave's ramp (~2.5 s at c=256 on the H200)
SECONDS = 10.0  # a wave and the gap after it at c=256


def serving_pids(raw_pid: int | None) -> dict[str, int]:
    """Process name -> pid: a raw SGLang server's (`raw_pid`: its HTTP process) or else the app's on
    this host, and the client (this process)."""
    found = serving_processes("raw", raw_pid) if raw_pid is not None else serving_processes("app")
    return {**found, "client": os.getpid()}


FRONT = ("replica", "http+tokenizer")  # the process that serves HTTP and runs SGLang's tokenizer manager


class RunCpu:
    """CPU cores each serving process used over one whole run (user + system, each process alone:
    `loadtests.servers.CpuMeter`; no sampling), every run at every level: whether the process in
    front of the engine (the app's replica, SGLang's HTTP + tokenizer process), the scheduler or the
    client (this process) nears a full core."""

    def __init__(self, pids: dict[str, int]) -> None:
        found = {name: [pid] for name, pid in pids.items()}
        self._meter = CpuMeter(lambda: found, children=False)
        self.cores: dict[str, float] = {}

    @property
    def wall_s(self) -> float:
        return self._meter.wall_s

    def __enter__(self) -> RunCpu:
        self._meter.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.cores = self._meter.stop()

    def front(self) -> float | None:
        return next((self.cores[name] for name in FRONT if name in self.cores), None)

    def front_us_per(self, tokens: int) -> float | None:
        """The front process's CPU microseconds per output token (SGLang's client's warm-up request
        falls inside the run's wall time and its tokens are not counted: one of hundreds)."""
        front = self.front()
        return None if front is None or tokens <= 0 else round(1e6 * front * self.wall_s / tokens, 1)


class RunProfile:
    """A context around one client run: samples `pids` from `delay_s` after entry for `seconds` (on a
    thread; a run that ends before `delay_s` is not sampled), then writes what it found."""

    def __init__(
        self, pids: dict[str, int], out: Path, run: str, delay_s: float = DELAY_S, seconds: float = SECONDS
    ) -> None:
        self.pids, self.out, self.run = pids, out, run
        self.delay_s, self.seconds = delay_s, seconds
        self.result: list[ProcessProfile] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name=f"profile-{run}", daemon=True)

    def _sample(self) -> None:
        if not self._stop.wait(self.delay_s):
            self.result = record(self.pids, self.seconds, self.out / "profiles" / self.run)

    def __enter__(self) -> RunProfile:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join()
        title = f"{self.run}: {self.seconds:.0f} s from {self.delay_s:.0f} s into the run"
        if self.result:
            text = profiles_markdown(title, self.result, self.seconds)
        else:
            text = f"### {title}\n\nnot sampled: the run ended within {self.delay_s:.0f} s\n"
        with (self.out / "profiles.md").open("a") as fh:
            fh.write(text + "\n")
