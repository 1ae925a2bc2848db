"""Driving an SGLang engine in this process: the config's engine arguments with token ids in and out,
closed-loop users, and per-request streams of token arrivals. Shared by the engine benches
(`engine_arrivals`, `step_costs`, `flip_cost`)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "Stream",
    "StreamedRun",
    "closed_loop",
    "in_process_kwargs",
    "make_requests",
    "prepare_process",
    "streamed",
    "write_outputs",
]

Request = tuple[list[int], int]  # (prompt token ids, max_new_tokens)


def bench_parser(
    module: str, doc: str | None, levels: str, out: str, spread: bool = True
) -> argparse.ArgumentParser:
    """The arguments every engine bench takes: the config, its levels, the workload and --out."""
    p = argparse.ArgumentParser(prog=f"python -m {module}", description=(doc or "").split("\n\n")[0])
    p.add_argument("--config", type=Path, required=True, help="specflip config (its engine arguments)")
    p.add_argument("--concurrency", default=levels, help="comma list of concurrent users (levels)")
    p.add_argument("--input-len", type=int, default=128, help="prompt token ids per request")
    p.add_argument("--output-len", type=int, default=128, help="mean max_new_tokens per request")
    p.add_argument("--output-spread", type=float, default=0.5, help="output lengths in len x [1-s, 1+s]")
    p.add_argument("--out", type=Path, default=Path(out))
    return p


def write_outputs(out: Path, results: dict[str, Any], report: str) -> Path:
    """results.json and report.md into `out`; the report's path."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=1))
    (out / "report.md").write_text(report)
    return out / "report.md"


def make_requests(
    users: int, per_user: int, input_len: int, output_len: int, spread: float, vocab: int, seed: int = 0
) -> list[Request]:
    """(prompt token ids, max_new_tokens) per request; the same for every engine given the seed."""
    rng = random.Random(seed * 7919 + users)
    lo, hi = max(1, round(output_len * (1 - spread))), round(output_len * (1 + spread))
    return [
        ([rng.randrange(10, vocab) for _ in range(input_len)], rng.randint(lo, hi))
        for _ in range(users * per_user)
    ]


def _params(max_new: int) -> dict[str, Any]:
    return {"max_new_tokens": max_new, "temperature": 0, "ignore_eos": True}


async def _drive(engine: Any, requests: list[Request], users: int) -> list[list[int]]:
    pending = list(enumerate(requests))[::-1]
    outputs: list[list[int]] = [[] for _ in requests]

    async def user() -> None:
        while pending:
            i, (ids, n) = pending.pop()
            out = await engine.async_generate(input_ids=ids, sampling_params=_params(n))
            outputs[i] = list(out["output_ids"])

    await asyncio.gather(*(user() for _ in range(users)))
    return outputs


def closed_loop(engine: Any, requests: list[Request], users: int) -> tuple[list[list[int]], float]:
    """Run `requests` with `users` in flight at a time; (outputs in request order, wall seconds)."""
    t0 = time.perf_counter()
    outputs = engine.loop.run_until_complete(_drive(engine, requests, users))
    return outputs, time.perf_counter() - t0


@dataclass
class Stream:
    """One streamed request: when it was sent, and (arrival time, new tokens) of each chunk.

    `stages` (wall-clock seconds, from an engine started with `enable_metrics`): when the request was
    sent, when the scheduler put it into a forward batch (SGLang's `forward_entry_time`), when it
    processed the prefill's result (`prefill_finished_time`), and when its first chunk arrived here.
    """

    sent: float
    request: int = 0  # its index in the request list
    chunks: list[tuple[float, int]] = field(default_factory=list)
    stages: tuple[float, float, float, float] | None = None

    @property
    def ttft_s(self) -> float | None:
        return self.chunks[0][0] - self.sent if self.chunks else None

    @property
    def ttft_parts_s(self) -> tuple[float, float, float] | None:
        """TTFT in three parts: to the forward batch (the way in and the wait queue), SGLang's
        `prefill_forward` stage (the prefill's launch and run, and the scheduler's work until it
        processes the result, the next batch's launch included under the overlap scheduler), and the
        way out (result processing after that, detokenizer, the engine's output loop)."""
        if self.stages is None:
            return None
        sent, forward, prefilled, first = self.stages
        return forward - sent, prefilled - forward, first - prefilled


