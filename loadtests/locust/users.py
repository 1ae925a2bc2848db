"""The Locust user: one OpenAI request at a time, streamed responses timed event by event.

Imports Locust (and so gevent's monkey patching): only the locustfile imports
this module; the sweep runner runs Locust in a subprocess and never does.

Built to stay out of the measurement: Locust's `FastHttpUser` (geventhttpclient,
C HTTP parser), one read per SSE event (`readline(b"\n\n")` returns as soon as an
event is complete), token chunks told apart by a byte search instead of JSON
parsing (`loadtests.locust.sse`), and per-request bookkeeping after the stream ends.
`python -m loadtests.calibrate` measures what it can take in on a given host.

Per request it reports to Locust's statistics
- the HTTP request itself (name `chat` or `completions`, response time = end to end),
- custom entries `TTFT`, `TPOT`, `E2E` (ms) and one `ITL` per inter-chunk gap,
and appends a `RequestRecord` line to `requests-<pid>.jsonl` in the output folder;
percentiles and goodput are computed from those lines, exactly, by our own code.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from gevent import GreenletExit
from gevent.event import Event
from locust import task
from locust.contrib.fasthttp import FastHttpUser

from loadtests.locust.config import LoadConfig
from loadtests.locust.hosts import HostBoundUrls, guard_fast_session
from loadtests.locust.payloads import API_PATHS, build_request
from loadtests.locust.prompts import Prompt, make_prompts
from loadtests.locust.records import RequestRecord, StreamAccumulator, write_record
from loadtests.locust.shapes import PoissonPacer, Schedule
from loadtests.locust.sse import SseDecoder, StreamChunk, parse_chunk
from loadtests.metrics import CANCELLED

__all__ = ["OpenAIStreamUser", "RunContext", "current_context", "set_context"]


@dataclass
class RunContext:
    """Shared by all users of one Locust process (gevent: one thread, no locks)."""

    config: LoadConfig
    urls: HostBoundUrls
    model: str
    schedule: Schedule
    prompts: Iterator[Prompt]
    sink: TextIO
    records: list[RequestRecord] = field(default_factory=list)
    started: float = field(default_factory=time.time)

    @classmethod
    def open(cls, config: LoadConfig, host: str, model: str) -> RunContext:
        out = Path(config.out_dir)
        out.mkdir(parents=True, exist_ok=True)
        prompts = make_prompts(
            config.prompt_set, config.num_prompts, config.input_len, config.seed, config.corpus_dir or None
        )
        sink = (out / f"requests-{os.getpid()}.jsonl").open("a", encoding="utf-8")
        return cls(config, HostBoundUrls(host), model, config.schedule, itertools.cycle(prompts), sink)

    def record(self, rec: RequestRecord) -> None:
        self.records.append(rec)
        write_record(self.sink, rec)


_CONTEXT: RunContext | None = None
# Set once the context is. A `--processes` worker connects to the master before Locust fires
# `init`, and the locustfile's init listener may yield (model discovery is an HTTP call under
# gevent): the master can spawn users on that worker before its context exists.
_READY = Event()
CONTEXT_WAIT_S = 120.0


def set_context(ctx: RunContext | None) -> None:
    global _CONTEXT
    _CONTEXT = ctx
    if ctx is None:
        _READY.clear()
    else:
        _READY.set()


def current_context(wait_s: float = 0.0) -> RunContext:
    """The run's context; waits up to `wait_s` for the init listener to set it."""
    if _CONTEXT is None and wait_s > 0:
        _READY.wait(wait_s)
    if _CONTEXT is None:
        raise RuntimeError("load test context not initialised (the locustfile sets it at init)")
    return _CONTEXT


_HEADERS = {"Content-Type": "application/json", "Accept-Encoding": "identity"}


