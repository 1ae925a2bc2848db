"""The first flips at a batch size an engine has not run yet: does a step stop while a kernel compiles?

    python -m loadtests.bench.first_flips --config deployments/examples/h200-dummy8b-tree.yaml \\
        --warm-up none,product --batches 37,100 --out out/first_flips

For each `--warm-up` a fresh engine starts OFF with an empty Triton cache of its own (`none`: nothing
before the rounds; `product`: the replica's warm-up, `deployments.replica.warmup`, at the config's
max_running_requests). Then per batch size n, `--repeat` rounds of the warm-up's kind
(`flip_round`): n requests prefilled and decoding OFF, switched ON while they decode (the resync,
then ON steps at n) and back OFF. Per round, and for the warm-up itself: seconds, resyncs, and the
steps the engine found slow (host call >= 0.25 s; `SpeculationState.slow_step_log`: kind, batch
size, host ms). SGLang's speculative path launches Triton kernels outside its CUDA graphs whose
block size is a constant of `next_power_of_2(batch)`; if those compiles are what stops a replica
at its first ON at a new batch size, `none` shows slow `on`/`resync` steps in the first round at
each new power-of-two bucket and none in the next, and `product` shows them in its warm-up only.
Writes results.json and report.md to --out.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from loadtests.bench.inprocess import in_process_kwargs, prepare_process, write_outputs

__all__ = ["main"]

WARM_UPS = ("none", "product")


def log(msg: str) -> None:
    print(f"[first-flips {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _timed(engine: Any, label: str, coro: Any) -> dict[str, Any]:
    """Run `coro` on the engine's loop; its seconds, resyncs and the slow steps the engine logged."""
    before = engine.get_speculation_state()
    started = time.monotonic()
    engine.loop.run_until_complete(coro)
    seconds = time.monotonic() - started
    after = engine.get_speculation_state()
    new = after.slow_steps - before.slow_steps
    # the engine keeps its last 16: a round with more lists those
    slow = [list(e) for e in after.slow_step_log[max(0, len(after.slow_step_log) - new) :]] if new else []
    row = {"round": label, "seconds": round(seconds, 3), "resyncs": after.resyncs - before.resyncs,
           "slow_steps": new, "slow": slow}  # fmt: skip
    text = ", ".join(f"{kind} at batch {bs}: {ms:,.0f} ms" for _, kind, bs, ms in slow) or "none"
    log(f"{label}: {seconds:.2f} s, {row['resyncs']} resyncs, slow steps: {text}")
    return row


def _engine_run(config: Any, warm_up: str, batches: list[int], repeat: int) -> dict[str, Any]:
    from deployments.replica.warmup import flip_round
    from deployments.replica.warmup import warm_up as product_warm_up
    from patched_worker.engine import SpecFlipEngine
    from patched_worker.state import SwitchConfig

    # an empty Triton cache of this engine's own: the other engine's compiles must not help it
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix=f"first-flips-{warm_up}-")
    started = time.monotonic()
    engine = SpecFlipEngine(
        switch=SwitchConfig(strategy=config.speculation.strategy, start_enabled=False),
        **in_process_kwargs(config, speculative=True),
    )
    rows = []
    try:
        log(f"warm-up {warm_up}: engine up in {time.monotonic() - started:.0f} s")
        if warm_up == "product":
            cap = config.engine.max_running_requests
            rows.append(_timed(engine, f"warm-up (batch 1-{cap})", product_warm_up(engine, False, cap)))
        for n in batches:
            for k in range(repeat):
                rows.append(_timed(engine, f"batch {n} round {k + 1}", flip_round(engine, False, n)))
    finally:
        engine.shutdown()
    return {"warm_up": warm_up, "rounds": rows}


def _report(results: dict[str, Any]) -> str:
    lines = [
        "# The first flips at a new batch size",
        "",
        f"{results['started']}. Config `{results['config']}`. Each engine started OFF with an empty Triton "
        "cache of its own; a round: a batch prefilled and decoding OFF, switched ON mid-decode (resync, ON "
        "steps) and back OFF. Slow steps: host call >= 0.25 s, as the engine logged them.",
        "",
        "| warm-up | round | seconds | resyncs | slow steps (kind, batch, host ms) |",
        "|---|---|---:|---:|---|",
    ]
    for run in results["runs"]:
        for r in run["rounds"]:
            slow = "; ".join(f"{kind} {bs} {ms:,.0f}" for _, kind, bs, ms in r["slow"]) or "-"
            lines.append(
                f"| {run['warm_up']} | {r['round']} | {r['seconds']:.2f} | {r['resyncs']} | {slow} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m loadtests.bench.first_flips", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--config", type=Path, required=True, help="specflip config (its engine arguments)")
    p.add_argument("--warm-up", default="none,product", help=f"comma list of {', '.join(WARM_UPS)}")
    p.add_argument("--batches", default="37,100", help="batch sizes of the rounds, in this order")
    p.add_argument("--repeat", type=int, default=2, help="rounds per batch size")
    p.add_argument("--out", type=Path, default=Path("out/first_flips"))
    a = p.parse_args(argv)
    warm_ups = [w.strip() for w in a.warm_up.split(",") if w.strip()]
    try:
        batches = [int(x) for x in a.batches.split(",") if x.strip()]
    except ValueError:
        batches = []
    if set(warm_ups) - set(WARM_UPS) or not warm_ups or not batches or min(batches) < 1 or a.repeat < 1:
        print(f"first_flips: --warm-up of {WARM_UPS}, --batches >= 1, --repeat >= 1", file=sys.stderr)
        return 2
    from deployments.config import load_config

    config = load_config(str(a.config))
    prepare_process(config)
    too_big = [n for n in batches if n > config.engine.max_running_requests]
    if too_big:
        print(f"first_flips: --batches {too_big} above max_running_requests", file=sys.stderr)
        return 2
    results: dict[str, Any] = {"started": time.strftime("%Y-%m-%d %H:%M:%S"), "config": str(a.config),
                               "batches": batches, "repeat": a.repeat, "runs": []}  # fmt: skip
    for w in warm_ups:
        results["runs"].append(_engine_run(config, w, batches, a.repeat))
        write_outputs(a.out, results, _report(results))
    log(f"done: {a.out / 'report.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