@dataclass
class StreamedRun:
    outputs: list[list[int]]
    streams: list[Stream]
    started: float
    drained: float  # when the last request was sent: from then on fewer than `users` are in flight
    ended: float

    def tokens_between(self, t0: float, t1: float) -> int:
        """Output tokens that arrived in [t0, t1)."""
        return sum(n for s in self.streams for t, n in s.chunks if t0 <= t < t1)


async def _drive_streamed(
    engine: Any, requests: list[Request], users: int, on_tick: Any, until_s: float | None
) -> StreamedRun:
    started = time.perf_counter()
    run = StreamedRun([], [], started, 0.0, 0.0)
    sent = [0]  # requests sent so far; request k is requests[k % len(requests)]

    def more() -> bool:
        if until_s is None:
            return sent[0] < len(requests)
        return time.perf_counter() - started < until_s

    async def user() -> None:
        while more():
            k = sent[0]
            sent[0] += 1
            ids, n = requests[k % len(requests)]
            stream = Stream(time.perf_counter(), k % len(requests))
            sent_wall = time.time()
            run.streams.append(stream)
            run.outputs.append([])
            slot = len(run.outputs) - 1
            if not more():
                run.drained = stream.sent
            seen, last = 0, None
            async for chunk in await engine.async_generate(
                input_ids=ids, sampling_params=_params(n), stream=True
            ):
                got = len(chunk["output_ids"])  # cumulative (SGLang's default, non-incremental streaming)
                stream.chunks.append((time.perf_counter(), got - seen))
                if last is None:
                    stream.stages = _stages(sent_wall, chunk.get("meta_info", {}))
                seen, last = got, chunk
            run.outputs[slot] = list(last["output_ids"]) if last is not None else []

    async def ticker() -> None:
        while True:
            await asyncio.sleep(0.05)
            await on_tick(time.perf_counter() - started)

    tick = asyncio.ensure_future(ticker()) if on_tick is not None else None
    try:
        await asyncio.gather(*(user() for _ in range(users)))
    finally:
        if tick is not None:
            tick.cancel()
    run.ended = time.perf_counter()
    if until_s is None:  # back to request order
        by_request = sorted(zip(run.streams, run.outputs, strict=True), key=lambda x: x[0].request)
        run.streams = [st for st, _ in by_request]
        run.outputs = [o for _, o in by_request]
    return run


def _stages(sent_wall: float, meta: dict[str, Any]) -> tuple[float, float, float, float] | None:
    forward, prefilled = meta.get("forward_entry_time"), meta.get("prefill_finished_time")
    if not forward or not prefilled:  # an engine without enable_metrics reports neither
        return None
    return sent_wall, float(forward), float(prefilled), time.time()


def streamed(
    engine: Any, requests: list[Request], users: int, on_tick: Any = None, until_s: float | None = None
) -> StreamedRun:
    """`closed_loop`, streamed, every chunk's arrival recorded. `on_tick(seconds since start)`, an async
    callable, runs every 50 ms on the engine's loop while the users run (e.g. a flip at a given time).
    With `until_s`, users keep sending (cycling through `requests`) until that many seconds have passed,
    and the outputs and streams are in the order the requests were sent; else each request is sent
    once and they are in request order."""
    return engine.loop.run_until_complete(_drive_streamed(engine, requests, users, on_tick, until_s))


def prepare_process(config: Any) -> int:
    """Set this process up to start the config's engines (`replicas.env`, e.g. SGLANG_SIMULATE_ACC_LEN,
    read when a scheduler starts; the CPU shim before sglang's kernels load); the model's vocab size."""
    from deployments.config import CPU_ENV, Device

    os.environ.update(config.replicas.env)
    if config.engine.device is Device.CPU:
        from patched_worker.cpu.shim import enable

        os.environ.update(CPU_ENV)
        enable()
    from transformers import AutoConfig

    return int(AutoConfig.from_pretrained(config.model.path).vocab_size)


def in_process_kwargs(config: Any, speculative: bool) -> dict[str, Any]:
    """The config's engine keywords, token ids in and out (no tokenizer); without the draft if not
    `speculative` (as `loadtests.rawvsapp.raw_sglang --speculation off`)."""
    from deployments.replica.engine import engine_kwargs

    kw = engine_kwargs(config)
    if not speculative:
        kw = {k: v for k, v in kw.items() if not k.startswith("speculative_")}
    kw["skip_tokenizer_init"] = True
    return kw
