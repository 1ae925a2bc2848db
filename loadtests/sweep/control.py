"""Replica states over a run: typed samples of `/specflip/status` and a background poller.

The requests go through the app's client (`deployments.client.SpecflipClient`). An app without
the specflip API (e.g. SGLang's own `speculative_adaptive`) answers 404: the poller then records
nothing and says so once.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from deployments.client import SpecflipClient

__all__ = ["ReplicaSample", "StatusPoller", "mean_accept_length", "on_fraction", "replica_samples"]


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
    flips: int = 0
    override: str = "auto"

    @classmethod
    def from_status(cls, t: float, d: dict[str, Any]) -> ReplicaSample:
        acc = d.get("accept_length")
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
        )


def replica_samples(client: SpecflipClient) -> list[ReplicaSample] | None:
    """Every replica's state now, or None when the app has no specflip status API (404)."""
    doc = client.status()
    if doc is None:
        return None
    now = time.time()
    return [ReplicaSample.from_status(now, d) for d in doc.get("replicas") or []]


@dataclass
class StatusPoller:
    """Polls `/specflip/status` every `interval` seconds in a background thread."""

    client: SpecflipClient
    interval: float = 0.5
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
            self._thread.join(timeout=self.client.timeout + self.interval)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
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


def on_fraction(samples: list[ReplicaSample]) -> float | None:
    """Fraction of replica samples running speculation ON (None without samples)."""
    return sum(1 for s in samples if s.mode == "on") / len(samples) if samples else None
