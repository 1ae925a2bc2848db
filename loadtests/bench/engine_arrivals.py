"""The engine alone under serving-like arrivals: SGLang's plain engine and its own EAGLE-3 engine
(`eagle`, unpatched) vs specflip held OFF (warm_kv, cold, and warm_kv with upstream's draft prefill)
and ON, one engine at a time, the same requests for each.

    python -m loadtests.bench.engine_arrivals --config deployments/examples/h200-dummy8b-serving.yaml \\
        --concurrency 64,128,256 --out out/arrivals

Why: through the app, a replica held OFF delivered less than SGLang's plain server at the same
batch (docs/benchmarks.md, "Serving at engine speed"), while the OFF-cost bench (one batch, its
prefill up front) showed OFF decoding at plain speed: this measures the engines under arrivals. This bench drives each
engine in process, without HTTP or tokenizer (token ids in, `skip_tokenizer_init`), with c
closed-loop users that each send `--requests-per-user` requests one after another: prompts of
`--input-len` token ids, output lengths uniform in output-len x [1-s, 1+s] (ignore_eos), so
prefills join a running decode batch as they do when serving. Requests are streamed; the steady
output tok/s counts the tokens that arrived from `--settle` s after a level's start until its last
request was sent (every user in flight, the batch held); the run's tok/s is every token over the
level's wall time, ramp-up and tail included (the first H200 run of this bench reported only that:
its batch averaged 164 at c=256, so it said little about a held batch). Each engine gets the config's engine arguments (`deployments.replica.engine.engine_kwargs`,
`replicas.env` set first); plain drops every `speculative_*` argument, as `loadtests.rawvsapp.raw_sglang`
does; eagle keeps them and runs SGLang's engine as released, in a process specflip never patched
(ON against it: what the patched worker costs with no HTTP in between). Greedy outputs are compared
with the plain engine's: token-identical in fp32 on CPU; in bf16 a near-tie can differ (counted, not failed). TTFT comes with its parts, from SGLang's own request
timestamps (every engine runs with `enable_metrics`, each in its own process): to the forward batch,
SGLang's `prefill_forward` stage (until the scheduler processed the prefill's result) and the way out;
at one user they say whether a first token waits in the scheduler or on its way. `--repeat N` runs
every level N times per engine (the specflip engine cycles its variants once per repeat; the plain
and eagle engines run before it): each level's record is its median run by steady tok/s, with every run's
numbers under `repeats`. `--profile-steps N` adds one unmeasured run per level and engine (variant)
with SGLang's own profiler (`Engine.start_profile`, torch's, CPU and GPU activity) over its first N
forward steps: the first wave's prefill chunks and the decode steps after them; each trace lands in
--out/profiles and its summary (`loadtests.bench.trace_summary`: GPU busy and idle, host waits, top
kernels) under the level's `profile`. Writes results.json and report.md to --out.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from loadtests.bench.inprocess import (
    bench_parser,
    closed_loop,
    in_process_kwargs,
    make_requests,
    prepare_process,
    streamed,
    write_outputs,
)
from loadtests.bench.trace_summary import line, summarize_file

__all__ = ["REPEAT_KEYS", "TTFT_PARTS", "VARIANTS", "WARMUP_TOKENS", "main"]

# specflip variants share one engine; off_draft_prefill = warm_kv with upstream's draft forward at every
# prefill (OffPrefill.DRAFT_FORWARD: how OFF prefilled before the OFF prefill wrote the draft K/V itself)
# eagle = SGLang's own EAGLE-3 engine, unpatched (the config's speculative arguments): ON's reference
VARIANTS = ("plain", "eagle", "on", "off_warm_kv", "off_draft_prefill", "off_cold")
SGLANG_ENGINES = ("plain", "eagle")  # each in its own process, without specflip's patches
WARMUP_TOKENS = 16  # per request of a level's warm-up (one request per user, before the level)
# TTFT's parts (inprocess.Stream.ttft_parts_s), from SGLang's request timestamps (engines run with
# enable_metrics, the same for every variant): to the forward batch, SGLang's prefill_forward stage, out
TTFT_PARTS = ("to_forward", "prefill_forward", "out")
REPEAT_KEYS = ("tok_s", "steady_tok_s", "seconds", "ttft_p50_ms")  # each repeat's, under a level's `repeats`


def log(msg: str) -> None:
    print(f"[engine-arrivals {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _warm_up(engine: Any, requests: list[tuple[list[int], int]], users: int) -> None:
    """A level's warm-up at its batch: one short request per user."""
    closed_loop(engine, [(ids, WARMUP_TOKENS) for ids, _ in requests[:users]], users)


