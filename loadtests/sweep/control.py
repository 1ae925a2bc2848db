"""Replica states over a run: typed samples of `/specflip/status` and a background poller.

The requests go through the app's client (`deployments.client.SpecflipClient`). An app without
the specflip API (e.g. SGLang's own `speculative_adaptive`) answers 404: the poller then records
nothing and says so once. SGLang's own server is sampled from its `/v1/loads` (`raw_samples`:
running and waiting requests, mode "raw"), so the app and SGLang's servers have their batch over
time measured the same way.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from deployments.client import SpecflipClient

__all__ = [
    "ReplicaSample",
    "StatusPoller",
    "load_fractions",
    "refill_gaps",
    "mean_accept_length",
    "mean_running",
    "on_fraction",
    "raw_samples",
    "replica_samples",
    "slow_step_count",
]


@dataclass(frozen=True)
class ReplicaSample:
    """One replica's state at epoch time `t`."""

    t: float
    replica_id: str
    mode: str
    desired_mode: str
    running: int
    waiting: int
    accept_length: float | None = None
    flips: int = 0  # the policy's flips of the desired mode (reported by the policy actor)
    override: str = "auto"
    # the flips the engine applied (its `toggles`): a desired mode the engine never took is not here
    engine_flips: int = 0
    report_age_s: float | None = None  # how old the replica's last report to the policy was
    # engine steps whose host call took >= 0.25 s (the engine's own count; its status lists the last ones)
    slow_steps: int = 0

    @classmethod
    def from_status(cls, t: float, d: dict[str, Any]) -> ReplicaSample:
        acc, age = d.get("accept_length"), d.get("last_report_age_s")
        return cls(
            t=t,
            replica_id=str(d["replica_id"]),
            mode=str(d.get("mode", "")),
            desired_mode=str(d.get("desired_mode", "")),
            running=int(d.get("running") or 0),
            waiting=int(d.get("waiting") or 0),
            accept_length=None if acc is None else float(acc),
            flips=int(d.get("flips") or 0),
            override=str(d.get("override", "auto")),
            engine_flips=int((d.get("engine") or {}).get("toggles") or 0),
            report_age_s=None if age is None else float(age),
            slow_steps=int((d.get("engine") or {}).get("slow_steps") or 0),
        )


def replica_samples(client: SpecflipClient) -> list[ReplicaSample] | None:
    """Every replica's state now, or None when the app has no specflip status API (404)."""
    doc = client.status()
    if doc is None:
        return None
    now = time.time()
    return [ReplicaSample.from_status(now, d) for d in doc.get("replicas") or []]


def raw_samples(base_url: str, name: str, timeout: float = 5.0) -> list[ReplicaSample] | None:
    """SGLang's server's running and waiting requests now, per data-parallel rank (its `/v1/loads`),
    as samples of mode "raw" named `name`; None when the server has no such endpoint (404)."""
    r = httpx.get(f"{base_url}/v1/loads", params={"include": "core"}, timeout=timeout)
    if r.status_code == 404:
        return None
    r.raise_for_status()
    now = time.time()
    return [
        ReplicaSample(
            t=now,
            replica_id=f"{name}/{d.get('dp_rank', 0)}",
            mode="raw",
            desired_mode="raw",
            running=int(d.get("num_running_reqs") or 0),
            waiting=int(d.get("num_waiting_reqs") or 0),
        )
        for d in r.json().get("loads") or []
    ]


