"""Load that moves: the same phases of work for the app held ON, held OFF and left to its policy
(`dynamic`), with SGLang's own benchmark client (imported once, as in `loadtests.bench.client_sweep`).

    python -m loadtests.bench.client_transition --config deployments/examples/h200-dummy8b-tree.yaml \\
        --workload closed --phases low:2x64,high:256x1536,low:2x64,high:256x1536,low:2x64 \\
        --slo-ttft-ms 1000 --slo-tpot-ms 20 --out out/transition-closed
    python -m loadtests.bench.client_transition --config ... --workload open \\
        --phases low:4r@96,high:48r@1536,low:4r@96,high:48r@1536,low:4r@96 --slo-ttft-ms 1000 --slo-tpot-ms 20

A phase is `NAME:CxN` (closed loop: N prompts, at most C in flight) or `NAME:Rr@N` (open loop: N prompts
sent as Poisson arrivals at R requests/s); NAME is `low` or `high`. Every variant gets the same requests
in each phase (the phase's seed), sent back to back: a phase starts when the previous one's last
request ended (closed-loop fixed work: the run's whole duration is what a user waits for that work).
Per phase: output tokens and tok/s, duration, TTFT and TPOT percentiles, and goodput as DistServe
defines it: requests per second that met both SLOs (TTFT <= --slo-ttft-ms and TPOT <= --slo-tpot-ms,
the SLOs fixed before the run). The replicas' status is polled every 0.5 s across the whole run: flips
per phase, and modes.png (mode and load over the run, phases shaded). Before the first variant's phases
one unmeasured closed-loop run (`--warmup`) meets the app's cold costs and the app settles back to the
mode its policy gives low load, as `loadtests.bench.client_sweep` does: otherwise the first variant
(dynamic, by default) would pay them inside its phases.

`--dry-run` checks the arguments and prints the phases, starting nothing.

Writes into --out: transition.csv (workload, variant, phase, load, output_tokens, duration_s,
tpot_p50_ms, ttft_p99_ms, goodput_rps, then the rest), results.json, status.csv, modes.png.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from loadtests.bench.app_session import add_app_args, app_variants, log, settle
from loadtests.bench.mode_plots import draw_modes
from loadtests.bench.sglang_bench import SglangClient, ms
from loadtests.sweep.launcher import LauncherError

__all__ = ["TRANSITION_FIRST", "Phase", "PhaseRun", "default_warmup", "goodput_count", "main", "parse_phases"]

TRANSITION_FIRST = (
    "workload", "variant", "phase", "load", "output_tokens", "duration_s", "tpot_p50_ms", "ttft_p99_ms",
    "goodput_rps",
)  # fmt: skip


@dataclass(frozen=True)
class Phase:
    load: str  # low | high
    prompts: int
    concurrency: int | None  # closed loop: at most this many in flight
    rate: float | None  # open loop: Poisson arrivals per second


@dataclass(frozen=True)
class PhaseRun:
    workload: str
    variant: str
    phase: int
    load: str
    output_tokens: int
    duration_s: float
    tpot_p50_ms: float | None
    ttft_p99_ms: float | None
    goodput_rps: float
    output_tok_s: float
    ttft_p50_ms: float | None
    tpot_p99_ms: float | None
    completed: int
    prompts: int
    good_requests: int  # requests that met both SLOs (goodput's numerator)
    flips: int  # of the policy's desired mode, inside the phase
    engine_flips: int  # of those, the flips the engines applied (their own count)
    slow_steps: int  # engine steps whose host call took >= 0.25 s (the engines' own count)
    on_fraction: float | None
    started: float  # epoch seconds


def parse_phases(text: str, workload: str) -> list[Phase]:
    """`low:2x64,high:256x1536` (closed) or `low:4r@96,high:48r@1536` (open)."""
    phases = []
    for item in (x.strip() for x in text.split(",") if x.strip()):
        load, _, spec = item.partition(":")
        if load not in ("low", "high"):
            raise ValueError(f"phase {item!r}: the name is low or high")
        if workload == "closed":
            c, _, n = spec.partition("x")
            phases.append(Phase(load, int(n), int(c), None))
        else:
            r, _, n = spec.partition("r@")
            phases.append(Phase(load, int(n), None, float(r)))
        if phases[-1].prompts < 1:
            raise ValueError(f"phase {item!r}: no prompts")
    return phases


def goodput_count(result: dict[str, Any], slo_ttft_ms: float, slo_tpot_ms: float) -> int:
    """Requests of one client run that met both SLOs (TPOT over the tokens after the first)."""
    ok = 0
    for ttft, itls, n, err in zip(
        result.get("ttfts") or [], result.get("itls") or [], result.get("output_lens") or [],
        result.get("errors") or [], strict=False,
    ):  # fmt: skip
        if err or not ttft or n < 1:
            continue
        tpot_ms = 1e3 * sum(itls) / (n - 1) if n > 1 else 0.0
        ok += 1e3 * ttft <= slo_ttft_ms and tpot_ms <= slo_tpot_ms
    return ok


def default_warmup(phases: list[Phase], batch_cap: int) -> int:
    """`--warmup`'s default: the highest closed phase's concurrency; with only open phases, the engine's
    batch limit (`engine.max_running_requests`), the most a high rate can put in one batch."""
    return max((ph.concurrency or 0 for ph in phases), default=0) or batch_cap


def warm_up(args: argparse.Namespace, client: SglangClient, url: str, policy: Any) -> None:
    """Before the first variant's phases: SglangClient.warm_up at `--warmup`, then the app settles."""
    took = client.warm_up(
        url, args.warmup, model=args.model_id, tokenizer=args.tokenizer, random_input_len=args.input_len,
        random_output_len=args.output_len, output_file=str(args.out / "warmup.jsonl"), seed=args.seed + 1000,
    )  # fmt: skip
    log(f"warm-up: {2 * args.warmup} requests at c={args.warmup} in {took:.1f} s (not measured)")
    settle(policy)