def _level(engine: Any, requests: list[tuple[list[int], int]], users: int, settle_s: float) -> dict[str, Any]:
    """One level: tok/s over the whole run, and over the steady window (tokens that arrived from
    `settle_s` after the start until the last request was sent, while all `users` were in flight)."""
    _warm_up(engine, requests, users)
    run = streamed(engine, requests, users)
    seconds = run.ended - run.started
    tokens = sum(len(o) for o in run.outputs)
    w0, w1 = run.started + settle_s, run.drained
    steady = run.tokens_between(w0, w1) / (w1 - w0) if w1 > w0 else None
    window = [s for s in run.streams if s.ttft_s is not None and w0 <= s.sent < w1]
    ttfts = sorted(1e3 * t for s in window if (t := s.ttft_s) is not None)
    parts = [p for p in (s.ttft_parts_s for s in window) if p is not None]
    return {
        "ttft_p50_ms": round(ttfts[len(ttfts) // 2], 2) if ttfts else None,
        "ttft_p99_ms": round(ttfts[min(len(ttfts) - 1, int(0.99 * len(ttfts)))], 2) if ttfts else None,
        # p50 of each TTFT part (inprocess.Stream.ttft_parts_s): where a first token's time goes
        "ttft_parts_p50_ms": {
            name: round(1e3 * sorted(p[i] for p in parts)[len(parts) // 2], 2)
            for i, name in enumerate(TTFT_PARTS)
        }
        if parts
        else None,
        "tokens": tokens,
        "seconds": round(seconds, 3),
        "tok_s": round(tokens / seconds, 1),
        "steady_tok_s": None if steady is None else round(steady, 1),
        "steady_s": round(max(0.0, w1 - w0), 3),
        "outputs": run.outputs,
    }


def _profiled(
    engine: Any, requests: list[tuple[list[int], int]], users: int, steps: int, folder: str, name: str
) -> dict[str, Any] | None:
    """One more run of a level, not measured, with SGLang's profiler over its first `steps` forward
    steps (started before its first request); the trace's summary, None if no trace came."""
    import torch

    _warm_up(engine, requests, users)  # as before a measured run
    activities = ["CPU", "GPU"] if torch.cuda.is_available() else ["CPU"]
    engine.start_profile(
        output_dir=folder, num_steps=steps, activities=activities, with_stack=False, record_shapes=False,
        profile_id=name,
    )  # fmt: skip
    streamed(engine, requests, users)
    trace = Path(folder) / f"{name}-TP-0.trace.json.gz"  # SGLang's name for rank 0's trace
    # the scheduler writes it after the N-th step, while the run goes on: wait for its size to settle
    deadline, size = time.monotonic() + 60, -1
    while time.monotonic() < deadline and not (trace.exists() and trace.stat().st_size == size > 0):
        size = trace.stat().st_size if trace.exists() else -1
        time.sleep(1.0)
    if not trace.exists():
        log(f"{name}: no trace in {folder}")
        return None
    try:
        summary = summarize_file(trace)
    except (OSError, EOFError, ValueError) as e:  # a trace cut short costs its summary, not the run's results
        log(f"{name}: trace {trace} unreadable: {e}")
        return None
    log(f"{name}: profile of {steps} steps: {line(summary)}")
    return summary


def _repeated(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One level's record over its repeats: the median run by steady tok/s (by whole-run tok/s where a
    run has no steady window), every run's throughput and TTFT under `repeats`, and every run's outputs."""
    ranked = sorted(runs, key=lambda r: r["steady_tok_s"] if r["steady_tok_s"] is not None else r["tok_s"])
    median = dict(ranked[(len(runs) - 1) // 2])
    median["repeats"] = [{k: r[k] for k in REPEAT_KEYS} for r in runs]
    median["outputs"] = [r["outputs"] for r in runs]
    return median


def _in_own_process(kind: str, config_path: str, *args: Any) -> Any:
    """Run one engine's levels in a fresh process (`_engine_levels`): each engine runs with SGLang's
    metrics on, which register in the process that starts the engine (Prometheus collectors and their
    multiprocess folder, removed at shutdown), so a second engine in one process fails to start."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(_engine_levels, kind, config_path, *args).result()


def _engine_levels(kind: str, config_path: str, *args: Any) -> Any:
    from deployments.config import load_config

    config = load_config(config_path)
    prepare_process(config)
    return _run_specflip(config, *args) if kind == "specflip" else _run_sglang(config, kind, *args)


def _run_sglang(
    config: Any,
    kind: str,
    levels: dict[int, list[tuple[list[int], int]]],
    settle_s: float,
    repeat: int,
    profile: tuple[int, str],
) -> dict[int, dict[str, Any]]:
    import sglang

    engine = sglang.Engine(**in_process_kwargs(config, speculative=kind == "eagle"), enable_metrics=True)
    try:
        runs: dict[int, list[dict[str, Any]]] = {c: [] for c in levels}
        for k in range(repeat):
            for c, requests in levels.items():
                r = _level(engine, requests, c, settle_s)
                runs[c].append(r)
                log(
                    f"{kind} c={c}{_nth(k, repeat)}: {_steady(r)} tok/s steady, "
                    f"{r['tok_s']:,.0f} over the run "
                    f"({r['tokens']} tokens, {r['seconds']} s)"
                )
        out = {c: _repeated(rs) for c, rs in runs.items()}
        steps, folder = profile
        for c, requests in levels.items() if steps else ():
            out[c]["profile"] = _profiled(engine, requests, c, steps, folder, f"{kind}-c{c}")
        return out
    finally:
        engine.shutdown()


def _run_specflip(
    config: Any,
    levels: dict[int, list[tuple[list[int], int]]],
    variants: list[str],
    settle_s: float,
    repeat: int,
    profile: tuple[int, str],
) -> dict[str, dict[int, dict[str, Any]]]:
    from patched_worker.engine import SpecFlipEngine
    from patched_worker.state import OffPrefill, Strategy, SwitchConfig

    s = config.speculation
    switch = SwitchConfig(strategy=s.strategy, start_enabled=True, allow_cold=True)
    engine = SpecFlipEngine(switch=switch, **in_process_kwargs(config, speculative=True), enable_metrics=True)
    runs: dict[str, dict[int, list[dict[str, Any]]]] = {v: {c: [] for c in levels} for v in variants}

    def hold(variant: str) -> None:
        """The variant's mode and OFF upkeep (ON: the config's, whichever OFF variant ran before it)."""
        engine.set_speculation(variant == "on")
        if variant == "on":
            strategy = Strategy(s.strategy).value
        else:
            strategy = "warm_kv" if variant == "off_draft_prefill" else variant.removeprefix("off_")
        engine.set_strategy(Strategy(strategy))
        engine.set_off_prefill(
            OffPrefill.DRAFT_FORWARD if variant == "off_draft_prefill" else OffPrefill.KV_WRITE
        )
        # an engine applies a flip at its next decode step: short requests until it has, so the run
        # that follows counts none of it (its first prefills would otherwise run in the old mode)
        for _ in range(20):
            if engine.get_speculation_state().enabled is (variant == "on"):
                return
            closed_loop(engine, [([11, 12, 13], 2)], 1)
        raise RuntimeError(f"the engine did not turn {variant}")

    try:
        for k, variant in ((k, v) for k in range(repeat) for v in variants):
            hold(variant)
            for c, requests in levels.items():
                before = engine.get_speculation_state()
                r = _level(engine, requests, c, settle_s)
                state = engine.get_speculation_state()
                # its own count: tokens decode steps committed (the warm-up's included, first tokens made
                # by prefill not; ON may count a verify's tokens past max_new_tokens that are then cut)
                r["engine_tokens"] = state.generated_tokens - before.generated_tokens
                steps = state.decode_steps - before.decode_steps
                if steps:  # steady decode steps (those right after a prefill left out): batch and step time
                    r["decode_batch"] = round((state.decode_requests - before.decode_requests) / steps, 1)
                    r["decode_step_ms"] = round(
                        1e3 * (state.decode_seconds - before.decode_seconds) / steps, 3
                    )
                r["off_prefills"] = state.off_prefills - before.off_prefills
                r["strategy"] = state.strategy.value
                r["enabled"] = state.enabled
                runs[variant][c].append(r)
                log(
                    f"specflip {variant} c={c}{_nth(k, repeat)}: {_steady(r)} tok/s steady, "
                    f"{r['tok_s']:,.0f} over the run "
                    f"({r['tokens']} tokens, {r['seconds']} s; "
                    f"steady step {r.get('decode_step_ms', 0)} ms at batch {r.get('decode_batch', 0)}, "
                    f"{r['off_prefills']} OFF prefills)"
                )
        out = {v: {c: _repeated(rs) for c, rs in by_c.items()} for v, by_c in runs.items()}
        steps, folder = profile
        for variant in variants if steps else ():
            hold(variant)
            for c, requests in levels.items():
                out[variant][c]["profile"] = _profiled(engine, requests, c, steps, folder, f"{variant}-c{c}")
        return out
    finally:
        engine.shutdown()


def _nth(k: int, repeat: int) -> str:
    return f" repeat {k + 1}/{repeat}" if repeat > 1 else ""


def _steady(r: dict[str, Any]) -> str:
    return "-" if r.get("steady_tok_s") is None else f"{r['steady_tok_s']:,.0f}"


def _spread(r: dict[str, Any], key: str) -> str:
    """[min-max] of a value over a level's repeats (nothing for one run)."""
    values = [x[key] for x in r.get("repeats", []) if x.get(key) is not None]
    return f" [{min(values):,.0f}-{max(values):,.0f}]" if len(values) > 1 else ""


def _report(results: dict[str, Any]) -> str:
    plain = results["runs"].get("plain", {})
    variants = [v for v in VARIANTS if v in results["runs"]]
    header = "| c | " + " | ".join(variants) + " |"
    lines = [
        "# The engine alone under arrivals: SGLang's plain and EAGLE-3 engines vs specflip OFF and ON",
        "",
        f"{results['started']}. Config `{results['config']}`; {results['requests_per_user']} requests per "
        f"user, prompts of {results['input_len']} token ids, output lengths {results['output_len']} x "
        f"[{1 - results['spread']:g}, {1 + results['spread']:g}] (ignore_eos), greedy, streamed. Output tok/s "
        f"in the steady window (tokens that arrived from {results.get('settle', 0):g} s after a level's start "
        "until its last request was sent, every user in flight), and over the level's whole run (ramp-up "
        f"and tail included); {results.get('repeat', 1)} run(s) per level and engine, the median run by "
        "steady tok/s, [min-max] over the runs; x = the medians over the plain engine's at the same level "
        "(ON's also over SGLang's EAGLE-3 engine's, `eagle`); "
        "identical = requests whose "
        "output equals the plain engine's, token for token; step = the engine's mean steady decode step "
        "(steps right after a prefill left out) and its mean batch; TTFT p50 of the requests sent in the "
        "steady window, and in brackets the p50 of each of its parts (ms; separate p50s, so they need not add "
        "up to the TTFT p50): to the forward batch, SGLang's "
        "prefill_forward stage (forward entry until the scheduler processed the prefill's result), out "
        "(from there to the first streamed chunk here).",
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
            cell = f"{_steady(r)}{_spread(r, 'steady_tok_s')} ({r['tok_s']:,.0f}{_spread(r, 'tok_s')} run)"
            if base and v != "plain":
                if r.get("steady_tok_s") and base.get("steady_tok_s"):
                    cell += f", {r['steady_tok_s'] / base['steady_tok_s']:.3f}x steady"
                compared = r.get("compared", r["requests"])  # every run's requests (older results: one run's)
                cell += f", {r['tok_s'] / base['tok_s']:.3f}x run, identical {r['identical']}/{compared}"
            ref = results["runs"].get("eagle", {}).get(str(c))
            if v == "on" and ref and r.get("steady_tok_s") and ref.get("steady_tok_s"):
                cell += f", {r['steady_tok_s'] / ref['steady_tok_s']:.3f}x eagle steady"
            if r.get("decode_step_ms") is not None:
                cell += f"; step {r['decode_step_ms']:.2f} ms at batch {r['decode_batch']:.0f}"
            if r.get("ttft_p50_ms") is not None:
                cell += f"; TTFT p50 {r['ttft_p50_ms']:.0f} ms"
            if r.get("ttft_parts_p50_ms"):
                cell += " (" + " + ".join(f"{k} {v:.1f}" for k, v in r["ttft_parts_p50_ms"].items()) + ")"
            cells.append(cell)
        lines.append(f"| {c} | " + " | ".join(cells) + " |")
    profiled = [
        (v, c, r["profile"]) for v in variants for c, r in results["runs"][v].items() if r.get("profile")
    ]
    if profiled:
        lines += [
            "",
            f"Profiles (one more run each, not measured: SGLang's profiler over its first "
            f"{results['profile_steps']} forward steps; traces in profiles/):",
            "",
        ]
        lines += [f"- {v} c={c}: {line(summary)}" for v, c, summary in profiled]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = bench_parser("loadtests.bench.engine_arrivals", __doc__, "64,128,256", "out/engine_arrivals")
    p.add_argument("--variants", default=",".join(VARIANTS), help=f"comma list of {', '.join(VARIANTS)}")
    p.add_argument("--requests-per-user", type=int, default=4)
    p.add_argument("--repeat", type=int, default=1, help="runs of every level per engine (median reported)")
    p.add_argument(
        "--profile-steps",
        type=int,
        default=0,
        help="one more run per level and engine with SGLang's profiler over its first N steps (0: none)",
    )
    p.add_argument(
        "--settle", type=float, default=2.0, help="seconds after a level starts before its steady window"
    )
    p.add_argument(
        "--dry-run", action="store_true", help="check the arguments, print the runs, start nothing"
    )
    a = p.parse_args(argv)
    variants = [v for v in a.variants.split(",") if v]
    if a.repeat < 1 or a.profile_steps < 0:
        print("engine_arrivals: --repeat takes a whole number >= 1, --profile-steps >= 0", file=sys.stderr)
        return 2
    if set(variants) - set(VARIANTS) or not variants:
        print(f"engine_arrivals: --variants takes {', '.join(VARIANTS)}", file=sys.stderr)
        return 2
    concurrency = sorted({int(x) for x in a.concurrency.split(",") if x.strip()})

    from deployments.config import load_config

    config = load_config(str(a.config))
    if a.dry_run:
        engines = [k for k in SGLANG_ENGINES if k in variants]
        spec = [v for v in VARIANTS if v in variants and v not in SGLANG_ENGINES]
        print(f"engines: {', '.join(engines + (['specflip (' + ', '.join(spec) + ')'] if spec else []))}")
        print(
            f"levels {','.join(map(str, concurrency))}: {a.requests_per_user} requests per user, {a.input_len} "
            f"tokens in, {a.output_len} out (spread {a.output_spread}), {a.repeat} run(s) each"
            + (f", one more profiled over {a.profile_steps} steps" if a.profile_steps else "")
        )
        return 0
    vocab = prepare_process(config)
    levels = {
        c: make_requests(c, a.requests_per_user, a.input_len, a.output_len, a.output_spread, vocab)
        for c in concurrency
    }
    results: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%d %H:%M:%S"), "config": str(a.config), "concurrency": concurrency,
        "requests_per_user": a.requests_per_user, "input_len": a.input_len, "output_len": a.output_len,
        "spread": a.output_spread, "settle": a.settle, "repeat": a.repeat, "profile_steps": a.profile_steps, "runs": {},
    }  # fmt: skip
    runs: dict[str, dict[int, dict[str, Any]]] = {}
    profile = (a.profile_steps, str((Path(a.out) / "profiles").resolve()))
    for kind in (k for k in SGLANG_ENGINES if k in variants):
        log(f"{kind} engine: starting")
        runs[kind] = _in_own_process(kind, str(a.config), levels, a.settle, a.repeat, profile)
    spec = [v for v in VARIANTS if v in variants and v not in SGLANG_ENGINES]
    if spec:
        log(f"specflip engine: starting ({', '.join(spec)})")
        runs.update(_in_own_process("specflip", str(a.config), levels, spec, a.settle, a.repeat, profile))
    plain_outputs = {c: r["outputs"][0] for c, r in runs.get("plain", {}).items()}  # its first run's
    for variant, by_c in runs.items():
        for c, r in by_c.items():
            outputs, base = r.pop("outputs"), plain_outputs.get(c)  # every repeat's
            r["requests"], r["compared"] = len(outputs[0]), sum(len(o) for o in outputs)  # a run's; all runs'
            if base is None:
                r["identical"] = None
            else:  # every run's outputs against the plain engine's first run
                r["identical"] = sum(o == b for run in outputs for o, b in zip(run, base, strict=True))
        results["runs"][variant] = {str(c): r for c, r in by_c.items()}
    log(f"done: {write_outputs(a.out, results, _report(results))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