class OpenAIStreamUser(FastHttpUser):
    """Sends chat/completions requests back to back, or paced for Poisson arrivals."""

    pacer: PoissonPacer | None = None
    rng: random.Random | None = None  # per user: output lengths and the start stagger
    request_class = ""  # class routing: sent as the x-specflip-class header when set (two_class.py)
    network_timeout = 600.0  # per socket read; the locustfile sets it from request_timeout_s
    max_retries = 0

    def on_start(self) -> None:
        ctx = current_context(wait_s=CONTEXT_WAIT_S)
        guard_fast_session(self.client, ctx.urls)
        self.rng = random.Random()
        if ctx.config.start_stagger_s > 0:  # users that start apart stay apart
            time.sleep(self.rng.uniform(0.0, ctx.config.start_stagger_s))  # gevent-patched: yields
        rate = ctx.schedule.rate_per_user
        if rate is not None:
            self.pacer = PoissonPacer(rate, random.Random(), time.time())
            time.sleep(self.pacer.wait(time.time()))  # gevent-patched: yields to other users

    def wait_time(self) -> float:
        return self.pacer.wait(time.time()) if self.pacer is not None else 0.0

    def _fire(self, kind: str, name: str, ms: float, length: int = 0) -> None:
        self.environment.events.request.fire(
            request_type=kind,
            name=name,
            response_time=ms,
            response_length=length,
            exception=None,
            context={},
        )

    @task
    def generate(self) -> None:
        ctx = current_context()
        cfg = ctx.config
        url = ctx.urls.url(API_PATHS[cfg.api])
        body = build_request(cfg, ctx.model, next(ctx.prompts), self.rng)
        users = self.environment.runner.user_count if self.environment.runner else 0
        start = time.time()
        acc = StreamAccumulator(start=start, max_tokens=body["max_tokens"])
        try:
            rec = self._stream(url, body, acc, users)
        except GreenletExit:
            # Stopped mid-stream by the shape or the end of the run: keep the tokens it got.
            ctx.record(acc.finish(time.time(), acc.http_status, error=CANCELLED, api=cfg.api, users=users))
            raise
        ctx.record(rec)
        if rec.ok:
            if rec.ttft is not None:
                self._fire("TTFT", cfg.api, rec.ttft * 1000, rec.prompt_tokens or 0)
            if rec.tpot is not None:
                self._fire("TPOT", cfg.api, rec.tpot * 1000, rec.output_tokens)
            self._fire("E2E", cfg.api, rec.e2e * 1000, rec.output_tokens)
            if cfg.itl_events:
                for gap in rec.itl:
                    self._fire("ITL", cfg.api, gap * 1000)

    def _stream(self, url: str, body: dict[str, Any], acc: StreamAccumulator, users: int) -> RequestRecord:
        cfg = current_context().config
        headers = {**_HEADERS, "x-specflip-class": self.request_class} if self.request_class else _HEADERS
        with self.client.post(
            url,
            data=json.dumps(body),
            headers=headers,
            stream=True,
            catch_response=True,
            name=cfg.api,
            allow_redirects=False,
        ) as resp:
            status = acc.http_status = int(resp.status_code or 0)
            error = ""
            if status == 0:
                error = f"connection failed: {getattr(resp, 'error', '')}"[:300]
            elif status != 200:
                error = f"HTTP {status}: {(resp.text or '')[:300]}"
            else:
                try:
                    if cfg.stream:
                        _read_events(resp, acc)
                    else:
                        _read_json(resp, acc)
                except Exception as e:  # connection dropped mid-stream, timeout, ...
                    error = f"{type(e).__name__}: {e}"[:300]
            rec = acc.finish(
                acc.done_at or time.time(), status, error=error, api=cfg.api, users=users, streamed=cfg.stream
            )
            if self.request_class or "x-specflip-replica" in (resp.headers or {}):
                rec = dataclasses.replace(
                    rec,
                    request_class=self.request_class,
                    replica=str(resp.headers.get("x-specflip-replica") or ""),
                    mode=str(resp.headers.get("x-specflip-mode") or ""),
                )
            resp.request_meta["response_time"] = rec.e2e * 1000
            resp.request_meta["response_length"] = rec.output_tokens
            if rec.ok:
                resp.success()
            else:
                resp.failure(rec.error)
            return rec


def _read_events(resp: Any, acc: StreamAccumulator) -> None:
    """Time every SSE event as it completes; read to the end even after [DONE] so the
    connection goes back to the pool for the next request."""
    reader = resp._response  # geventhttpclient's response: readline(sep) returns one event
    if reader is None or not hasattr(reader, "readline"):
        raise RuntimeError("this Locust version's FastResponse has no readable _response (locust>=2.30)")
    decoder = SseDecoder()
    while True:
        piece = reader.readline(b"\n\n")
        now = time.time()
        if not piece:
            break
        for payload in decoder.feed(piece):
            acc.add(parse_chunk(payload), now)
    for payload in decoder.close():
        acc.add(parse_chunk(payload), time.time())


def _read_json(resp: Any, acc: StreamAccumulator) -> None:
    """A non-streamed response: finish reason and usage from the body, no token times."""
    body = json.loads(resp.content or b"{}")
    now = time.time()
    choice = (body.get("choices") or [{}])[0]
    usage = body.get("usage") or {}
    acc.add(
        StreamChunk(
            done=True,
            finish_reason=choice.get("finish_reason"),
            completion_tokens=usage.get("completion_tokens"),
            prompt_tokens=usage.get("prompt_tokens"),
        ),
        now,
    )
