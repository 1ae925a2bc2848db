"""STAND-IN for the specflip app, used only to test the load generator itself.

Not the product and not a fake of its internals: a small stdlib HTTP server that
speaks the same wire formats (OpenAI streaming SSE as Ray Serve LLM sends it, the
specflip status/override API, Prometheus text) so Locust, the sweep runner and
the report can be exercised end to end in seconds, without an engine
(tests/loadtests/sweep/test_sweep_real_app.py runs the sweep against the real app).

It simulates N replicas, each a batch loop whose step time and tokens per step
depend on its speculation mode (ON: more tokens per step, slower steps that grow
faster with the batch; OFF: one token per step), so ON wins at low load and
loses under load, as on the real engine. `--mode` picks the app variant:
on/off/dynamic (override default; dynamic = hysteresis on queue depth) or
adaptive (per-step engine-internal choice by batch size; no /specflip API).

    python tests/loadtests/openai_standin.py --port 8123 --replicas 2 --mode dynamic --token t
"""

from __future__ import annotations

import argparse
import itertools
import json
import queue
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["MODEL", "Replica", "StandinApp", "main", "serve"]

MODEL = "standin-tiny"


@dataclass
class _Req:
    remaining: int
    out: queue.Queue[int | None] = field(default_factory=queue.Queue)


@dataclass
class Replica:
    """One simulated engine: a batch loop in its own thread. Times in ms x scale."""

    replica_id: str
    policy: str  # dynamic | adaptive | on | off (the app's base behaviour)
    scale: float = 1.0
    max_batch: int = 8
    override: str = "auto"
    mode: str = "on"
    desired_mode: str = "on"
    flips: int = 0
    accept_len: float = 3.0
    active: list[_Req] = field(default_factory=list)
    lock: threading.Condition = field(default_factory=threading.Condition)

    def __post_init__(self) -> None:
        if self.policy in ("on", "off"):
            self.override = self.policy
        threading.Thread(target=self._loop, daemon=True).start()

    @property
    def running(self) -> int:
        return min(len(self.active), self.max_batch)

    @property
    def waiting(self) -> int:
        return max(0, len(self.active) - self.max_batch)

    def submit(self, tokens: int) -> _Req:
        req = _Req(tokens)
        with self.lock:
            self.active.append(req)
            self.lock.notify()
        return req

    def _decide(self, batch: int) -> str:
        if self.override in ("on", "off"):
            return self.override
        if self.policy == "adaptive":  # engine-internal: per step, by batch size
            return "on" if batch <= 2 else "off"
        load = len(self.active)  # dynamic: hysteresis on running + waiting
        if load >= 4:
            return "off"
        if load <= 2:
            return "on"
        return self.desired_mode

    def _apply(self, batch: int) -> None:
        self.desired_mode = self._decide(batch)
        if self.desired_mode != self.mode:
            self.mode, self.flips = self.desired_mode, self.flips + 1

    def _loop(self) -> None:
        while True:
            with self.lock:
                while not self.active:
                    self._apply(0)  # idle: overrides still take effect
                    self.lock.wait(timeout=0.05)
                batch = self.active[: self.max_batch]
                self._apply(len(batch))
                on = self.mode == "on"
            step_ms = (10 + 9 * len(batch)) if on else (8 + 1.5 * len(batch))
            time.sleep(step_ms * self.scale / 1000)
            per_step = int(self.accept_len) if on else 1
            with self.lock:
                for r in batch:
                    n = min(per_step, r.remaining)
                    r.remaining -= n
                    r.out.put(n)
                    if r.remaining == 0:
                        r.out.put(None)
                        self.active.remove(r)

    def status(self) -> dict[str, Any]:
        return {
            "replica_id": self.replica_id,
            "mode": self.mode,
            "desired_mode": self.desired_mode,
            "running": self.running,
            "waiting": self.waiting,
            "accept_length": self.accept_len if self.mode == "on" else None,
            "flips": self.flips,
            "patched": True,
            "override": self.override,
            "policy_source": "actor",
        }