def run_variant(args: argparse.Namespace, client: SglangClient, served: Any, out: Path) -> list[PhaseRun]:
    from loadtests.sweep.control import StatusPoller, flip_count, on_fraction, slow_step_count

    runs: list[PhaseRun] = []
    # a held variant's switch landed, and was reported, before its first phase (the launcher's
    # wait_for_override waits on the engines' own enabled flag): not inside one
    with StatusPoller(served.client, interval=0.5) as poller:
        for i, ph in enumerate(args.phases):
            started = time.time()
            result = client.run(
                base_url=served.url, model=args.model_id, tokenizer=args.tokenizer, num_prompts=ph.prompts,
                max_concurrency=ph.concurrency, request_rate=ph.rate if ph.rate is not None else float("inf"),
                random_input_len=args.input_len, random_output_len=args.output_len, random_range_ratio=1.0,
                output_file=str(out / f"sglang-{served.variant}-p{i}.jsonl"), disable_tqdm=True,
                seed=args.seed + i, warmup_requests=1 if i == 0 else 0,
            )  # fmt: skip
            ended = time.time()
            duration = float(result.get("duration") or (ended - started))
            mine = [s for s in poller.samples if started <= s.t <= ended]
            good = goodput_count(result, args.slo_ttft_ms, args.slo_tpot_ms)
            run = PhaseRun(
                workload=args.workload, variant=served.variant, phase=i, load=ph.load,
                output_tokens=int(result.get("total_output_tokens") or 0), duration_s=round(duration, 2),
                tpot_p50_ms=ms(result, "median_tpot_ms"), ttft_p99_ms=ms(result, "p99_ttft_ms"),
                goodput_rps=round(good / duration, 3) if duration > 0 else 0.0,
                output_tok_s=round(float(result.get("output_throughput") or 0.0), 1),
                ttft_p50_ms=ms(result, "median_ttft_ms"), tpot_p99_ms=ms(result, "p99_tpot_ms"),
                completed=int(result.get("completed") or 0), prompts=ph.prompts, good_requests=good,
                flips=flip_count(mine), engine_flips=flip_count(mine, applied=True), slow_steps=slow_step_count(mine),
                on_fraction=None if not mine else round(on_fraction(mine) or 0.0, 3), started=round(started, 3),
            )  # fmt: skip
            runs.append(run)
            log(
                f"{served.variant} phase {i} ({ph.load}): {run.output_tok_s:,.0f} tok/s over {run.duration_s:.1f} s, "
                f"TPOT p50 {run.tpot_p50_ms} ms, TTFT p99 {run.ttft_p99_ms} ms, goodput {run.goodput_rps} req/s, "
                f"{run.flips} flips ({run.engine_flips} applied), {run.slow_steps} slow engine steps"
            )
    t0 = runs[0].started if runs else 0.0
    args.status_rows += [
        {"variant": served.variant, **asdict(s), "t_rel": round(s.t - t0, 3)} for s in poller.samples
    ]
    return runs


