"""The engine alone under serving-like arrivals: SGLang's plain engine vs specflip held OFF
(warm_kv, cold) and ON, one engine at a time, the same requests for each.

    python -m loadtests.bench.engine_arrivals --config deployments/examples/h200-dummy8b-serving.yaml \\
        --concurrency 64,128,256 --out out/arrivals

Why: through the app, a replica held OFF delivered 0.81-0.91x SGLang's plain server while the same
path carried ON at 1.03-1.13x SGLang's EAGLE-3 server, the engines' own counts agreeing with the
client (docs/benchmarks.md, second H200 serving run): the gap is in the OFF engine under arrivals,
which the OFF-cost bench (one batch, its prefill up front) does not exercise. This bench drives each
engine in process, without HTTP or tokenizer (token ids in, `skip_tokenizer_init`), with c
closed-loop users that each send `--requests-per-user` requests one after another: prompts of
`--input-len` token ids, output lengths uniform in output-len x [1-s, 1+s] (ignore_eos), so
prefills join a running decode batch as they do when serving. Output tok/s = the tokens the engine
returned over the level's wall time (ramp-up and tail included, the same for every engine, so the
ratios compare). Each engine gets the config's engine arguments (`deployments.engine.engine_kwargs`,
`replicas.env` set first); plain drops every `speculative_*` argument, as `loadtests.raw_sglang`
does. Greedy outputs are compared with the plain engine's: token-identical in fp32 on CPU; in bf16
a near-tie can differ (counted, not failed). Writes results.json and report.md to --out.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["VARIANTS", "closed_loop", "in_process_kwargs", "main", "make_requests", "prepare_process"]

VARIANTS = ("plain", "on", "off_warm_kv", "off_cold")  # specflip variants share one engine


def log(msg: str) -> None:
    print(f"[engine-arrivals {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def make_requests(
    users: int, per_user: int, input_len: int, output_len: int, spread: float, vocab: int, seed: int = 0
) -> list[tuple[list[int], int]]:
    """(prompt token ids, max_new_tokens) per request; the same for every engine given the seed."""
    rng = random.Random(seed * 7919 + users)
    lo, hi = max(1, round(output_len * (1 - spread))), round(output_len * (1 + spread))
    return [
        ([rng.randrange(10, vocab) for _ in range(input_len)], rng.randint(lo, hi))
        for _ in range(users * per_user)
    ]


async def _drive(engine: Any, requests: list[tuple[list[int], int]], users: int) -> list[list[int]]:
    pending = list(enumerate(requests))[::-1]
    outputs: list[list[int]] = [[] for _ in requests]

    async def user() -> None:
        while pending:
            i, (ids, n) = pending.pop()
            params = {"max_new_tokens": n, "temperature": 0, "ignore_eos": True}
            out = await engine.async_generate(input_ids=ids, sampling_params=params)
            outputs[i] = list(out["output_ids"])

    await asyncio.gather(*(user() for _ in range(users)))
    return outputs


def closed_loop(
    engine: Any, requests: list[tuple[list[int], int]], users: int
) -> tuple[list[list[int]], float]:
    """Run `requests` with `users` in flight at a time; (outputs in request order, wall seconds)."""
    t0 = time.perf_counter()
    outputs = engine.loop.run_until_complete(_drive(engine, requests, users))
    return outputs, time.perf_counter() - t0


def _level(engine: Any, requests: list[tuple[list[int], int]], users: int) -> dict[str, Any]:
    closed_loop(engine, [(ids, 4) for ids, _ in requests[:users]], users)  # warm-up at this batch size
    outputs, seconds = closed_loop(engine, requests, users)
    tokens = sum(len(o) for o in outputs)
    return {
        "tokens": tokens,
        "seconds": round(seconds, 3),
        "tok_s": round(tokens / seconds, 1),
        "outputs": outputs,
    }


def prepare_process(config: Any) -> int:
    """Set this process up to start the config's engines (`replicas.env`, e.g. SGLANG_SIMULATE_ACC_LEN,
    read when a scheduler starts; the CPU shim before sglang's kernels load); the model's vocab size."""
    from deployments.config import Device

    os.environ.update(config.replicas.env)
    if config.engine.device is Device.CPU:
        from loadtests.rawvsapp import CPU_ENV
        from patched_worker.cpu.shim import enable

        os.environ.update(CPU_ENV)
        enable()
    from transformers import AutoConfig

    return int(AutoConfig.from_pretrained(config.model.path).vocab_size)


def in_process_kwargs(config: Any, speculative: bool) -> dict[str, Any]:
    """The config's engine keywords, token ids in and out (no tokenizer); without the draft if not
    `speculative` (as `loadtests.raw_sglang --speculation off`)."""
    from deployments.engine import engine_kwargs

    kw = engine_kwargs(config)
    if not speculative:
        kw = {k: v for k, v in kw.items() if not k.startswith("speculative_")}
    kw["skip_tokenizer_init"] = True
    return kw


def _run_plain(config: Any, levels: dict[int, list[tuple[list[int], int]]]) -> dict[int, dict[str, Any]]:
    import sglang

    engine = sglang.Engine(**in_process_kwargs(config, speculative=False))
    try:
        out = {}
        for c, requests in levels.items():
            out[c] = _level(engine, requests, c)
            log(
                f"plain c={c}: {out[c]['tok_s']:,.0f} tok/s ({out[c]['tokens']} tokens, {out[c]['seconds']} s)"
            )
        return out
    finally:
        engine.shutdown()


def _run_specflip(
    config: Any, levels: dict[int, list[tuple[list[int], int]]], variants: list[str]
) -> dict[str, dict[int, dict[str, Any]]]:
    from patched_worker.engine import SpecFlipEngine
    from patched_worker.state import Strategy, SwitchConfig

    s = config.speculation
    switch = SwitchConfig(strategy=s.strategy, start_enabled=True, allow_cold=True)
    engine = SpecFlipEngine(switch=switch, **in_process_kwargs(config, speculative=True))
    out: dict[str, dict[int, dict[str, Any]]] = {}
    try:
        for variant in variants:
            engine.set_speculation(variant == "on")
            if variant != "on":
                engine.set_strategy(Strategy(variant.removeprefix("off_")))
            out[variant] = {}
            for c, requests in levels.items():
                before = engine.get_speculation_state().generated_tokens
                r = _level(engine, requests, c)
                state = engine.get_speculation_state()
                # its own count: tokens decode steps committed (the warm-up's included, first tokens made
                # by prefill not; ON may count a verify's tokens past max_new_tokens that are then cut)
                r["engine_tokens"] = state.generated_tokens - before
                r["strategy"] = state.strategy.value
                r["enabled"] = state.enabled
                out[variant][c] = r
                log(
                    f"specflip {variant} c={c}: {r['tok_s']:,.0f} tok/s ({r['tokens']} tokens, {r['seconds']} s)"
                )
        return out
    finally:
        engine.shutdown()


def _report(results: dict[str, Any]) -> str:
    plain = results["runs"].get("plain", {})
    variants = [v for v in VARIANTS if v in results["runs"]]
    header = "| c | " + " | ".join(variants) + " |"
    lines = [
        "# The engine alone under arrivals: plain vs specflip OFF and ON",
        "",
        f"{results['started']}. Config `{results['config']}`; {results['requests_per_user']} requests per "
        f"user, prompts of {results['input_len']} token ids, output lengths {results['output_len']} x "
        f"[{1 - results['spread']:g}, {1 + results['spread']:g}] (ignore_eos), greedy. Output tok/s over "
        "each level's wall time; x = over the plain engine at the same level; identical = requests whose "
        "output equals the plain engine's, token for token.",
        "",
        header,
        "|---:|" + "---|" * len(variants),
    ]
    for c in results["concurrency"]:
        cells = []
        for v in variants:
            r, base = results["runs"][v].get(str(c)), plain.get(str(c))
            if r is None:
                cells.append("")
                continue
            cell = f"{r['tok_s']:,.0f}"
            if base and v != "plain":
                cell += f" ({r['tok_s'] / base['tok_s']:.3f}x, identical {r['identical']}/{r['requests']})"
            cells.append(cell)
        lines.append(f"| {c} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m loadtests.bench.engine_arrivals", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--config", type=Path, required=True, help="specflip config (its engine arguments)")
    p.add_argument("--concurrency", default="64,128,256")
    p.add_argument("--variants", default=",".join(VARIANTS), help=f"comma list of {', '.join(VARIANTS)}")
    p.add_argument("--requests-per-user", type=int, default=4)
    p.add_argument("--input-len", type=int, default=128)
    p.add_argument("--output-len", type=int, default=128)
    p.add_argument("--output-spread", type=float, default=0.5)
    p.add_argument("--out", type=Path, default=Path("out/engine_arrivals"))
    a = p.parse_args(argv)
    variants = [v for v in a.variants.split(",") if v]
    if set(variants) - set(VARIANTS) or not variants:
        print(f"engine_arrivals: --variants takes {', '.join(VARIANTS)}", file=sys.stderr)
        return 2
    concurrency = sorted({int(x) for x in a.concurrency.split(",") if x.strip()})

    from deployments.config import load_config

    config = load_config(str(a.config))
    vocab = prepare_process(config)
    levels = {
        c: make_requests(c, a.requests_per_user, a.input_len, a.output_len, a.output_spread, vocab)
        for c in concurrency
    }
    results: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%d %H:%M:%S"), "config": str(a.config), "concurrency": concurrency,
        "requests_per_user": a.requests_per_user, "input_len": a.input_len, "output_len": a.output_len,
        "spread": a.output_spread, "runs": {},
    }  # fmt: skip
    runs: dict[str, dict[int, dict[str, Any]]] = {}
    if "plain" in variants:
        log("plain engine: starting")
        runs["plain"] = _run_plain(config, levels)
    spec = [v for v in VARIANTS if v in variants and v != "plain"]
    if spec:
        log(f"specflip engine: starting ({', '.join(spec)})")
        runs.update(_run_specflip(config, levels, spec))
    plain_outputs = {c: r["outputs"] for c, r in runs.get("plain", {}).items()}
    for variant, by_c in runs.items():
        for c, r in by_c.items():
            outputs, base = r.pop("outputs"), plain_outputs.get(c)
            r["requests"] = len(outputs)
            r["identical"] = None if base is None else sum(o == b for o, b in zip(outputs, base, strict=True))
        results["runs"][variant] = {str(c): r for c, r in by_c.items()}
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "results.json").write_text(json.dumps(results, indent=1))
    (a.out / "report.md").write_text(_report(results))
    log(f"done: {a.out / 'report.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
