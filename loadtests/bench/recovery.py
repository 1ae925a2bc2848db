"""Acceptance recovery after a re-enable (real engine, CPU, trained tiny pair).

    python -m loadtests.bench.recovery [--pair models/tiny] [--doc docs/benchmarks.md]

One batch of held-out prompts runs with speculation ON for `--on-before` decode steps,
OFF for `--off` steps, then ON again (scripted flips, reproducible). The figure is the
mean accept length over the `--window` verify steps after the re-enable, divided by the
never-disabled run's mean over its verify steps from the same token position on. Done
for each strategy; `cold` (no draft upkeep, no resync) is the counter-example.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

__all__ = ["main", "recovery"]


def _after_reenable(trace, window: int) -> tuple[float, float]:
    """(tokens generated per request before the re-enable, mean accept of the next `window` ON steps)."""
    last_off = max(i for i, t in enumerate(trace) if t[1] in ("off", "resync"))
    position = sum(t[3] for t in trace[: last_off + 1])
    ons = [t[3] for t in trace[last_off + 1 :] if t[1] == "on"][:window]
    return position, sum(ons) / len(ons)


def _from_position(trace, position: float, window: int) -> float:
    done, out = 0.0, []
    for _, kind, _, accept in trace:
        if done >= position and kind == "on":
            out.append(accept)
        done += accept
    out = out[:window]
    return sum(out) / len(out)


def recovery(engine, prompts, *, on_before: int, off: int, window: int, new_tokens: int) -> dict:
    from patched_worker.state import Strategy

    params = {"max_new_tokens": new_tokens, "temperature": 0, "ignore_eos": True}

    def run(strategy: Strategy | None):
        engine.set_strategy(strategy or Strategy.WARM_KV)
        engine.set_speculation(True)
        engine.generate(input_ids=[[1, 2, 3]], sampling_params={**params, "max_new_tokens": 2})
        if strategy is not None:
            engine.schedule_flips([on_before + 1, on_before + 1 + off])
        st = engine.get_speculation_state()
        start = st.on_steps + st.off_steps  # decode steps so far: trace entries carry their step number
        outs = engine.generate(input_ids=prompts, sampling_params=params)
        trace = [t for t in engine.get_speculation_state().trace if t[0] > start]
        return [o["output_ids"] for o in outs], trace

    base_ids, base = run(None)
    result = {"never_disabled_mean": round(sum(t[3] for t in base) / len(base), 3)}
    for strategy in (Strategy.WARM_KV, Strategy.FULL_EXTEND, Strategy.COLD):
        ids, trace = run(strategy)
        position, after = _after_reenable(trace, window)
        reference = _from_position(base, position, window)
        _, first = _after_reenable(trace, 4)
        first_ref = _from_position(base, position, 4)
        result[strategy.value] = {
            "accept_after": round(after, 3),
            "accept_never_disabled": round(reference, 3),
            "ratio": round(after / reference, 3),
            "first4_ratio": round(first / first_ref, 3),
            "same_tokens": ids == base_ids,
        }
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m loadtests.bench.recovery", description=__doc__.splitlines()[0]
    )
    p.add_argument("--pair", default="models/tiny")
    p.add_argument("--prompts", type=int, default=16)
    p.add_argument("--on-before", type=int, default=8)
    p.add_argument("--off", type=int, default=24)
    p.add_argument("--window", type=int, default=32)
    p.add_argument("--new-tokens", type=int, default=220)
    p.add_argument("--doc", default="docs/benchmarks.md")
    a = p.parse_args(argv)

    from transformers import AutoTokenizer

    from patched_worker.cpu import shim

    shim.enable()
    from loadtests.markdown import table, write_section
    from loadtests.models.build import build_pair
    from loadtests.models.corpus import held_out_prompts
    from patched_worker.engine import SpecFlipEngine, cpu_engine_kwargs
    from patched_worker.state import SwitchConfig

    pair = build_pair(a.pair)
    prompts = held_out_prompts(AutoTokenizer.from_pretrained(pair.target), a.prompts, 32, seed=99)
    t0 = time.time()
    engine = SpecFlipEngine(
        SwitchConfig(allow_cold=True),  # cold is measured here as the counter-example
        **cpu_engine_kwargs(pair.target, pair.draft, steps=3, topk=1, draft_tokens=4),
    )
    try:
        r = recovery(
            engine, prompts, on_before=a.on_before, off=a.off, window=a.window, new_tokens=a.new_tokens
        )
    finally:
        engine.shutdown()
    print(json.dumps(r, indent=1))
    cmd = "python -m loadtests.bench.recovery " + " ".join(argv if argv is not None else sys.argv[1:])
    rows = [
        [
            s,
            f"{r[s]['accept_after']:.2f}",
            f"{r[s]['accept_never_disabled']:.2f}",
            f"**{r[s]['ratio']:.2f}x**",
            f"{r[s]['first4_ratio']:.2f}x",
            "yes" if r[s]["same_tokens"] else "NO",
        ]
        for s in ("warm_kv", "full_extend", "cold")
    ]
    header = [
        "strategy while OFF",
        "accept after re-enable",
        "never disabled",
        "ratio",
        "ratio, first 4 steps",
        "tokens == never-disabled run",
    ]
    write_section(
        Path(a.doc),
        f"""## Acceptance recovery after re-enable (CPU, tiny trained pair)

`{cmd.strip()}` — {a.prompts} held-out prompts batched, steps 3 / topk 1 / 4 draft tokens, greedy;
ON for {a.on_before} decode steps, OFF for {a.off}, then ON: mean accept length over the {a.window} verify
steps after the re-enable vs the never-disabled run from the same token position
(never-disabled mean over the whole run: {r["never_disabled_mean"]:.2f}). Goal: warm_kv >= 0.95x.
Measured {time.strftime("%Y-%m-%d")}, {time.time() - t0:.0f} s.

{table(header, rows)}""",
    )
    return 0 if r["warm_kv"]["ratio"] >= 0.95 else 1


if __name__ == "__main__":
    sys.exit(main())