def plot_modes(rows: list[dict[str, Any]], runs: list[PhaseRun], png: Path) -> None:
    """Per variant: load (running + waiting) and the replicas' mode over the run, high phases shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    variants = list(dict.fromkeys(r.variant for r in runs))
    fig, axes = plt.subplots(len(variants), 1, figsize=(10, 2.4 * len(variants)), squeeze=False)
    for ax, v in zip(axes[:, 0], variants, strict=True):
        mine = [r for r in rows if r["variant"] == v]
        phases = [r for r in runs if r.variant == v]
        t0 = phases[0].started
        for ph in phases:
            if ph.load == "high":
                ax.axvspan(ph.started - t0, ph.started - t0 + ph.duration_s, color="tab:blue", alpha=0.08)
        draw_modes(ax, mine)
        ax.set_title(
            f"{v}: {sum(p.duration_s for p in phases):.1f} s, {sum(p.flips for p in phases)} flips",
            fontsize=9,
        )
    axes[-1, 0].set_xlabel("s into the run (high phases shaded)")
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)


def write(args: argparse.Namespace, runs: list[PhaseRun]) -> None:
    names = [f.name for f in fields(PhaseRun)]
    with (args.out / "transition.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=names)
        w.writeheader()
        w.writerows(asdict(r) for r in runs)
    if args.status_rows:
        with (args.out / "status.csv").open("w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(args.status_rows[0]))
            w.writeheader()
            w.writerows(args.status_rows)
    settings = {k: v for k, v in vars(args).items() if k not in ("phases", "status_rows")}
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in settings.items()}
    settings["phases"] = [asdict(p) for p in args.phases]
    totals = {
        v: round(sum(r.duration_s for r in runs if r.variant == v), 2)
        for v in dict.fromkeys(r.variant for r in runs)
    }
    doc = {"settings": settings, "total_duration_s": totals, "phases": [asdict(r) for r in runs]}
    (args.out / "results.json").write_text(json.dumps(doc, indent=2))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m loadtests.bench.client_transition",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--config", type=Path, required=True, help="specflip config of the app")
    p.add_argument("--workload", choices=["closed", "open"], required=True)
    p.add_argument("--phases", required=True, help="closed: low:CxN,...; open: low:Rr@N,... (see above)")
    p.add_argument("--variants", default="dynamic,on,off", help="comma list of dynamic, on, off")
    p.add_argument(
        "--slo-ttft-ms", type=float, required=True, help="goodput's TTFT SLO, fixed before the run"
    )
    p.add_argument(
        "--slo-tpot-ms", type=float, required=True, help="goodput's TPOT SLO, fixed before the run"
    )
    p.add_argument("--input-len", type=int, default=64)
    p.add_argument("--output-len", type=int, default=128)
    p.add_argument("--tokenizer", help="tokenizer dir (default: the config's model)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument(
        "--warmup",
        type=int,
        default=None,
        metavar="C",
        help="one unmeasured closed-loop run of two waves at concurrency C before the first variant, then "
        "the app settles (default: the highest closed phase's concurrency; for the open loop the config's "
        "engine.max_running_requests; 0: none)",
    )
    add_app_args(p)
    p.add_argument(
        "--dry-run", action="store_true", help="check the arguments, print the phases, start nothing"
    )
    p.add_argument("--ready-timeout", type=float, default=900.0)
    p.add_argument("--out", type=Path, default=Path("out/client_transition"))
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    phases_text = args.phases
    try:
        args.phases = parse_phases(args.phases, args.workload)
        if set(variants) - {"dynamic", "on", "off"} or not variants:
            raise ValueError(f"--variants takes dynamic, on, off: got {args.variants!r}")
    except ValueError as e:
        print(f"client_transition: {e}", file=sys.stderr)
        return 2
    from deployments.config import load_config

    config = load_config(str(args.config))
    if args.warmup is None:
        args.warmup = default_warmup(args.phases, config.engine.max_running_requests)
    log(
        f"{args.workload}-loop transition, phases {phases_text}: {sum(ph.prompts for ph in args.phases)} "
        f"prompts per variant, variants {','.join(variants)}"
    )
    if args.dry_run:
        for i, ph in enumerate(args.phases):
            load = f"{ph.rate:g} requests/s" if ph.rate is not None else f"at most {ph.concurrency} in flight"
            print(f"phase {i} {ph.load}: {ph.prompts} prompts, {load}")
        print(f"variants {', '.join(variants)}; warm-up at c={args.warmup}")
        return 0
    args.model_id = config.model.id
    args.tokenizer = args.tokenizer or config.model.tokenizer_path or config.model.path
    args.status_rows = []
    args.out.mkdir(parents=True, exist_ok=True)
    client = SglangClient()
    runs: list[PhaseRun] = []
    try:
        for i, served in enumerate(app_variants(args, variants, args.out)):
            if i == 0 and args.warmup:  # the first variant would meet the app's cold costs alone
                warm_up(args, client, served.url, config.policy)
            runs += run_variant(args, client, served, args.out)
            write(args, runs)
    except LauncherError as e:  # the app did not start, or --target does not answer
        print(f"client_transition: {e}", file=sys.stderr)
        return 1
    try:
        plot_modes(args.status_rows, runs, args.out / "modes.png")
    except ImportError:  # matplotlib comes with the bench extra
        log("no matplotlib: modes.png not drawn")
    for v in variants:
        mine = [r for r in runs if r.variant == v]
        log(f"{v}: {sum(r.duration_s for r in mine):.1f} s for {sum(r.output_tokens for r in mine)} tokens")
    return 0


if __name__ == "__main__":
    sys.exit(main())
