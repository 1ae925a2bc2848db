"""`specflip demo`: drive a low -> high -> low load against a running app and say what happened.

Closed-loop clients (each sends the next request when its last one is answered) post greedy
completions; a poller reads `/specflip/status` twice a second. The report gives, per phase,
requests, output tok/s and p50 latency, and per replica the mode changes the policy made and
the accept length the engine reported.

Needs no Locust, gevent or matplotlib: `specflip demo` runs on the serving install (the CLI
imports this module inside its `demo` subcommand only).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from deployments.client import SpecflipClient
from deployments.local import LocalApp
from loadtests.metrics import percentile
from loadtests.sim.trace import Phase

__all__ = ["DEFAULT_PHASES", "DemoReport", "ModeChange", "PhaseResult", "drive", "format_report"]

PROMPTS = (
    "def add(a, b):",
    "class Stack:",
    "import os\n\ndef",
    "for i in range(",
    "    def __init__(self",
    "return self.",
    "if __name__ ==",
    "def parse_args(",
    "with open(path) as f:",
    "try:\n    import",
)


# closed-loop clients per phase (Phase.users)
DEFAULT_PHASES = (
    Phase("low", 20.0, users=1),
    Phase("high", 35.0, users=12),
    Phase("low again", 25.0, users=1),
)


@dataclass
class PhaseResult:
    phase: Phase
    requests: int = 0
    errors: int = 0
    tokens: int = 0
    latencies: list[float] = field(default_factory=list)
    elapsed_s: float = 0.0

    @property
    def tok_s(self) -> float:
        return self.tokens / self.elapsed_s if self.elapsed_s > 0 else 0.0


@dataclass(frozen=True)
class ModeChange:
    at_s: float  # seconds since the load started
    phase: str
    replica_id: str
    mode: str


@dataclass
class DemoReport:
    phases: list[PhaseResult]
    changes: list[ModeChange]
    final: dict[str, dict]  # replica_id -> its last /specflip/status entry


def _client(
    app: LocalApp,
    stop: threading.Event,
    result: PhaseResult,
    lock: threading.Lock,
    start: int,
    max_tokens: int,
) -> None:
    i = start
    with SpecflipClient(app.base, timeout=300) as http:
        while not stop.is_set():
            body = {
                "model": app.config.model.id,
                "prompt": PROMPTS[i % len(PROMPTS)],
                "max_tokens": max_tokens,
                "temperature": 0,
                "ignore_eos": True,
            }
            t0 = time.monotonic()
            try:
                r = http.post("/v1/completions", body)
                ok = r.status_code == 200
                tokens = r.json()["usage"]["completion_tokens"] if ok else 0
            except httpx.HTTPError:
                ok, tokens = False, 0
            with lock:
                result.requests += 1
                result.errors += 0 if ok else 1
                result.tokens += tokens
                result.latencies.append(time.monotonic() - t0)
            i += 1


def drive(
    app: LocalApp,
    phases: tuple[Phase, ...] = DEFAULT_PHASES,
    *,
    max_tokens: int = 48,
    log: Callable[[str], None] = print,
) -> DemoReport:
    results: list[PhaseResult] = []
    changes: list[ModeChange] = []
    modes = {r["replica_id"]: r["mode"] for r in app.client.replicas()}
    began = time.monotonic()
    for phase in phases:
        result, stop, lock = PhaseResult(phase), threading.Event(), threading.Lock()
        log(f"phase '{phase.name}': {phase.users} client(s) for {phase.duration_s:g} s")
        threads = [
            threading.Thread(target=_client, args=(app, stop, result, lock, 3 * k, max_tokens), daemon=True)
            for k in range(phase.users)
        ]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        while time.monotonic() - t0 < phase.duration_s:
            for r in app.client.replicas():
                if modes.get(r["replica_id"]) != r["mode"]:
                    changes.append(
                        ModeChange(time.monotonic() - began, phase.name, r["replica_id"], r["mode"])
                    )
                    log(
                        f"  t={changes[-1].at_s:5.1f}s  replica {r['replica_id']} -> speculation {r['mode'].upper()} "
                        f"(load {r['running'] + r['waiting']} in flight)"
                    )
                    modes[r["replica_id"]] = r["mode"]
            time.sleep(0.5)
        stop.set()
        for t in threads:
            t.join()
        result.elapsed_s = time.monotonic() - t0
        results.append(result)
        log(f"  {result.requests} requests, {result.tok_s:.1f} output tok/s")
    final = {r["replica_id"]: r for r in app.client.replicas()}
    return DemoReport(results, changes, final)


def format_report(report: DemoReport) -> str:
    lines = ["", "phase        clients  requests  errors  output tok/s  p50 latency"]
    for p in report.phases:
        p50 = percentile(p.latencies, 50)
        p50 = float("nan") if p50 is None else p50
        lines.append(
            f"{p.phase.name:<12} {p.phase.users:>7} {p.requests:>9} {p.errors:>7} {p.tok_s:>13.1f} "
            f"{p50:>10.2f} s"
        )
    rows = []
    for rid, r in sorted(report.final.items()):
        seen = [f"{c.mode.upper()}@{c.at_s:.0f}s({c.phase})" for c in report.changes if c.replica_id == rid]
        accept = f"{r['accept_length']:.2f}" if r.get("accept_length") is not None else "-"
        rows.append((rid, r["flips"], " ".join(seen) or "none", accept, r["mode"]))
    width = max([len("mode changes during the run"), *(len(row[2]) for row in rows)])
    lines += ["", f"replica     flips  {'mode changes during the run':<{width}}  accept length  mode now"]
    for rid, flips, seen_text, accept, mode in rows:
        lines.append(f"{rid:<10} {flips:>6}  {seen_text:<{width}}  {accept:>13}  {mode}")
    return "\n".join(lines)