class StandinApp:
    """The replicas, the router and the bookkeeping of what was asked of the server."""

    def __init__(
        self,
        replicas: int,
        policy: str,
        token: str,
        scale: float,
        usage: bool,
        ready_at: float,
        registered_at: float | None = None,
    ):
        self.replicas = [Replica(f"r{i}", policy, scale) for i in range(replicas)]
        self.policy, self.token, self.usage, self.ready_at = policy, token, usage, ready_at
        # like the real app, the replicas report to the policy a while after /v1/models answers
        self.registered_at = ready_at if registered_at is None else registered_at
        self.hits: dict[str, int] = {}
        self.connections = 0
        self._rr = itertools.count()
        self._lock = threading.Lock()

    def count(self, method: str, path: str) -> None:
        if path.startswith("/standin/"):
            return  # the tests' own bookkeeping requests
        with self._lock:
            key = f"{method} {path}"
            self.hits[key] = self.hits.get(key, 0) + 1

    def route(self) -> Replica:
        start = next(self._rr)
        order = [self.replicas[(start + i) % len(self.replicas)] for i in range(len(self.replicas))]
        return min(order, key=lambda r: len(r.active))


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    app: StandinApp

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return

    def setup(self) -> None:
        super().setup()
        with self.app._lock:
            self.app.connections += 1

    def _json(self, code: int, obj: Any) -> None:
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _body(self) -> dict[str, Any]:
        n = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(n) or b"{}")

    def do_GET(self) -> None:
        self.app.count("GET", self.path)
        app = self.app
        if self.path == "/v1/models":
            if time.time() < app.ready_at:
                return self._json(503, {"error": {"message": "starting"}})
            return self._json(200, {"object": "list", "data": [{"id": MODEL, "object": "model"}]})
        if self.path == "/specflip/status" and app.policy != "adaptive":
            listed = app.replicas if time.time() >= app.registered_at else []
            doc = {"replicas": [r.status() for r in listed], "expected_replicas": len(app.replicas)}
            return self._json(200, {**doc, "policy": {"name": app.policy}})
        if self.path == "/metrics":
            lines = [
                f'specflip_replica_spec_on{{replica="{r.replica_id}"}} {int(r.mode == "on")}'
                for r in app.replicas
            ]
            body = ("\n".join(lines) + "\n").encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return None
        if self.path == "/standin/hits":
            with app._lock:
                return self._json(200, dict(app.hits))
        if self.path == "/standin/connections":
            with app._lock:
                return self._json(200, {"connections": app.connections})
        return self._json(404, {"error": {"message": f"no route {self.path}"}})

    def do_POST(self) -> None:
        self.app.count("POST", self.path)
        body = self._body()
        if self.path == "/specflip/override" and self.app.policy != "adaptive":
            return self._override(body)
        if self.path in ("/v1/chat/completions", "/v1/completions"):
            return self._generate(body, chat=self.path.endswith("chat/completions"))
        return self._json(404, {"error": {"message": f"no route {self.path}"}})

    def _override(self, body: dict[str, Any]) -> None:
        if self.headers.get("Authorization") != f"Bearer {self.app.token}":
            return self._json(401, {"error": {"message": "bearer token required"}})
        rid, mode = body.get("replica_id"), body.get("mode")
        if mode not in ("on", "off", "auto"):
            return self._json(400, {"error": {"message": f"mode must be on, off or auto, got {mode!r}"}})
        hit = [r for r in self.app.replicas if rid in ("*", r.replica_id)]
        if time.time() < self.app.registered_at:  # as the real app: nothing registered yet
            return self._json(404, {"error": {"message": "no replicas registered with the policy yet"}})
        if not hit:
            return self._json(404, {"error": {"message": f"unknown replica {rid!r}"}})
        for r in hit:
            with r.lock:
                r.override = mode
        return self._json(200, {"replicas": [r.status() for r in hit]})

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _generate(self, body: dict[str, Any], chat: bool) -> None:
        if body.get("model") != MODEL:
            return self._json(404, {"error": {"message": f"model {body.get('model')!r} not found"}})
        prompt = json.dumps(body.get("messages")) if chat else str(body.get("prompt", ""))
        max_tokens = int(body.get("max_tokens") or 16)
        req = self.app.route().submit(max_tokens)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        gen_id, first, left = f"standin-{uuid.uuid4().hex}", True, max_tokens
        while (n := req.out.get()) is not None:
            left -= n
            finish = "length" if left == 0 else None
            if chat:
                delta: dict[str, Any] = {"content": "tok " * n}
                if first:
                    delta["role"] = "assistant"
                choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish}
            else:
                choice = {"index": 0, "text": "tok " * n, "logprobs": None, "finish_reason": finish}
            first = False
            obj = {
                "id": gen_id,
                "object": "chat.completion.chunk" if chat else "text_completion",
                "model": MODEL,
                "choices": [choice],
            }
            self._chunk(f"data: {json.dumps(obj)}\n\n".encode())
        if self.app.usage and (body.get("stream_options") or {}).get("include_usage"):
            usage = {
                "prompt_tokens": len(prompt.split()),
                "completion_tokens": max_tokens,
                "total_tokens": len(prompt.split()) + max_tokens,
            }
            self._chunk(f"data: {json.dumps({'id': gen_id, 'choices': [], 'usage': usage})}\n\n".encode())
        self._chunk(b"data: [DONE]\n\n")
        self._chunk(b"")
        return None


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """Clients that hang up mid-stream (cancelled users) are normal here."""
        import sys

        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def serve(
    port: int,
    replicas: int = 2,
    mode: str = "dynamic",
    token: str = "standin-token",
    scale: float = 1.0,
    usage: bool = True,
    startup_delay: float = 0.0,
    register_delay: float = 0.0,
) -> ThreadingHTTPServer:
    """Build the server (call `serve_forever()` on it, or run it in a thread)."""
    ready_at = time.time() + startup_delay
    app = StandinApp(replicas, mode, token, scale, usage, ready_at, ready_at + register_delay)
    handler = type("Handler", (_Handler,), {"app": app})
    server = _QuietServer(("127.0.0.1", port), handler)
    server.daemon_threads = True
    return server


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--port", type=int, default=8123)
    p.add_argument("--replicas", type=int, default=2)
    p.add_argument("--mode", choices=["on", "off", "dynamic", "adaptive"], default="dynamic")
    p.add_argument("--token", default="standin-token")
    p.add_argument("--scale", type=float, default=1.0, help="multiply simulated step times")
    p.add_argument(
        "--no-usage", action="store_true", help="never send a usage chunk (like Ray's SGLangServer)"
    )
    p.add_argument("--startup-delay", type=float, default=0.0, help="answer 503 on /v1/models this long")
    p.add_argument(
        "--register-delay",
        type=float,
        default=0.0,
        help="after that, list no replicas in /specflip/status (and 404 an override) this long",
    )
    a = p.parse_args(argv)
    server = serve(
        a.port, a.replicas, a.mode, a.token, a.scale, not a.no_usage, a.startup_delay, a.register_delay
    )
    print(f"standin listening on http://127.0.0.1:{a.port} mode={a.mode}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
