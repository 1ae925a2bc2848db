"""A null OpenAI server: no model, stream chunks of the real shape at a set rate.

    python -m loadtests.calibrate.nullserver --port 8199 --step-ms 1 --processes 4

It exists to calibrate load generators (`loadtests.calibrate`): how many SSE chunks per second
a client can take in before it, not the server, becomes the limit. Each process runs one
asyncio loop (uvloop when installed) with an engine-like step: every `--step-ms`, every active
stream gets one chunk carrying `--tokens-per-chunk` tokens, the way a decode step emits a token
for every running request. Chat and completions chunks have the JSON shape SGLang's and Ray
Serve LLM's OpenAI servers send (role chunk, content chunks, a finish chunk, a usage chunk when
`stream_options.include_usage` is set, `[DONE]`), over HTTP/1.1 keep-alive with chunked
transfer encoding. Non-streamed requests answer after the same number of steps.

Processes share the port with SO_REUSEPORT (the kernel spreads connections); a slow reader is
never buffered without bound: its stream skips steps while its socket is paused.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import signal
import socket
import sys
import time
import uuid
from typing import Any

__all__ = ["NullEngine", "main", "serve_forever"]

MODEL = "null"
_TOKEN = b" tok"
_REASONS = {
    200: b"OK",
    400: b"Bad Request",
    404: b"Not Found",
    405: b"Method Not Allowed",
    411: b"Length Required",
}


def _frame(payload: bytes) -> bytes:
    """One chunk of HTTP/1.1 chunked transfer encoding."""
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _event(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


class _Stream:
    """One streamed response: pre-built byte templates, tokens left, the connection it writes to."""

    __slots__ = (
        "conn",
        "left",
        "sent",
        "per_chunk",
        "head",
        "tail",
        "chat",
        "base",
        "usage",
        "prompt_tokens",
    )

    def __init__(
        self, conn: _Http, body: dict[str, Any], chat: bool, max_tokens: int, per_chunk: int
    ) -> None:
        self.conn, self.chat, self.left, self.sent, self.per_chunk = conn, chat, max_tokens, 0, per_chunk
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        self.base = {
            "id": rid,
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": int(time.time()),
            "model": str(body.get("model") or MODEL),
        }
        opts = body.get("stream_options")
        self.usage = isinstance(opts, dict) and bool(opts.get("include_usage"))
        self.prompt_tokens = _prompt_tokens(body)
        # a content chunk = head + tokens + tail: no JSON work per chunk
        marker = "\x00"
        choice = (
            {"index": 0, "delta": {"content": marker}, "logprobs": None, "finish_reason": None}
            if chat
            else {"index": 0, "text": marker, "logprobs": None, "finish_reason": None}
        )
        head, _, tail = _event({**self.base, "choices": [choice]}).partition(b"\\u0000")
        self.head, self.tail = head, tail

    def first(self) -> bytes:
        if not self.chat:
            return b""
        choice = {
            "index": 0,
            "delta": {"role": "assistant", "content": ""},
            "logprobs": None,
            "finish_reason": None,
        }
        return _frame(_event({**self.base, "choices": [choice]}))

    def step(self) -> bytes:
        n = min(self.per_chunk, self.left)
        self.left -= n
        self.sent += n
        out = _frame(self.head + _TOKEN * n + self.tail)
        if self.left == 0:
            out += self.last()
        return out

    def last(self) -> bytes:
        key = "delta" if self.chat else "text"
        choice = {
            "index": 0,
            key: {"content": ""} if self.chat else "",
            "logprobs": None,
            "finish_reason": "length",
        }
        out = _frame(_event({**self.base, "choices": [choice]}))
        if self.usage:
            usage = _usage(self.prompt_tokens, self.sent)
            out += _frame(_event({**self.base, "choices": [], "usage": usage}))
        return out + _frame(b"data: [DONE]\n\n") + b"0\r\n\r\n"


def _prompt_tokens(body: dict[str, Any]) -> int:
    """Words of the prompt: a stand-in token count for the usage chunk."""
    if "messages" in body:
        msgs = body.get("messages") or []
        return sum(len(str(m.get("content", "")).split()) for m in msgs if isinstance(m, dict))
    prompt = body.get("prompt", "")
    return len(prompt) if isinstance(prompt, list) else len(str(prompt).split())


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


class NullEngine:
    """The step loop of one process: every step, one chunk to every stream whose socket takes it."""

    def __init__(self, step_s: float, per_chunk: int) -> None:
        self.step_s, self.per_chunk = step_s, per_chunk
        self.streams: list[_Stream] = []
        self.waiting: list[tuple[int, asyncio.Future[None]]] = []  # non-streamed: steps left
        self._wake = asyncio.Event()
        self.chunks = 0
        self.models_delay_s = 0.0  # how long GET /v1/models takes (a busy server's model listing)

    def add(self, stream: _Stream) -> None:
        self.streams.append(stream)
        self._wake.set()

    def wait_steps(self, steps: int) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiting.append((steps, fut))
        self._wake.set()
        return fut

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self.streams and not self.waiting:
                self._wake.clear()
                await self._wake.wait()
            started = loop.time()
            self._step()
            await asyncio.sleep(max(0.0, self.step_s - (loop.time() - started)))

    def _step(self) -> None:
        keep: list[_Stream] = []
        for s in self.streams:
            conn = s.conn
            if conn.closed:
                continue
            if conn.paused:
                keep.append(s)
                continue
            conn.write(s.step())
            self.chunks += 1
            if s.left:
                keep.append(s)
            else:
                conn.response_done()
        self.streams = keep
        if self.waiting:
            still = []
            for steps, fut in self.waiting:
                if steps <= 1:
                    if not fut.done():
                        fut.set_result(None)
                else:
                    still.append((steps - 1, fut))
            self.waiting = still


class _Http(asyncio.Protocol):
    """Minimal HTTP/1.1: content-length bodies, keep-alive, one request at a time per connection."""

    def __init__(self, engine: NullEngine) -> None:
        self.engine = engine
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None
        self.busy = self.paused = self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False

    def write(self, data: bytes) -> None:
        if self.transport is not None and not self.closed:
            self.transport.write(data)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        self._next()

    def response_done(self) -> None:
        self.busy = False
        self._next()

    def _next(self) -> None:
        if self.busy:
            return
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            return
        head = bytes(self.buf[:end]).decode("latin-1").split("\r\n")
        method, path, *_ = (head[0].split(" ") + ["", ""])[:3]
        headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in head[1:])}
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self._reply(
                411, {"error": {"message": "chunked request bodies are not supported"}}, consumed=end + 4
            )
            return
        length = int(headers.get("content-length") or 0)
        if len(self.buf) < end + 4 + length:
            return
        body = bytes(self.buf[end + 4 : end + 4 + length])
        del self.buf[: end + 4 + length]
        self.busy = True
        asyncio.get_running_loop().create_task(self._handle(method, path.split("?")[0], body))

    async def _handle(self, method: str, path: str, body: bytes) -> None:
        if path in ("/health", "/v1/models") and method == "GET":
            if path == "/v1/models" and self.engine.models_delay_s:
                await asyncio.sleep(self.engine.models_delay_s)
            data: list[dict[str, Any]] = [
                {"id": MODEL, "object": "model", "created": 0, "owned_by": "specflip-null"}
            ]
            self._reply(200, {"object": "list", "data": data} if path == "/v1/models" else {"status": "ok"})
            return
        if path not in ("/v1/chat/completions", "/v1/completions"):
            self._reply(404, {"error": {"message": f"no route {path}"}})
            return
        if method != "POST":
            self._reply(405, {"error": {"message": f"{path} takes POST"}})
            return
        try:
            req = json.loads(body or b"{}")
            if not isinstance(req, dict):
                raise TypeError("not an object")
            asked = req.get("max_tokens", req.get("max_completion_tokens"))
            max_tokens = 16 if asked is None else int(asked)
            if max_tokens < 1:
                raise ValueError("max_tokens < 1")
        except (ValueError, TypeError):
            self._reply(400, {"error": {"message": "body must be a JSON object with max_tokens >= 1"}})
            return
        chat = path == "/v1/chat/completions"
        stream = _Stream(self, req, chat, max_tokens, self.engine.per_chunk)
        if req.get("stream"):
            self.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
                b"transfer-encoding: chunked\r\n\r\n" + stream.first()
            )
            self.engine.add(stream)
            return
        await self.engine.wait_steps(-(-max_tokens // self.engine.per_chunk))
        text = (_TOKEN * max_tokens).decode()
        choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": "length"}
        if chat:
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["text"] = text
        base = {**stream.base, "object": "chat.completion" if chat else "text_completion"}
        self._reply(200, {**base, "choices": [choice], "usage": _usage(stream.prompt_tokens, max_tokens)})

    def _reply(self, status: int, obj: dict[str, Any], consumed: int = 0) -> None:
        if consumed:
            del self.buf[:consumed]
        payload = json.dumps(obj, separators=(",", ":")).encode()
        self.write(
            b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
            % (status, _REASONS.get(status, b"Error"), len(payload))
            + payload
        )
        self.busy = False
        self._next()


def _listen(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(4096)
    sock.setblocking(False)
    return sock


def serve_forever(
    host: str, port: int, step_ms: float, tokens_per_chunk: int, models_delay_ms: float = 0.0
) -> None:
    """One server process (blocks)."""
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass

    async def run() -> None:
        engine = NullEngine(step_ms / 1e3, tokens_per_chunk)
        engine.models_delay_s = models_delay_ms / 1e3
        server = await asyncio.get_running_loop().create_server(
            lambda: _Http(engine), sock=_listen(host, port)
        )
        async with server:
            await engine.run()

    asyncio.run(run())


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m loadtests.calibrate.nullserver", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8199)
    p.add_argument(
        "--step-ms", type=float, default=1.0, help="time between chunks of a stream (0: as fast as it can)"
    )
    p.add_argument("--tokens-per-chunk", type=int, default=1, help="tokens each chunk carries")
    p.add_argument(
        "--models-delay-ms", type=float, default=0.0, help="delay of GET /v1/models (a busy server's)"
    )
    p.add_argument(
        "--processes", type=int, default=max(1, (os.cpu_count() or 2) // 2), help="server processes"
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.step_ms < 0 or args.tokens_per_chunk < 1 or args.processes < 1:
        print("nullserver: --step-ms >= 0, --tokens-per-chunk >= 1 and --processes >= 1", file=sys.stderr)
        return 2
    _listen(args.host, args.port).close()  # fail here, in one line, if the port is taken
    ctx = multiprocessing.get_context("spawn")
    procs = [
        ctx.Process(
            target=serve_forever,
            args=(args.host, args.port, args.step_ms, args.tokens_per_chunk, args.models_delay_ms),
            daemon=True,
        )
        for _ in range(args.processes)
    ]
    for proc in procs:
        proc.start()
    print(
        f"nullserver: http://{args.host}:{args.port} ({args.processes} processes, step {args.step_ms:g} ms, "
        f"{args.tokens_per_chunk} token(s) per chunk); pids {' '.join(str(p.pid) for p in procs)}",
        flush=True,
    )
    stop = lambda *_: sys.exit(0)  # noqa: E731 - SIGTERM ends the daemonic children with us
    signal.signal(signal.SIGTERM, stop)
    try:
        for proc in procs:
            proc.join()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
