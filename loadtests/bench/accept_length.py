"""`specflip models eval`: mean accept length of a pair through the real engine, on held-out prompts.

    python -m loadtests.bench.accept_length --pair models/tiny [--doc docs/benchmarks.md]

A tiny target falls into short repetitions, which inflate acceptance (a loop is easy to
draft). Each output is classed loop-free when at least half of its 4-grams are distinct;
the report gives the loop-free share and the accept length on loop-free outputs alone.
Accept length here = tokens committed per verify step = (completion_tokens - 1) / verify
steps (the first token comes from prefill, not from a verify).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, dataclass

__all__ = ["EvalResult", "distinct_4gram_ratio", "evaluate_pair", "main"]


@dataclass(frozen=True)
class EvalResult:
    prompts: int
    new_tokens: int
    steps: int
    topk: int
    draft_tokens: int
    accept_length_all: float
    loop_free_share: float
    accept_length_loop_free: float | None
    seconds: float


def distinct_4gram_ratio(ids: list[int]) -> float:
    grams = [tuple(ids[i : i + 4]) for i in range(len(ids) - 3)]
    return len(set(grams)) / len(grams) if grams else 1.0


def evaluate_pair(
    pair_dir: str,
    *,
    prompts: int = 32,
    prompt_len: int = 32,
    new_tokens: int = 64,
    steps: int = 3,
    topk: int = 1,
    draft_tokens: int = 4,
    seed: int = 1234,
) -> EvalResult:
    from transformers import AutoTokenizer

    from loadtests.models.build import pair_paths
    from loadtests.models.corpus import held_out_prompts
    from patched_worker.cpu import shim

    shim.enable()
    from patched_worker.engine import SpecFlipEngine, cpu_engine_kwargs

    paths = pair_paths(pair_dir)
    tok = AutoTokenizer.from_pretrained(paths.target)
    inputs = held_out_prompts(tok, prompts, prompt_len, seed)
    t0 = time.time()
    engine = SpecFlipEngine(
        **cpu_engine_kwargs(paths.target, paths.draft, steps=steps, topk=topk, draft_tokens=draft_tokens)
    )
    try:
        outs = engine.generate(
            input_ids=inputs,
            sampling_params={"max_new_tokens": new_tokens, "temperature": 0, "ignore_eos": True},
        )
    finally:
        engine.shutdown()
    per_req = []
    for o in outs:
        mi = o["meta_info"]
        accept = (mi["completion_tokens"] - 1) / max(1, mi["spec_verify_ct"])
        per_req.append((accept, distinct_4gram_ratio(o["output_ids"]) >= 0.5))
    free = [a for a, ok in per_req if ok]
    return EvalResult(
        prompts=prompts,
        new_tokens=new_tokens,
        steps=steps,
        topk=topk,
        draft_tokens=draft_tokens,
        accept_length_all=round(sum(a for a, _ in per_req) / len(per_req), 3),
        loop_free_share=round(len(free) / len(per_req), 3),
        accept_length_loop_free=round(sum(free) / len(free), 3) if free else None,
        seconds=round(time.time() - t0, 1),
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="specflip models eval", description=__doc__.splitlines()[0])
    p.add_argument("--pair", default="models/tiny", help="directory written by `specflip models build`")
    p.add_argument("--prompts", type=int, default=32)
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--json", help="also write the result here")
    p.add_argument(
        "--doc", help="also write the result as a section of this markdown file (docs/benchmarks.md)"
    )
    a = p.parse_args(argv)
    if not os.path.exists(os.path.join(a.pair, "manifest.json")):
        print(
            f"specflip models eval: no model pair in {a.pair}; run `specflip models build --out {a.pair}`",
            file=sys.stderr,
        )
        return 2
    r = evaluate_pair(a.pair, prompts=a.prompts, new_tokens=a.new_tokens)
    print(json.dumps(asdict(r), indent=1))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(asdict(r), f, indent=1)
    if a.doc:
        _write_doc(a.doc, a.pair, r)
    return 0


def _write_doc(doc: str, pair: str, r: EvalResult) -> None:
    from loadtests.markdown import table, write_section

    with open(os.path.join(pair, "manifest.json")) as f:
        m = json.load(f)
    spec = m["spec"]
    rows = [
        ["all", "1.00", f"{r.accept_length_all:.2f}"],
        ["loop-free", f"{r.loop_free_share:.2f}", f"**{r.accept_length_loop_free or 0:.2f}**"],
    ]
    write_section(
        doc,
        f"""## Tiny model pair: build and accept length (CPU)

Built by `specflip models build --out {pair} --seed {spec["seed"]}` in {m["build_seconds"]:.0f} s on this
machine's 2 CPU cores (target: Llama {spec["layers"]} layers, hidden {spec["hidden"]}, vocab {spec["vocab"]}, trained
{spec["target_steps"]} steps on the Python standard library with token-level unlikelihood {spec["unlikelihood"]};
loss {m["target_loss"]}. EAGLE-3 draft trained on the target's own aux hidden states and greedy outputs,
per-step accuracy {", ".join(str(a) for a in m["draft_accuracy_per_step"])}).
Measured by `specflip models eval --pair {pair}` through the real engine on CPU: {r.prompts} held-out
prompts (files never trained on) x {r.new_tokens} greedy tokens, steps {r.steps} / topk {r.topk} /
{r.draft_tokens} draft tokens. Accept length = tokens committed per verify step. Loop-free = at least
half of an output's 4-grams distinct (a looping output inflates acceptance). Goal: >= 2.0 on loop-free
outputs (a random draft gives ~1.0).

{table(["outputs", "share", "accept length"], rows)}""",
    )


if __name__ == "__main__":
    sys.exit(main())
