"""OFF-mode memory: the largest batch an EAGLE-3 engine held OFF admits at long contexts vs a plain engine,
and the device memory its extra (plain decode) CUDA graphs take.

    python -m loadtests.bench.off_memory --out DIR [--contexts 4096,8192,16384] [--modes off] [--doc docs/benchmarks.md]

Llama-3.1-8B shapes with random weights (`load_format="dummy"`), bf16, flashinfer, CUDA graphs,
radix cache off; both engines get the same `mem_fraction_static` and a `max_running_requests`
high enough that KV memory is the bound (speculation otherwise caps it at 48). At each context
length C: requests of C - new prompt tokens, enough to overfill the KV pool, submitted at once;
recorded: the most requests running at once (SGLang's load snapshot, polled every 10 ms), the
KV pool size in tokens, the device memory each engine took at start. specflip runs EAGLE-3
(3 steps / topk 1 / 4 draft tokens) held OFF (warm_kv) from the start; `--modes off,on` also
measures it ON. Writes results.json to DIR and, with --doc, its `## ` section of that file.
`--cpu` runs the same procedure on the tiny CPU pair (small contexts) to check the script.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import threading
import time
from pathlib import Path

__all__ = ["main"]

SECTION = "## OFF-mode memory: the batch OFF admits at long contexts"


def log(msg: str) -> None:
    print(f"[off-memory {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _long_context_shapes(root: str) -> tuple[str, str]:
    """8B-shaped target and draft directories whose configs allow the longest context measured."""
    from loadtests.models.dummy8b import write_shapes

    target, draft = write_shapes(os.path.join(root, "shapes"))
    for path in (target, draft):
        cfg_path = Path(path) / "config.json"
        cfg = json.loads(cfg_path.read_text())
        cfg["max_position_embeddings"] = 32768  # dummy weights: positions only need to be allowed
        cfg_path.write_text(json.dumps(cfg, indent=1))
    return target, draft


def engine_kwargs(args, target: str, draft: str | None) -> dict:
    max_ctx = max(args.contexts) + args.new_tokens + 16
    if args.cpu:
        from patched_worker.engine import cpu_engine_kwargs

        return cpu_engine_kwargs(
            target,
            draft,
            max_total_tokens=args.cpu_pool_tokens,
            context_length=max_ctx,
            max_running_requests=args.max_running,
            skip_tokenizer_init=True,
        )
    kw = dict(
        model_path=target,
        load_format="dummy",
        dtype="bfloat16",
        attention_backend=args.attention,
        skip_tokenizer_init=True,
        disable_radix_cache=True,
        max_running_requests=args.max_running,
        mem_fraction_static=args.mem_fraction,
        context_length=max_ctx,
        log_level="error",
    )
    if draft:
        kw.update(
            speculative_algorithm="EAGLE3",
            speculative_draft_model_path=draft,
            speculative_num_steps=3,
            speculative_eagle_topk=1,
            speculative_num_draft_tokens=4,
        )
    return kw


def _device_free() -> int | None:
    import torch

    if not torch.cuda.is_available():
        return None
    torch.cuda.synchronize()
    return torch.cuda.mem_get_info()[0]


def _snapshots(engine) -> list:
    return engine.tokenizer_manager.load_snapshot_reader.read_all()


def admitted(engine, context: int, new: int, pool_tokens: int, vocab: int) -> dict:
    """Overfill the KV pool with requests of `context` tokens; the most that ran at once."""
    n = int(1.25 * pool_tokens / context) + 4
    rng = random.Random(context)
    prompts = [[rng.randrange(10, vocab) for _ in range(context - new)] for _ in range(n)]
    peak = {"running": 0, "used_tokens": 0, "token_usage": 0.0}
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            for snap in _snapshots(engine):
                peak["running"] = max(peak["running"], snap.num_running_reqs)
                peak["used_tokens"] = max(peak["used_tokens"], snap.num_used_tokens)
                peak["token_usage"] = max(peak["token_usage"], round(snap.token_usage, 4))
            time.sleep(0.01)

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    started = time.perf_counter()
    try:
        engine.generate(
            input_ids=prompts, sampling_params={"max_new_tokens": new, "temperature": 0, "ignore_eos": True}
        )
    finally:
        stop.set()
        thread.join()
    return {
        "context": context,
        "submitted": n,
        "peak_running": peak["running"],
        "peak_used_tokens": peak["used_tokens"],
        "peak_token_usage": peak["token_usage"],
        "seconds": round(time.perf_counter() - started, 1),
    }


def _pool_tokens(engine) -> int:
    info = engine.get_server_info()
    tokens = info.get("max_total_num_tokens")
    if not tokens:
        tokens = max((s.max_total_num_tokens for s in _snapshots(engine)), default=0)
    return int(tokens)


def run_engine(args, name: str, target: str, draft: str | None) -> dict:
    import sglang

    from patched_worker.engine import SpecFlipEngine
    from patched_worker.state import SwitchConfig

    free_before = _device_free()
    if draft is None:
        engine = sglang.Engine(**engine_kwargs(args, target, None))
    else:
        engine = SpecFlipEngine(SwitchConfig(start_enabled=False), **engine_kwargs(args, target, draft))
    free_after = _device_free()
    out: dict = {
        "engine": name,
        "pool_tokens": _pool_tokens(engine),
        "device_bytes_at_start": None
        if free_before is None or free_after is None
        else free_before - free_after,
        "max_running_requests": engine.server_args.max_running_requests,
    }
    try:
        modes = ["plain"] if draft is None else args.modes
        for mode in modes:
            if draft is not None:
                engine.set_speculation(mode == "on")
            out[mode] = []
            for context in args.contexts:
                row = admitted(
                    engine, context, args.new_tokens, out["pool_tokens"], 4000 if args.cpu else 30000
                )
                out[mode].append(row)
                log(f"{name} {mode} context {context}: {row}")
        if draft is not None:
            state = engine.get_speculation_state()
            out["off_cuda_graphs"], out["off_cuda_graphs_note"] = (
                state.off_cuda_graphs,
                state.off_cuda_graphs_note,
            )
            out["off_cuda_graphs_bytes"] = state.off_cuda_graphs_bytes
            out["strategy"] = state.strategy.value
    finally:
        engine.shutdown()
    return out


def _gib(n: int | None) -> str:
    return "n/a" if n is None else f"{n / 2**30:.2f} GiB"


def markdown(results: dict, command: str) -> str:
    plain, spec = results.get("plain", {}), results.get("specflip", {})
    lines = [
        f"{SECTION} ({results['device']}, {'tiny CPU pair' if results['cpu'] else 'Llama-3.1-8B shapes'})",
        "",
        f"`{command}` — "
        + (
            "a check of the script: the trained tiny pair, fp32, no CUDA graphs, a fixed KV pool; "
            if results["cpu"]
            else f"dummy weights, bf16, attention {results['attention']}, CUDA graphs, "
            f"mem_fraction_static {results['mem_fraction']}, "
        )
        + f"radix cache off, max_running_requests {results['max_running']}, "
        f"{results['new_tokens']} new tokens per request; specflip EAGLE-3 3 steps / topk 1 / 4 draft tokens, "
        f"held OFF ({spec.get('strategy', 'warm_kv')}). Measured {results['started']}.",
        "",
        "| engine | KV pool (tokens) | device memory taken at start | OFF decode CUDA graphs |",
        "|---|---|---|---|",
    ]
    for row in (plain, spec):
        if row and "error" not in row:
            graphs = (
                "-"
                if row is plain
                else f"{row.get('off_cuda_graphs')} ({_gib(row.get('off_cuda_graphs_bytes'))})"
            )
            lines.append(
                f"| {row['engine']} | {row['pool_tokens']} | {_gib(row['device_bytes_at_start'])} | "
                f"{graphs} |"
            )
    modes = [m for m in ("off", "on") if m in spec]
    lines += [
        "",
        "| context (tokens) | plain: most running | "
        + " | ".join(f"specflip {m.upper()}: most running (x plain)" for m in modes)
        + " |",
        "|---|---|" + "---|" * len(modes),
    ]
    for i, context in enumerate(results["contexts"]):
        base = plain.get("plain", [{}] * (i + 1))[i].get("peak_running") if "plain" in plain else None
        cells = []
        for m in modes:
            got = spec[m][i]["peak_running"]
            cells.append(f"{got}" + (f" ({got / base:.2f}x)" if base else ""))
        lines.append(f"| {context} | {base if base is not None else 'n/a'} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m loadtests.bench.off_memory", description=__doc__.splitlines()[0]
    )
    p.add_argument("--out", default=os.environ.get("OUT", "out/off_memory"))
    p.add_argument("--contexts", default=None, help="prompt+output lengths, comma-separated")
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--modes", default="off", help="specflip modes to measure: off, or off,on")
    p.add_argument("--only", default="plain,specflip")
    p.add_argument("--attention", default="flashinfer")
    p.add_argument("--mem-fraction", type=float, default=0.85)
    p.add_argument("--max-running", type=int, default=1024)
    p.add_argument("--doc", default=None, help="markdown file whose section this run replaces")
    p.add_argument("--cpu", action="store_true", help="tiny CPU pair, small contexts: checks the script only")
    p.add_argument("--cpu-pool-tokens", type=int, default=4096)
    a = p.parse_args(argv)
    a.contexts = [int(c) for c in (a.contexts or ("256,512" if a.cpu else "4096,8192,16384")).split(",")]
    a.modes = a.modes.split(",")
    os.makedirs(a.out, exist_ok=True)
    if a.cpu:
        from loadtests.models.build import build_pair
        from patched_worker.cpu import shim

        shim.enable()
        pair = build_pair(os.environ.get("SPECFLIP_MODELS", "models/tiny"), log=log)
        target, draft, device = pair.target, pair.draft, "CPU"
    else:
        import torch

        target, draft = _long_context_shapes(a.out)
        device = torch.cuda.get_device_name() if torch.cuda.is_available() else "no CUDA device"
    results: dict = {
        "device": device,
        "cpu": a.cpu,
        "contexts": a.contexts,
        "new_tokens": a.new_tokens,
        "attention": "intel_amx/torch_native" if a.cpu else a.attention,
        "mem_fraction": a.mem_fraction,
        "max_running": a.max_running,
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    for name in a.only.split(","):
        log(f"{name}: starting")
        try:
            results[name] = run_engine(a, name, target, draft if name == "specflip" else None)
        except Exception as e:  # keep the other engine's numbers
            import traceback

            results[name] = {"error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()[-3000:]}
        with open(os.path.join(a.out, "results.json"), "w") as f:
            json.dump(results, f, indent=1)
    ok = all("error" not in results.get(n, {}) for n in a.only.split(","))
    if not ok:
        log(f"failed: {json.dumps({n: results.get(n, {}).get('error') for n in a.only.split(',')})}")
        return 1
    command = "python -m loadtests.bench.off_memory " + " ".join(argv if argv is not None else sys.argv[1:])
    text = markdown(results, command)
    (Path(a.out) / "section.md").write_text(text)
    print(text, flush=True)
    if a.doc:
        from loadtests.markdown import write_section

        write_section(a.doc, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
