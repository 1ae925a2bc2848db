"""The production configuration on a CUDA GPU: toggled greedy output == plain, up to near-ties.

flashinfer attention, the overlap scheduler, CUDA graphs (OFF steps replay plain decode graphs),
the radix cache ON with prefixes shared across requests and across runs, topk 1 (3 steps,
4 draft tokens) and topk 4 (2 steps, 16 draft tokens: the seed's tree shape), requests arriving
staggered (some join while OFF), 12 random toggle schedules per topk (24 in all), greedy, bf16,
the tiny trained pair. Plus structured output (json_schema / regex / ebnf batch of
test_structured.py) toggled, and sampled verify in the seed's shape: at T=1 the first tokens keep
one distribution ON, OFF and in the plain engine (the statistic and bound of test_sampling.py).

Every output must have its full length and every divergence from the plain engine must be a
near-tie (gpu_checks.py); each tie is listed with its log-prob gap in report-*.json / .md under
$SPECFLIP_GPU_REPORT_DIR (default out/gpu_production). On a GPU host:

    SPECFLIP_GPU_REPORT_DIR=out/gpu_production pytest -m gpu tests/patched_worker/test_gpu_production.py -s

SPECFLIP_GPU_ATTENTION overrides the attention backend (default flashinfer).
"""

from __future__ import annotations

import os
import random
import time

import pytest

from tests.patched_worker.gpu_checks import NEAR_TIE, compare, report_dir, write_report
from tests.patched_worker.helpers import mixed_prompts, random_schedule, submit_staggered

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (run on the GPU host)"),
]

NEW = 64
CONFIGS = {1: (3, 4), 4: (2, 16)}  # topk -> (steps, draft tokens); topk 4 is the seed's tree shape
SCHEDULES = {"warm_kv": 8, "full_extend": 4}  # per topk: 12 schedules, 24 in all
TOP = 5


def production_kwargs(pair, topk: int | None) -> dict:
    """Radix cache, overlap scheduler and CUDA graphs stay at SGLang's defaults: on."""
    kw = dict(
        model_path=pair.target,
        dtype="bfloat16",
        attention_backend=os.environ.get("SPECFLIP_GPU_ATTENTION", "flashinfer"),
        max_running_requests=64,
        cuda_graph_max_bs_decode=64,
        mem_fraction_static=0.25,
        log_level="error",
        constrained_json_disable_any_whitespace=True,
    )
    if topk is not None:
        steps, draft_tokens = CONFIGS[topk]
        kw.update(
            speculative_algorithm="EAGLE3",
            speculative_draft_model_path=pair.draft,
            speculative_num_steps=steps,
            speculative_eagle_topk=topk,
            speculative_num_draft_tokens=draft_tokens,
        )
    return kw


def shared_prefix_prompts(pair) -> list[list[int]]:
    """16 prompts over 3 shared prefixes (~200 tokens each) with distinct tails of 3-101 tokens."""
    from transformers import AutoTokenizer

    from loadtests.models.corpus import held_out_prompts

    tok = AutoTokenizer.from_pretrained(pair.target)
    prefixes = [held_out_prompts(tok, 1, 200, seed=500 + i)[0] for i in range(3)]
    tails = mixed_prompts(pair) + mixed_prompts(pair, [5, 9, 14, 25, 40, 60, 80, 30])
    return [prefixes[i % 3] + tail for i, tail in enumerate(tails)]


def _plain_reference(pair):
    import sglang

    from tests.patched_worker.test_structured import BATCH

    prompts = shared_prefix_prompts(pair)
    engine = sglang.Engine(**production_kwargs(pair, None))
    try:
        outs = engine.generate(
            input_ids=prompts,
            sampling_params={"max_new_tokens": NEW, "temperature": 0, "ignore_eos": True},
            return_logprob=True,
            top_logprobs_num=TOP,
        )
        structured = submit_staggered(
            engine,
            [{**kw, "return_logprob": True, "top_logprobs_num": TOP} for _, kw in BATCH],
            [0.0] * len(BATCH),
        )
    finally:
        engine.shutdown()
    return {
        "prompts": prompts,
        "ids": [o["output_ids"] for o in outs],
        "top": [o["meta_info"]["output_top_logprobs"] for o in outs],
        "structured_ids": [o["output_ids"] for o in structured],
        "structured_top": [o["meta_info"]["output_top_logprobs"] for o in structured],
    }


@pytest.fixture(scope="module")
def plain(model_pair):
    return _plain_reference(model_pair)


