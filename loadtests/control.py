"""Client for the app's own endpoints: models, specflip status/override, and a status poller.

Status format (`GET /specflip/status`), as the deployments package serves it:
`{"replicas": [{"replica_id", "mode", "desired_mode", "running", "waiting",
"accept_length", "flips", "patched", "override", "policy_source"}], "policy": {...}}`.
An app without the specflip API (e.g. SGLang's own `speculative_adaptive`) answers
404: the poller then records nothing and says so once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import requests

from loadtests.hosts import HostBoundUrls, guard_session

__all__ = [
    "ControlError",
    "ReplicaSample",
    "SpecflipClient",
    "StatusPoller",
    "mean_accept_length",
    "on_fraction",
]


class ControlError(RuntimeError):
    """The app's control API refused or failed a call."""


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


class SpecflipClient:
    """Talks to one app; every URL comes from `HostBoundUrls`, redirects are off."""

    def __init__(self, host: str, token: str = "", timeout: float = 10.0) -> None:
        self.urls = HostBoundUrls(host)
        self.token = token
        self.timeout = timeout
        self.session = requests.Session()
        guard_session(self.session, self.urls)

    def models(self) -> list[str]:
        r = self.session.get(self.urls.url("/v1/models"), timeout=self.timeout, allow_redirects=False)
        r.raise_for_status()
        return [str(m["id"]) for m in r.json().get("data") or []]

    def probe(self, model: str, api: str = "chat", timeout: float = 300.0) -> None:
        """One short non-streaming request: the app generates before anything is measured."""
        body: dict[str, Any] = {"model": model, "max_tokens": 4, "temperature": 0.0}
        if api == "completions":
            path, body["prompt"] = "/v1/completions", "Hello"
        else:
            path, body["messages"] = "/v1/chat/completions", [{"role": "user", "content": "Hello"}]
        r = self.session.post(self.urls.url(path), json=body, timeout=timeout, allow_redirects=False)
        if r.status_code != 200:
            raise ControlError(f"probe request to {path} failed: HTTP {r.status_code} {r.text[:300]}")

    def status(self) -> list[ReplicaSample] | None:
        """Replica states now, or None when the app has no specflip status API (404)."""
        doc = self._status_document()
        if doc is None:
            return None
        now = time.time()
        return [ReplicaSample.from_status(now, d) for d in doc.get("replicas") or []]

    def _status_document(self) -> dict[str, Any] | None:
        """The `/specflip/status` JSON, or None when the app has none (404)."""
        r = self.session.get(self.urls.url("/specflip/status"), timeout=self.timeout, allow_redirects=False)
        if r.status_code == 404:
            return None
        r.raise_for_status()
        return r.json()

    def fleet_ready(self) -> tuple[bool, str]:
        """Whether every replica the app was deployed with reports to the policy (an app without
        the specflip status API counts as ready once it answers), and a note on what is missing.
        Serve answers /v1/models as soon as the ingress is up; an override sent before the
        replicas register would miss them."""
        doc = self._status_document()
        if doc is None:
            return True, "no specflip status API"
        live = [d for d in doc.get("replicas") or [] if not d.get("stale")]
        expected = doc.get("expected_replicas") or 1
        return len(live) >= expected, f"{len(live)}/{expected} replicas reporting"

    def override(self, mode: str, replica_id: str = "*") -> None:
        """Set the operator override (`on`, `off` or `auto`) of one replica or all (`*`)."""
        r = self.session.post(
            self.urls.url("/specflip/override"),
            json={"replica_id": replica_id, "mode": mode},
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=self.timeout,
            allow_redirects=False,
        )
        if r.status_code == 401:
            raise ControlError(
                "override refused (401): pass the control token with --token or SPECFLIP_TOKEN"
            )
        if r.status_code >= 400:
            raise ControlError(
                f"override {mode} for {replica_id} failed: HTTP {r.status_code} {r.text[:200]}"
            )

    def wait_for_override(
        self, mode: str, timeout: float = 60.0, flip_timeout: float = 10.0, log: Callable[[str], None] = print
    ) -> None:
        """Block until every replica reports the override; then, for on/off, wait a little for
        the replicas to run in that mode (an idle engine may flip only at its next iteration,
        so that part only logs when it does not happen)."""
        t0 = time.time()
        last: list[ReplicaSample] = []
        while True:
            got = self.status()
            if got is None:
                raise ControlError("the app has no /specflip/status: it cannot be switched by override")
            last = got
            if last and all(s.override == mode for s in last):
                break
            if time.time() - t0 > timeout:
                state = ", ".join(f"{s.replica_id}:override={s.override}" for s in last)
                raise ControlError(f"replicas did not take override={mode} within {timeout:.0f}s ({state})")
            time.sleep(0.25)
        if mode == "auto":
            return
        while not all(s.mode == mode for s in last):
            if time.time() - t0 > timeout + flip_timeout:
                state = " ".join(f"{s.replica_id}:{s.mode}" for s in last)
                log(
                    f"[launch] note: override={mode} set, replicas not flipped yet ({state}); "
                    "they flip at their next iteration, inside the warm-up"
                )
                return
            time.sleep(0.25)
            last = self.status() or last


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
                got = self.client.status()
            except (requests.RequestException, ValueError, KeyError):
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
