"""OFF-mode cost on a GPU: an EAGLE-3 engine held OFF vs a plain engine, side by side in one run.

    python -m loadtests.bench.off_cost --out DIR [--batches 64,128] [--acc-len 3]

Llama-3.1-8B shapes with random weights (`load_format="dummy"`; no checkpoint), bf16,
flashinfer attention, CUDA graphs, radix cache off. For each batch size N: N requests of
128 prompt tokens; output tok/s end to end (256 new tokens, prefill included) and steady
decode tok/s (from the difference between 256 and 16 new tokens). Engines, one at a time:
plain (no speculation); specflip (EAGLE-3 3 steps / topk 1 / 4 draft tokens) ON with
`SGLANG_SIMULATE_ACC_LEN` (simulated acceptance), OFF warm_kv, OFF full_extend, and the
re-enable (resync) cost; SGLang's own steps=0 path (`speculative_adaptive` whose candidate
steps at batch >= 64 are [0]). Writes results.json to DIR (docs/benchmarks.md has the table).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
import traceback

from loadtests.models.dummy8b import write_shapes

__all__ = ["main"]


def engine_kwargs(target: str, max_bs: int) -> dict:
    return dict(
        model_path=target,
        load_format="dummy",
        dtype="bfloat16",
        attention_backend="flashinfer",
        skip_tokenizer_init=True,
        disable_radix_cache=True,
        max_running_requests=max_bs,
        cuda_graph_max_bs_decode=max_bs,
        mem_fraction_static=0.75,
        log_level="error",
    )


def spec_kwargs(draft: str) -> dict:
    return dict(
        speculative_algorithm="EAGLE3",
        speculative_draft_model_path=draft,
        speculative_num_steps=3,
        speculative_eagle_topk=1,
        speculative_num_draft_tokens=4,
    )


def prompts(n: int, length: int = 128) -> list[list[int]]:
    rng = random.Random(n)
    return [[rng.randrange(1000, 30000) for _ in range(length)] for _ in range(n)]


def timed(engine, ids, new: int) -> float:
    t = time.perf_counter()
    engine.generate(
        input_ids=ids, sampling_params={"max_new_tokens": new, "temperature": 0, "ignore_eos": True}
    )
    return time.perf_counter() - t


def measure(engine, n: int, new: int = 256, short: int = 16) -> dict:
    ids = prompts(n)
    timed(engine, ids, 8)  # warm-up at this batch size
    t_long, t_short = timed(engine, ids, new), timed(engine, ids, short)
    return {
        "e2e_tok_s": round(n * new / t_long, 1),
        "decode_tok_s": round(n * (new - short) / (t_long - t_short), 1),
    }


def log(msg: str) -> None:
    print(f"[off-cost {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def run_plain(target, batches, max_bs):
    import sglang

    eng = sglang.Engine(**engine_kwargs(target, max_bs))
    try:
        return {n: measure(eng, n) for n in batches}
    finally:
        eng.shutdown()


def run_specflip(target, draft, batches, max_bs, acc_len):
    from patched_worker.engine import SpecFlipEngine
    from patched_worker.state import Strategy, SwitchConfig

    os.environ["SGLANG_SIMULATE_ACC_LEN"] = str(acc_len)  # read when the scheduler imports spec_utils
    try:
        eng = SpecFlipEngine(
            SwitchConfig(allow_cold=True), **engine_kwargs(target, max_bs), **spec_kwargs(draft)
        )
    finally:
        del os.environ["SGLANG_SIMULATE_ACC_LEN"]
    out: dict = {"on": {}, "off_warm_kv": {}, "off_full_extend": {}, "off_cold": {}}
    try:
        state = eng.get_speculation_state()
        out["off_cuda_graphs"], out["off_cuda_graphs_note"] = (
            state.off_cuda_graphs,
            state.off_cuda_graphs_note,
        )
        for n in batches:
            out["on"][n] = measure(eng, n)
            log(f"specflip ON n={n}: {out['on'][n]}")
        eng.set_speculation(False)
        for strategy in (Strategy.WARM_KV, Strategy.COLD, Strategy.FULL_EXTEND):
            eng.set_strategy(strategy)
            for n in batches:
                out[f"off_{strategy.value}"][n] = measure(eng, n)
                log(f"specflip OFF {strategy.value} n={n}: {out[f'off_{strategy.value}'][n]}")
        eng.set_strategy(Strategy.WARM_KV)
        n = min(batches)
        resync = []
        for _ in range(3):  # flip ON 20 steps into an OFF run, then back OFF
            eng.set_speculation(False)
            eng.schedule_flips([20, 40])
            timed(eng, prompts(n), 64)
            resync.append(eng.get_speculation_state().last_resync_ms)
        out["resync_ms"] = {"batch": n, "runs": resync}
        st = eng.get_speculation_state()
        out["final_state"] = {
            "toggles": st.toggles,
            "resyncs": st.resyncs,
            "off_cuda_graphs": st.off_cuda_graphs,
        }
        return out
    finally:
        eng.shutdown()


def run_steps0(target, draft, batches, max_bs, root):
    import sglang

    cfg = os.path.join(root, "adaptive_steps0.json")
    with open(cfg, "w") as f:
        json.dump({"1": {"candidate_steps": [0, 3]}, "64": {"candidate_steps": [0]}}, f)
    eng = sglang.Engine(
        **engine_kwargs(target, max_bs),
        **spec_kwargs(draft),
        speculative_adaptive=True,
        speculative_adaptive_config=cfg,
    )
    try:
        return {n: measure(eng, n) for n in batches}
    finally:
        eng.shutdown()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m loadtests.bench.off_cost", description=__doc__.splitlines()[0]
    )
    p.add_argument("--out", default=os.environ.get("OUT", "out/off_cost"))
    p.add_argument("--batches", default="64,128")
    p.add_argument("--acc-len", type=float, default=3.0)
    p.add_argument("--only", default="plain,specflip,steps0")
    a = p.parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    batches = [int(x) for x in a.batches.split(",")]
    max_bs = max(batches)
    target, draft = write_shapes(os.path.join(a.out, "shapes"))
    results: dict = {"batches": batches, "acc_len": a.acc_len, "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    runs = {
        "plain": lambda: run_plain(target, batches, max_bs),
        "specflip": lambda: run_specflip(target, draft, batches, max_bs, a.acc_len),
        "steps0": lambda: run_steps0(target, draft, batches, max_bs, a.out),
    }
    for name in a.only.split(","):
        t0 = time.time()
        log(f"{name}: starting")
        try:
            results[name] = runs[name]()
        except Exception as e:  # keep the other engines' numbers
            results[name] = {"error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()[-3000:]}
        log(f"{name}: done in {time.time() - t0:.0f}s: {json.dumps(results[name])[:600]}")
        with open(os.path.join(a.out, "results.json"), "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
