"""Fit the goodput rule's step-time priors on this host instead of typing them in.

    python -m loadtests.bench.step_costs --config deployments/examples/h200-dummy8b-serving.yaml \\
        --batches 1,8,32,64,128,256 --out out/step_costs --write-config my-fitted.yaml

The goodput rule predicts each mode's tok/s from a step-time line per mode, `base + per_req * batch`
seconds (`policy` settings `on_step_base_s`, `on_step_per_req_s`, `off_step_base_s`,
`off_step_per_req_s`), fitted online from each replica's reports on top of these priors. This runs
the specflip engine of a config in process (`replicas.env` set first, e.g. the simulated acceptance)
with `b` closed-loop users at each batch size, ON and then OFF (the config's draft strategy), and
reads the engine's own steady-decode counters (`decode_seconds`, `decode_steps`, `decode_requests`:
steps right after a prefill left out, as the replica reports them to the policy): step time and mean
batch per level. A least-squares line per mode gives the priors; `--write-config` writes a copy of
the config with them (YAML comments are not kept). The report also puts the crossover the fitted
lines predict (`policy.costmodel.crossover_batch`, at the measured accept length) beside the one
measured at the same time: the mean batch at which OFF's output tok/s reaches ON's.

The lines are fitted where the rule decides: the levels up to twice the measured crossover (at
least three), at the median accept length of those levels. A step time is not linear in the batch
over 1-256 (the H200's tree-shape ON step: 8.5 ms at batch 1, 20.5 at 26, 48.5 at 50, 49.7 at 100),
and a line through every level misplaces the crossover (the H200's tree shape, 2026-12-04: 4 from every level, 10 from the decision region,
10 measured); the report shows both. `--refit RESULTS_JSON` fits again from an earlier run's
measurements without starting an engine.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from loadtests.bench.inprocess import closed_loop, in_process_kwargs, make_requests, prepare_process

__all__ = ["decision_levels", "fit_line", "fit_priors", "main", "measured_crossover"]

KEYS = ("on_step_base_s", "on_step_per_req_s", "off_step_base_s", "off_step_per_req_s")


def log(msg: str) -> None:
    print(f"[step-costs {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def fit_line(points: list[tuple[float, float]]) -> tuple[float, float]:
    """(base, per_req) of the least-squares line through (batch, step seconds); per_req >= 0 (a step
    never gets cheaper with more requests) and base > 0 (the policy's settings require it)."""
    if not points:
        raise ValueError("no points to fit")
    n = len(points)
    mx, my = sum(x for x, _ in points) / n, sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    slope = max(0.0, sum((x - mx) * (y - my) for x, y in points) / sxx) if sxx > 0 else 0.0
    return max(my - slope * mx, 1e-6), slope


def measured_crossover(levels: list[dict[str, Any]]) -> float | None:
    """The batch where OFF's tok/s reaches ON's, interpolated between the measured levels (linear in
    the OFF/ON ratio); None when ON stays faster at every level, the first batch when OFF is never slower."""
    rows = sorted((r["batch"], r["off_tok_s"] / r["on_tok_s"]) for r in levels if r["on_tok_s"] > 0)
    for (b0, r0), (b1, r1) in zip(rows, rows[1:], strict=False):
        if r0 < 1 <= r1:
            return b0 + (1 - r0) * (b1 - b0) / (r1 - r0)
    if rows and rows[0][1] >= 1:
        return float(rows[0][0])
    return None


def decision_levels(batches: list[int], crossover: float | None) -> list[int]:
    """The levels the priors are fitted on: those up to twice the measured crossover, at least the
    three smallest; every level when there is no crossover (ON faster everywhere)."""
    if crossover is None:
        return list(batches)
    near = [b for b in batches if b <= 2 * crossover]
    return near if len(near) >= 3 else list(batches[:3])


def fit_priors(
    measured: dict[str, dict[int, dict]], levels: list[int]
) -> tuple[dict[str, float], float | None]:
    """The four priors from `levels`' step times, and the median accept length of those ON levels."""
    fitted: dict[str, float] = {}
    for mode in ("on", "off"):
        rows = [measured[mode][b] for b in levels if b in measured[mode]]
        pts = [(r["mean_batch"], r["step_s"]) for r in rows if r["steps"] > 0]
        fitted[f"{mode}_step_base_s"], fitted[f"{mode}_step_per_req_s"] = fit_line(pts)
    accepts = sorted(a for b in levels if (a := measured["on"].get(b, {}).get("accept_length")))
    return fitted, (accepts[len(accepts) // 2] if accepts else None)


def _level(engine: Any, batch: int, per_user: int, input_len: int, output_len: int, vocab: int) -> dict:
    requests = make_requests(batch, per_user, input_len, output_len, 0.25, vocab, seed=batch)
    closed_loop(engine, [(ids, 4) for ids, _ in requests[:batch]], batch)  # warm-up at this batch size
    s0 = engine.get_speculation_state()
    outputs, seconds = closed_loop(engine, requests, batch)
    s1 = engine.get_speculation_state()
    steps = s1.decode_steps - s0.decode_steps
    return {
        "tok_s": sum(len(o) for o in outputs) / seconds,
        "step_s": (s1.decode_seconds - s0.decode_seconds) / steps if steps else math.nan,
        "mean_batch": (s1.decode_requests - s0.decode_requests) / steps if steps else math.nan,
        "steps": steps,
        "accept_length": s1.accept_length_ema,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m loadtests.bench.step_costs", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--config", type=Path, required=True, help="specflip config (engine arguments, policy)")
    p.add_argument("--batches", default="1,8,32,64,128")
    p.add_argument("--requests-per-user", type=int, default=2)
    p.add_argument("--input-len", type=int, default=128)
    p.add_argument("--output-len", type=int, default=128)
    p.add_argument("--out", type=Path, default=Path("out/step_costs"))
    p.add_argument("--write-config", type=Path, help="write a copy of --config with the fitted priors here")
    p.add_argument(
        "--refit", type=Path, metavar="RESULTS_JSON", help="fit an earlier run's measurements again"
    )
    p.add_argument(
        "--dry-run", action="store_true", help="check the arguments, print the runs, start nothing"
    )
    a = p.parse_args(argv)
    if a.refit:
        from deployments.config import load_config

        return refit(a, load_config(str(a.config)))
    batches = sorted({int(x) for x in a.batches.split(",") if x.strip()})
    if len(batches) < 2 or batches[0] < 1:
        print("step_costs: --batches needs two or more sizes >= 1", file=sys.stderr)
        return 2

    from deployments.config import load_config

    config = load_config(str(a.config))
    if not config.model.draft_path:
        print(
            "step_costs: the config has no draft model (model.draft_path): nothing to fit ON", file=sys.stderr
        )
        return 2
    if a.dry_run:
        print(
            f"ON then OFF at batches {','.join(map(str, batches))}, {a.requests_per_user} requests per slot"
        )
        return 0
    vocab = prepare_process(config)
    from patched_worker.engine import SpecFlipEngine

    log(f"specflip engine: starting ({config.model.path})")
    engine = SpecFlipEngine(
        switch=config.speculation.switch_config(), **in_process_kwargs(config, speculative=True)
    )
    measured: dict[str, dict[int, dict]] = {"on": {}, "off": {}}
    try:
        for mode in ("on", "off"):
            engine.set_speculation(mode == "on")
            for b in batches:
                r = _level(engine, b, a.requests_per_user, a.input_len, a.output_len, vocab)
                measured[mode][b] = r
                log(
                    f"{mode} batch {b}: step {r['step_s'] * 1e3:.2f} ms at mean batch {r['mean_batch']:.1f} "
                    f"over {r['steps']} steps, {r['tok_s']:,.0f} tok/s"
                )
    finally:
        engine.shutdown()

    write(a, config, batches, measured)
    return 0


def refit(a: argparse.Namespace, config: Any) -> int:
    """`--refit`: the measurements of an earlier run's results.json, fitted again."""
    data = json.loads(a.refit.read_text())
    measured = {m: {int(b): r for b, r in rows.items()} for m, rows in data["measured"].items()}
    for key, value in data.get("workload", {}).items():  # the earlier run's, for the report
        setattr(a, key, value)
    write(a, config, sorted(measured["on"]), measured, started=data.get("started"))
    return 0


def write(
    a: argparse.Namespace, config: Any, batches: list[int], measured: dict, started: str | None = None
) -> None:
    import numpy as np

    from policy.costmodel import crossover_batch

    prior = config.policy.to_policy_config(batch_cap=config.engine.max_running_requests)
    levels = [  # at the engine's mean batch (the policy's unit), not the number of users
        {
            "batch": (measured["on"][b]["mean_batch"] + measured["off"][b]["mean_batch"]) / 2,
            "on_tok_s": measured["on"][b]["tok_s"],
            "off_tok_s": measured["off"][b]["tok_s"],
        }
        for b in batches
    ]
    found = measured_crossover(levels)
    fit_on = decision_levels(batches, found)
    fitted, accept = fit_priors(measured, fit_on)
    every, every_accept = fit_priors(measured, batches)

    def predict(priors: dict[str, float], acc: float | None) -> float:
        return float(
            crossover_batch(prior.replace(**priors), np.array([acc if acc is not None else math.nan]))[0]
        )

    predicted, predicted_every = predict(fitted, accept), predict(every, every_accept)
    results = {
        "started": started or time.strftime("%Y-%m-%d %H:%M:%S"), "config": str(a.config), "batches": batches,
        "measured": {m: {str(b): r for b, r in rows.items()} for m, rows in measured.items()},
        "fitted": fitted, "fitted_on": fit_on, "configured": {k: getattr(prior, k) for k in KEYS},
        "accept_length": accept, "crossover_predicted": predicted, "crossover_measured": found,
        "every_level": {"fitted": every, "accept_length": every_accept, "crossover_predicted": predicted_every},
        "workload": {k: getattr(a, k) for k in ("requests_per_user", "input_len", "output_len")},
    }  # fmt: skip
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "results.json").write_text(json.dumps(results, indent=1))
    rows = "\n".join(
        f"| {b} | {measured['on'][b]['step_s'] * 1e3:.2f} @ {measured['on'][b]['mean_batch']:.1f} | "
        f"{measured['off'][b]['step_s'] * 1e3:.2f} @ {measured['off'][b]['mean_batch']:.1f} | "
        f"{measured['on'][b]['tok_s']:,.0f} | {measured['off'][b]['tok_s']:,.0f} |"
        for b in batches
    )
    keys = "\n".join(f"| `{k}` | {getattr(prior, k):.4g} | {fitted[k]:.4g} | {every[k]:.4g} |" for k in KEYS)
    acc_text = f"{accept:.2f}" if accept is not None else "not reported"
    found_text = (
        f"{found:.0f}" if found is not None else f"none up to {batches[-1]} (ON faster at every level)"
    )
    (a.out / "report.md").write_text(
        f"# Step-time priors fitted on this host\n\n{results['started']}{' (refitted)' if started else ''}. Config `{a.config}`; "
        f"{a.requests_per_user} requests per user, {a.input_len}-token prompts, outputs "
        f"{a.output_len} x [0.75, 1.25] tokens.\n\n"
        "| users | ON step ms @ mean batch | OFF step ms @ mean batch | ON tok/s | OFF tok/s |\n"
        f"|---:|---|---|---:|---:|\n{rows}\n\n"
        f"| setting | configured | fitted (users {', '.join(map(str, fit_on))}) | fitted (every level) |\n"
        f"|---|---:|---:|---:|\n{keys}\n\n"
        f"Accept length (ON, median of the fitted levels): {acc_text}. Crossover batch predicted by the "
        f"fitted lines: {predicted:.0f} (every level: {predicted_every:.0f}); measured (OFF tok/s reaching "
        f"ON's): {found_text}.\n"
    )
    if a.write_config:
        raw = yaml.safe_load(a.config.read_text())
        raw.setdefault("policy", {}).update({k: float(f"{v:.6g}") for k, v in fitted.items()})
        for key in ("path", "draft_path", "tokenizer_path"):  # relative paths stay right from the new place
            if raw.get("model", {}).get(key):
                raw["model"][key] = str(getattr(config.model, key))
        a.write_config.write_text(yaml.safe_dump(raw, sort_keys=False))
        log(f"fitted priors written to {a.write_config}")
    log(f"done: {a.out / 'report.md'}")


if __name__ == "__main__":
    sys.exit(main())