@dataclass
class StatusPoller:
    """Polls `/specflip/status` every `interval` seconds in a background thread (or, given `fetch`,
    calls that instead: e.g. `raw_samples` of SGLang's server)."""

    client: SpecflipClient | None
    interval: float = 0.5
    fetch: Callable[[], list[ReplicaSample] | None] | None = None
    samples: list[ReplicaSample] = field(default_factory=list)
    available: bool = True
    errors: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> StatusPoller:
        self._thread = threading.Thread(target=self._run, name="specflip-status-poller", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            timeout = self.client.timeout if self.client is not None else 5.0
            self._thread.join(timeout=timeout + self.interval)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if self.fetch is not None:
                    got = self.fetch()
                else:
                    assert self.client is not None, "StatusPoller needs a client or a fetch"
                    got = replica_samples(self.client)
            except (httpx.HTTPError, ValueError, KeyError):
                self.errors += 1
            else:
                if got is None:
                    self.available = False
                    return
                self.samples.extend(got)
            self._stop.wait(self.interval)


def mean_accept_length(samples: list[ReplicaSample]) -> float | None:
    """Mean reported accept length over the samples that have one (None if none do)."""
    vals = [s.accept_length for s in samples if s.accept_length is not None]
    return sum(vals) / len(vals) if vals else None


def _per_time(samples: list[ReplicaSample]) -> list[tuple[float, int, int]]:
    """(t, running, waiting) per sampling time in the samples' order, the replicas sampled at that
    time summed."""
    by_time: dict[float, tuple[int, int]] = {}
    for s in samples:
        running, waiting = by_time.get(s.t, (0, 0))
        by_time[s.t] = (running + s.running, waiting + s.waiting)
    return [(t, running, waiting) for t, (running, waiting) in by_time.items()]


def load_fractions(samples: list[ReplicaSample], concurrency: int) -> tuple[float, float] | None:
    """Over the samples (summed per sampling time across replicas): the share with the batch full
    (at least 90% of `concurrency` running) and the share idle (nothing running or waiting); None
    without samples. A closed-loop client with fixed lengths runs in waves: these say how much of a
    run the engine spent at its full batch and how much waiting for the next wave."""
    points = _per_time(samples)
    if not points:
        return None
    full = sum(1 for _, running, _ in points if running >= 0.9 * concurrency)
    idle = sum(1 for _, running, waiting in points if running + waiting == 0)
    return full / len(points), idle / len(points)


def refill_gaps(samples: list[ReplicaSample], concurrency: int) -> list[float]:
    """The seconds the engine took, each time it emptied after a full wave, to hold a wave again: from
    the first sample with at most 2% of `concurrency` running or waiting (replicas summed) to the next
    with at least 80%. A closed-loop client's turnaround between waves (its last requests' ends, its
    next requests' way to the engine), at the samples' resolution (0.5 s in the sweep)."""
    gaps: list[float] = []
    emptied: float | None = None
    was_full = False
    for t, running, waiting in _per_time(samples):
        load = running + waiting
        if load >= 0.8 * concurrency:
            if emptied is not None:
                gaps.append(t - emptied)
            emptied, was_full = None, True
        elif was_full and emptied is None and load <= 0.02 * concurrency:
            emptied = t
    return gaps


def mean_running(samples: list[ReplicaSample]) -> float | None:
    """Mean running requests per sampling time (replicas summed); None without samples."""
    points = _per_time(samples)
    return sum(running for _, running, _ in points) / len(points) if points else None


def on_fraction(samples: list[ReplicaSample]) -> float | None:
    """Fraction of replica samples running speculation ON (None without samples)."""
    return sum(1 for s in samples if s.mode == "on") / len(samples) if samples else None


def flip_count(samples: list[ReplicaSample], applied: bool = False) -> int:
    """Flips inside the samples: per replica, the growth of its reported flip count (the policy's
    desired mode; `applied`: the engine's own count of flips it took)."""
    return _growth(samples, "engine_flips" if applied else "flips")


def slow_step_count(samples: list[ReplicaSample]) -> int:
    """Slow engine steps inside the samples (per replica, the growth of the engine's own count)."""
    return _growth(samples, "slow_steps")


def _growth(samples: list[ReplicaSample], counter: str) -> int:
    by_replica: dict[str, list[int]] = {}
    for s in samples:
        by_replica.setdefault(s.replica_id, []).append(getattr(s, counter))
    return sum(max(v) - v[0] for v in by_replica.values())
