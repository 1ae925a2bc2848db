"""What a short prompt's tokenization costs on the replica's event loop against the hop to a thread,
with the loop idle and with the loop saturated (CPU).

    python -m loadtests.bench.tokenize_hop [--tokenizer models/tiny/target] [--samples 100]

A replica's one event loop serves HTTP, streams every request's chunks and runs SGLang's tokenizer
manager; under load it always has work ready. A thread that waits for the GIL behind such a loop
gets it when the loop's thread is made to drop it (Python's switch interval, 5 ms); how often one
tokenization waits so is not counted here, only what it adds up to. The saturated loop here is
`--busy-tasks` coroutines that each run Python for `--busy-us` and yield (`asyncio.sleep(0)`), so
ready callbacks never run out, as with many streams at once. Each sample tokenizes one
`--chars`-character text with `deployments.replica.prompts.tokenize_prompt` (text up to
INLINE_BYTES: on the loop) and with the same work handed to the replica's tokenizing thread
(`_WORKER`, how every prompt went before); latency p50 / p90 / max per case. Writes the table to
stdout and JSON to --out.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any

__all__ = ["main"]

ROOT = Path(__file__).resolve().parents[2]


async def _busy(work_s: float) -> None:
    while True:
        start = time.perf_counter()
        while time.perf_counter() - start < work_s:
            pass
        await asyncio.sleep(0)


async def _case(tokenizer: Any, text: str, hop: bool, busy: int, args: argparse.Namespace) -> dict[str, Any]:
    from deployments.http.limits import read_limits
    from deployments.replica import prompts

    limits = read_limits(str(args.tokenizer), context_length=10**9)
    loop = asyncio.get_running_loop()
    tasks = [asyncio.create_task(_busy(args.busy_us * 1e-6)) for _ in range(busy)]
    await asyncio.sleep(0.05)
    latencies = []
    for _ in range(args.samples):
        start = time.perf_counter()
        if hop:
            await loop.run_in_executor(
                prompts._WORKER, prompts._encode_within, tokenizer, text, limits, "prompt", "prompt"
            )
        else:
            await prompts.tokenize_prompt(tokenizer, text, limits)
        latencies.append(1e3 * (time.perf_counter() - start))
        if time.perf_counter() - start > args.give_up_s:
            break  # a saturated loop can hold the thread off for seconds: enough samples to say so
    for task in tasks:
        task.cancel()
    latencies.sort()
    n = len(latencies)
    return {
        "path": "thread hop" if hop else "on the loop (tokenize_prompt)",
        "loop": f"saturated ({busy} tasks x {args.busy_us} us)" if busy else "idle",
        "samples": n,
        "p50_ms": round(latencies[n // 2], 3),
        "p90_ms": round(latencies[min(n - 1, n * 9 // 10)], 3),
        "max_ms": round(latencies[-1], 3),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m loadtests.bench.tokenize_hop", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--tokenizer", type=Path, default=ROOT / "models" / "tiny" / "target")
    p.add_argument("--chars", type=int, default=256, help="characters of the prompt (code-like text)")
    p.add_argument("--samples", type=int, default=100)
    p.add_argument("--busy-tasks", type=int, default=4)
    p.add_argument("--busy-us", type=int, default=20, help="Python work per ready callback")
    p.add_argument("--give-up-s", type=float, default=2.0, help="stop a case after a sample this slow")
    p.add_argument("--out", type=Path, default=Path("out/tokenize_hop.json"))
    args = p.parse_args(argv)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(args.tokenizer))
    text = ("def add(a, b):\n    return a + b\n" * (args.chars // 32 + 1))[: args.chars]
    rows = []
    for busy in (0, args.busy_tasks):
        for hop in (False, True):
            rows.append(asyncio.run(_case(tokenizer, text, hop, busy, args)))
            r = rows[-1]
            print(f"{r['loop']:>28} | {r['path']:<30} | {r['samples']:>4} samples | p50 {r['p50_ms']:9.3f} ms"
                  f" | p90 {r['p90_ms']:9.3f} ms | max {r['max_ms']:9.3f} ms", flush=True)  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    settings = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    args.out.write_text(json.dumps({"settings": settings, "cases": rows}, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
