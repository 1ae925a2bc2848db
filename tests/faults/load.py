"""Concurrent streaming clients for the fault tests: each loops on a streamed completion and records
when it started, when it ended and how (the stream reached `[DONE]` with no error event, or not).
Counts are reported per phase, a phase being a span of wall-clock time."""

from __future__ import annotations

import dataclasses
import json
import threading
import time

import httpx

__all__ = ["Outcome", "StreamingLoad"]


@dataclasses.dataclass(frozen=True)
class Outcome:
    started: float
    ended: float
    ok: bool
    detail: str


class StreamingLoad:
    def __init__(self, base: str, model: str, clients: int = 4, max_tokens: int = 24) -> None:
        self._base, self._model, self._clients, self._max_tokens = base, model, clients, max_tokens
        self.outcomes: list[Outcome] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def __enter__(self) -> StreamingLoad:
        for i in range(self._clients):
            t = threading.Thread(target=self._client, args=(i,), daemon=True, name=f"load-{i}")
            t.start()
            self._threads.append(t)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=300)

    def _client(self, i: int) -> None:
        body = {
            "model": self._model,
            "prompt": ["def add(a, b):", "class Stack:", "import os\n\ndef", "for i in range("][i % 4],
            "max_tokens": self._max_tokens,
            "temperature": 0,
            "ignore_eos": True,
            "stream": True,
        }
        with httpx.Client(timeout=120) as http:
            while not self._stop.is_set():
                started = time.monotonic()
                ok, detail = _stream(http, f"{self._base}/v1/completions", body)
                with self._lock:
                    self.outcomes.append(Outcome(started, time.monotonic(), ok, detail))
                if not ok:
                    time.sleep(0.5)  # a client backs off a little after an error

    def phase(self, start: float, end: float) -> dict[str, int]:
        """Requests started in [start, end): sent, succeeded, failed."""
        with self._lock:
            mine = [o for o in self.outcomes if start <= o.started < end]
        ok = sum(o.ok for o in mine)
        return {"sent": len(mine), "succeeded": ok, "failed": len(mine) - ok}

    def failures(self) -> list[Outcome]:
        with self._lock:
            return [o for o in self.outcomes if not o.ok]


def _stream(http: httpx.Client, url: str, body: dict[str, object]) -> tuple[bool, str]:
    try:
        with http.stream("POST", url, json=body) as r:
            if r.status_code != 200:
                return False, f"HTTP {r.status_code}: {r.read()[:200]!r}"
            done, error = False, ""
            for line in r.iter_lines():
                if line == "data: [DONE]":
                    done = True
                elif line.startswith("data: ") and '"error"' in line:
                    error = json.loads(line[6:])["error"]["message"]
            if error:
                return False, f"error event: {error}"
            return done, "" if done else "stream ended without [DONE]"
    except httpx.HTTPError as err:
        return False, f"{type(err).__name__}: {err}"