def joined_while_off(trace, after_step: int) -> int:
    """Decode steps run OFF whose batch grew since the previous OFF step: requests that joined while OFF."""
    steps = [t for t in trace if t[0] > after_step]
    return sum(
        1
        for prev, cur in zip(steps, steps[1:], strict=False)
        if prev[1] == "off" and cur[1] in ("off", "resync") and cur[2] > prev[2]
    )


def _markdown(topk: int, runs: list[dict], structured: list[dict], state) -> str:
    ties = [(r["label"], d) for r in runs + structured for d in r["divergences"]]
    lines = [
        f"### topk {topk} ({CONFIGS[topk][0]} steps, {CONFIGS[topk][1]} draft tokens)",
        "",
        f"{len(runs)} greedy schedules + {len(structured)} structured-output schedules; "
        f"{sum(len(r['lengths']) for r in runs + structured)} requests compared whole with the plain engine; "
        f"toggles {state.toggles}, resyncs {state.resyncs} (mean "
        f"{state.resync_ms_total / max(1, state.resyncs_timed):.2f} ms), OFF CUDA graphs "
        f"{state.off_cuda_graphs} ({state.off_cuda_graphs_bytes} bytes), joined while OFF "
        f"{sum(r['joined_while_off'] for r in runs)} times, radix-cache tokens hit "
        f"{sum(r['cached_tokens'] for r in runs)}.",
        "",
        f"Structured outputs violating their constraint: {sum(len(r['invalid']) for r in structured)}. "
        f"Divergences: {len(ties)}, non-near-ties (gap > {NEAR_TIE} nats, or a wrong length): "
        f"{sum(not d.near_tie for _, d in ties)}.",
        "",
    ]
    if ties:
        lines += ["| run | request | position | log-prob gap (nats) | near-tie |", "|---|---|---|---|---|"]
        lines += [
            f"| {label} | {d.request} | {d.position} | {d.gap:.4f} | {'yes' if d.near_tie else 'NO'} |"
            for label, d in ties
        ]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("topk", [1, 4])
def test_production_configuration_toggled_matches_plain_up_to_near_ties(model_pair, plain, topk):
    from patched_worker.engine import SpecFlipEngine
    from tests.patched_worker.test_structured import BATCH, CONSTRAINTS

    engine = SpecFlipEngine(**production_kwargs(model_pair, topk))
    runs, structured = [], []
    try:
        sa = engine.server_args
        assert not (sa.disable_overlap_schedule or sa.disable_radix_cache or sa.disable_cuda_graph), sa
        state = engine.get_speculation_state()
        assert state.off_cuda_graphs, (
            f"OFF steps must replay plain decode graphs: {state.off_cuda_graphs_note}"
        )
        for strategy, count in SCHEDULES.items():
            engine.set_strategy(strategy)
            for seed in range(count):
                rng = random.Random(f"production-{topk}-{strategy}-{seed}")
                engine.set_speculation(rng.random() < 0.5)  # half the runs start OFF
                max_new = [rng.randint(16, NEW) for _ in plain["prompts"]]
                delays = [rng.choice([0.0, 0.0, 0.05, 0.2, 0.5, 1.0]) for _ in plain["prompts"]]
                start = engine.get_speculation_state()
                engine.schedule_flips(random_schedule(rng, horizon=60))
                outs = submit_staggered(
                    engine,
                    [
                        {
                            "input_ids": p,
                            "sampling_params": {"max_new_tokens": n, "temperature": 0, "ignore_eos": True},
                        }
                        for p, n in zip(plain["prompts"], max_new, strict=True)
                    ],
                    delays,
                )
                got = [o["output_ids"] for o in outs]
                want = [w[:n] for w, n in zip(plain["ids"], max_new, strict=True)]
                after = engine.get_speculation_state()
                runs.append(
                    {
                        "label": f"{strategy} seed {seed}",
                        "lengths": max_new,
                        "divergences": compare(got, want, plain["top"]),
                        "joined_while_off": joined_while_off(after.trace, start.on_steps + start.off_steps),
                        "cached_tokens": sum(o["meta_info"].get("cached_tokens", 0) for o in outs),
                    }
                )
        engine.set_strategy("warm_kv")
        for seed in range(3):
            rng = random.Random(f"production-structured-{topk}-{seed}")
            engine.schedule_flips(random_schedule(rng, horizon=40))
            outs = submit_staggered(
                engine, [kw for _, kw in BATCH], [rng.choice([0.0, 0.1, 0.3]) for _ in BATCH]
            )
            invalid = [
                (kind, out["text"])
                for (kind, _), out in zip(BATCH, outs, strict=True)
                if kind is not None and not CONSTRAINTS[kind][1](out["text"])
            ]
            structured.append(
                {
                    "label": f"structured seed {seed}",
                    "lengths": [len(o["output_ids"]) for o in outs],
                    "invalid": invalid,
                    "divergences": compare(
                        [o["output_ids"] for o in outs], plain["structured_ids"], plain["structured_top"]
                    ),
                }
            )
        state = engine.get_speculation_state()
    finally:
        engine.shutdown()
    out_dir = report_dir("out/gpu_production")
    payload = {
        "topk": topk,
        "steps_draft_tokens": CONFIGS[topk],
        "near_tie_nats": NEAR_TIE,
        "measured": time.strftime("%Y-%m-%d %H:%M:%S"),
        "device": torch.cuda.get_device_name(),
        "runs": runs,
        "structured": structured,
        "state": {
            k: getattr(state, k)
            for k in (
                "toggles",
                "resyncs",
                "resyncs_timed",
                "resync_ms_total",
                "off_cuda_graphs",
                "off_cuda_graphs_bytes",
                "on_steps",
                "off_steps",
            )
        },
    }
    write_report(out_dir, f"report-topk{topk}", payload, _markdown(topk, runs, structured, state))
    bad = [(r["label"], d) for r in runs + structured for d in r["divergences"] if not d.near_tie]
    assert not bad, f"divergences that are not near-ties (or wrong lengths): {bad}"
    assert not [r["invalid"] for r in structured if r["invalid"]], "structured output broke the constraint"
    assert len(runs) >= 12 and state.toggles >= 24 and state.resyncs >= 6
    assert sum(r["joined_while_off"] for r in runs) > 0, "no request joined while OFF"
    assert sum(r["cached_tokens"] for r in runs) > 0, "the shared prefixes never hit the radix cache"


