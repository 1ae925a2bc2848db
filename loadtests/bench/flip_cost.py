"""What a flip costs: a specflip engine under closed-loop load, flipped OFF and ON on a schedule.

    python -m loadtests.bench.flip_cost --config deployments/examples/h200-dummy8b-serving.yaml \\
        --concurrency 64,256 --flips 4 --dwell 3 --out out/flip_cost

For each level c: c users stream requests (token ids, greedy, ignore_eos; `loadtests.bench.inprocess`)
with speculation ON; after `--settle` s the engine is flipped OFF, ON, OFF, ... every `--dwell` s
(`--flips` flips), while the load runs. Per flip:
- `call_ms`: `set_speculation`'s round trip (the request waits for the scheduler's next iteration);
- `flip_ms`: the scheduler's own time from handling the request to the step the new mode took effect
  at (`SpeculationState.last_flip_ms`: an OFF takes effect as its step starts, an ON once its resync
  step is launched); call + flip bounds the time from the decision to the first step in the new mode;
- `resync_ms` (OFF -> ON): the decode-mode draft resync at that batch (device time on CUDA);
- the batch at the flip.
Latency across flips: the gaps between a stream's chunks that arrived within `--around` s after a
flip, and time to first token of the requests sent then, against those of the steady stretches
(from half the settle time on, away from the flips). The flip decision itself is the policy's; from a
replica it is applied at the replica's next tick (`replicas.tick_s`), which this bench leaves out.
Writes results.json and report.md to --out.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from typing import Any

from loadtests.bench.inprocess import (
    StreamedRun,
    bench_parser,
    in_process_kwargs,
    make_requests,
    prepare_process,
    streamed,
    write_outputs,
)

__all__ = ["flip_latency", "main"]


def log(msg: str) -> None:
    print(f"[flip-cost {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def flip_latency(run: StreamedRun, flips: list[float], around_s: float, steady_from: float) -> dict[str, Any]:
    """Chunk gaps (ms) and TTFT (ms) near the flips (within `around_s` after one), and steady: from
    `steady_from` (the ramp-up left out) on, away from the flips."""
    near_gap: list[float] = []
    far_gap: list[float] = []
    near_ttft: list[float] = []
    far_ttft: list[float] = []

    def near(t: float) -> bool:
        return any(f <= t < f + around_s for f in flips)

    for s in run.streams:
        if s.ttft_s is not None and near(s.sent):
            near_ttft.append(1e3 * s.ttft_s)
        elif s.ttft_s is not None and s.sent >= steady_from:
            far_ttft.append(1e3 * s.ttft_s)
        for (t0, _), (t1, _) in zip(s.chunks, s.chunks[1:], strict=False):
            if near(t1):
                near_gap.append(1e3 * (t1 - t0))
            elif t1 >= steady_from:
                far_gap.append(1e3 * (t1 - t0))
    return {
        "itl_p50_near_ms": _pct(near_gap, 0.5), "itl_p99_near_ms": _pct(near_gap, 0.99),
        "itl_p50_steady_ms": _pct(far_gap, 0.5), "itl_p99_steady_ms": _pct(far_gap, 0.99),
        "ttft_p50_near_ms": _pct(near_ttft, 0.5), "ttft_p99_near_ms": _pct(near_ttft, 0.99),
        "ttft_p50_steady_ms": _pct(far_ttft, 0.5), "ttft_p99_steady_ms": _pct(far_ttft, 0.99),
        "gaps_near": len(near_gap), "requests_near": len(near_ttft),
    }  # fmt: skip


def _level(engine: Any, c: int, args: argparse.Namespace, vocab: int) -> dict[str, Any]:
    engine.set_speculation(True)
    engine.generate(input_ids=[[11, 12, 13]], sampling_params={"max_new_tokens": 2})  # applies ON
    requests = make_requests(c, 4, args.input_len, args.output_len, args.output_spread, vocab, seed=c)
    schedule = [args.settle + k * args.dwell for k in range(args.flips)]  # seconds after the start
    flips: list[dict[str, Any]] = []
    pending: list[dict[str, Any]] = []  # flips asked for, their effect not read back yet

    async def on_tick(elapsed: float) -> None:
        if pending:  # read the scheduler's own figures once the flip took effect
            f = pending[0]
            state = await asyncio.to_thread(engine.get_speculation_state)
            done = state.enabled is (f["to"] == "on") and state.toggles > f["toggles"]
            if done and f["to"] == "on" and state.resyncs_timed <= f["resyncs_timed"]:
                done = False  # the resync's device time is read once it has finished
            if done:
                f["flip_ms"], f["seen_after_ms"] = state.last_flip_ms, (time.perf_counter() - f["t"]) * 1e3
                if f["to"] == "on":
                    f["resync_ms"] = state.last_resync_ms
                pending.pop(0)
            return
        if len(flips) < len(schedule) and elapsed >= schedule[len(flips)]:
            want_on = len(flips) % 2 == 1  # OFF first, then ON, ...
            before = await asyncio.to_thread(engine.get_speculation_state)
            f = {"to": "on" if want_on else "off", "t": time.perf_counter(), "batch": before.running,
                 "toggles": before.toggles, "resyncs_timed": before.resyncs_timed}  # fmt: skip
            flips.append(f)
            await asyncio.to_thread(engine.set_speculation, want_on)
            f["call_ms"] = (time.perf_counter() - f["t"]) * 1e3
            pending.append(f)

    until = args.settle + args.dwell * args.flips
    run = streamed(engine, requests, c, on_tick=on_tick, until_s=until)
    for f in flips:
        f["at_s"] = round(f.pop("t") - run.started, 3)
        for key in ("toggles", "resyncs_timed"):
            f.pop(key)
    return {
        "concurrency": c,
        "seconds": round(run.ended - run.started, 3),
        "requests": len(run.streams),
        "flips": flips,
        "latency": flip_latency(
            run, [run.started + f["at_s"] for f in flips], args.around, run.started + args.settle / 2
        ),
    }


def _median(flips: list[dict[str, Any]], key: str, to: str | None = None) -> float | None:
    values = [f[key] for f in flips if f.get(key) is not None and (to is None or f["to"] == to)]
    return statistics.median(values) if values else None


def _f(x: float | None, fmt: str = "{:.1f}") -> str:
    return "-" if x is None else fmt.format(x)


def _report(results: dict[str, Any]) -> str:
    lines = [
        "# What a flip costs: a specflip engine flipped under load",
        "",
        f"{results['started']}. Config `{results['config']}`; prompts of {results['input_len']} token ids, "
        f"output lengths {results['output_len']} x [{1 - results['spread']:g}, {1 + results['spread']:g}] "
        f"(ignore_eos), greedy, streamed; ON for {results['settle']:g} s, then {results['flips']} flips "
        f"(OFF, ON, ...) {results['dwell']:g} s apart. Medians over the flips; near = within "
        f"{results['around']:g} s after a flip, steady = the rest.",
        "",
        "| c | batch at flip | call ms | scheduler ms, -> OFF / -> ON (resync step included) | resync ms "
        "| ITL p99 near / steady ms "
        "| TTFT p99 near / steady ms | flips seen |",
        "|---:|---:|---:|---:|---:|---|---|---:|",
    ]
    for r in results["levels"]:
        fl, lat = r["flips"], r["latency"]
        seen = sum(f.get("flip_ms") is not None for f in fl)
        lines.append(
            f"| {r['concurrency']} | {_f(_median(fl, 'batch'), '{:.0f}')} | {_f(_median(fl, 'call_ms'))} "
            f"| {_f(_median(fl, 'flip_ms', 'off'), '{:.2f}')} / {_f(_median(fl, 'flip_ms', 'on'), '{:.2f}')} "
            f"| {_f(_median(fl, 'resync_ms', 'on'), '{:.2f}')} "
            f"| {_f(lat['itl_p99_near_ms'])} / {_f(lat['itl_p99_steady_ms'])} "
            f"| {_f(lat['ttft_p99_near_ms'])} / {_f(lat['ttft_p99_steady_ms'])} | {seen}/{len(fl)} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = bench_parser("loadtests.bench.flip_cost", __doc__, "64,256", "out/flip_cost")
    p.add_argument("--flips", type=int, default=4, help="flips per level, OFF first")
    p.add_argument("--dwell", type=float, default=3.0, help="seconds between flips")
    p.add_argument("--settle", type=float, default=3.0, help="seconds ON before the first flip")
    p.add_argument("--around", type=float, default=1.0, help="seconds after a flip that count as near it")
    a = p.parse_args(argv)
    if a.flips < 1 or a.dwell <= 0 or a.around <= 0 or a.around > a.dwell:
        print("flip_cost: --flips >= 1, --dwell > 0 and 0 < --around <= --dwell", file=sys.stderr)
        return 2
    from deployments.config import load_config
    from patched_worker.engine import SpecFlipEngine
    from patched_worker.state import SwitchConfig

    config = load_config(str(a.config))
    vocab = prepare_process(config)
    results: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%d %H:%M:%S"), "config": str(a.config), "input_len": a.input_len,
        "output_len": a.output_len, "spread": a.output_spread, "settle": a.settle, "flips": a.flips,
        "dwell": a.dwell, "around": a.around, "levels": [],
    }  # fmt: skip
    s = config.speculation
    engine = SpecFlipEngine(
        switch=SwitchConfig(strategy=s.strategy, start_enabled=True),
        **in_process_kwargs(config, speculative=True),
    )
    try:
        for c in sorted({int(x) for x in a.concurrency.split(",") if x.strip()}):
            log(f"c={c}: {a.flips} flips, {a.dwell:g} s apart")
            r = _level(engine, c, a, vocab)
            results["levels"].append(r)
            log(
                f"c={c}: call {_f(_median(r['flips'], 'call_ms'))} ms, scheduler "
                f"{_f(_median(r['flips'], 'flip_ms', 'off'), '{:.2f}')} ms to OFF, "
                f"{_f(_median(r['flips'], 'flip_ms', 'on'), '{:.2f}')} ms to ON, resync "
                f"{_f(_median(r['flips'], 'resync_ms', 'on'), '{:.2f}')} ms; ITL p99 near a flip "
                f"{_f(r['latency']['itl_p99_near_ms'])} ms vs {_f(r['latency']['itl_p99_steady_ms'])} ms"
            )
    finally:
        engine.shutdown()
    log(f"done: {write_outputs(a.out, results, _report(results))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