def test_sampled_first_tokens_keep_one_distribution_in_the_seed_shape(model_pair):
    """T=1, top_k 3: the first tokens of N requests of one prompt, drawn ON and OFF from one engine in
    the seed's tree shape (production configuration) and from the plain engine, are pairwise within
    test_sampling.py's total-variation bound (false-fails with probability <= DELTA), every output
    its full length, and ON accepts drafts (the sampled accept path runs)."""
    import sglang

    from patched_worker.engine import SpecFlipEngine
    from tests.patched_worker import test_sampling as ts

    engine = SpecFlipEngine(**production_kwargs(model_pair, 4))
    try:
        ts._in_mode(engine, True)
        prompt = ts._probe_prompt(engine)
        samples = {"on": ts._draw(engine, True, prompt), "off": ts._draw(engine, False, prompt)}
    finally:
        engine.shutdown()
    plain_engine = sglang.Engine(**production_kwargs(model_pair, None))
    try:
        samples["plain"] = ts._draw(plain_engine, None, prompt)
    finally:
        plain_engine.shutdown()
    pairs = [("plain", "off"), ("plain", "on"), ("off", "on")]
    rows = []
    for a, b in pairs:
        bound = ts.tv_bound(len(samples[a]), len(samples[b]), ts.TOP_K**ts.TOKENS, ts.DELTA / len(pairs))
        rows.append({"a": a, "b": b, "tv": ts.tv_distance(samples[a], samples[b]), "bound": bound})
    payload = {
        "steps_draft_tokens": CONFIGS[4],
        "prompt": prompt,
        "samples": {k: len(v) for k, v in samples.items()},
        "distinct": {k: len(set(v)) for k, v in samples.items()},
        "device": torch.cuda.get_device_name(),
        "measured": time.strftime("%Y-%m-%d %H:%M:%S"),
        "comparisons": rows,
    }
    table = ["| pair | TV | bound |", "|---|---:|---:|"]
    table += [f"| {r['a']} vs {r['b']} | {r['tv']:.3f} | {r['bound']:.3f} |" for r in rows]
    head = f"### Sampled verify, topk 4 ({CONFIGS[4][0]} steps, {CONFIGS[4][1]} draft tokens), T=1, top_k {ts.TOP_K}"
    write_report(
        report_dir("out/gpu_production"), "report-sampled", payload, "\n".join([head, "", *table]) + "\n"
    )
    far = [r for r in rows if r["tv"] > r["bound"]]
    assert not far, f"the mode changes what is sampled: {far}"
