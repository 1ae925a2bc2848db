"""Sweep runner: each variant x a concurrency sweep, plus the low->high->low transition.

    python -m loadtests.sweep --target http://127.0.0.1:8000 --token T \\
        --concurrency 1,2,4 --duration 20 --out out/bench --variants on,off,dynamic
    python -m loadtests.sweep --launch-cmd 'specflip serve --config {config} --port {port}' \\
        --token T --max-concurrency 64 --variants on,off,dynamic,adaptive \\
        --variant-config adaptive=deployments/examples/cpu-tiny-adaptive.yaml --out out/bench

For every variant: bring the app up (launcher), one Locust run per concurrency
(fixed shape: warm-up + measured window), then the transition shape while a
background thread polls /specflip/status. Writes results.csv/json, PNG plots,
transition.csv and report.md into --out (rewritten after every point, so an
interrupted sweep keeps what it measured).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
from pathlib import Path

from deployments.client import ControlError, SpecflipClient
from loadtests.calibrate.run import load_ceiling
from loadtests.locust.config import LoadConfig
from loadtests.locust.records import RequestRecord
from loadtests.locust.run import LocustError, run_locust
from loadtests.locust.shapes import Schedule, parse_shape, phase_bounds
from loadtests.metrics import Slo, summarize, throughput_timeline
from loadtests.sweep.control import StatusPoller, mean_accept_length, on_fraction
from loadtests.sweep.launcher import (
    DEFAULT_SPECS,
    AppLauncher,
    CommandLauncher,
    ExternalApp,
    LauncherError,
    Variant,
    parse_variant_configs,
)
from loadtests.sweep.report import write_outputs
from loadtests.sweep.results import PhaseResult, ResultRow, SweepResults, TransitionResult

__all__ = ["build_parser", "concurrency_levels", "main", "run_sweep"]


def concurrency_levels(spec: str | None, max_c: int | None) -> list[int]:
    """`1,2,4` as given, or powers of two up to `max_c` (max_c itself included)."""
    if spec:
        levels = sorted({int(x) for x in spec.split(",") if x.strip()})
    elif max_c:
        levels, c = [], 1
        while c < max_c:
            levels.append(c)
            c *= 2
        levels.append(max_c)
    else:
        raise ValueError("give --concurrency 1,2,4 or --max-concurrency N")
    if not levels or levels[0] < 1:
        raise ValueError(f"concurrency levels must be >= 1, got {levels}")
    return levels


def _slo(text: str) -> float | None:
    return None if text.lower() == "none" else float(text)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m loadtests.sweep",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    app = p.add_argument_group("app (one of --target / --launch-cmd)")
    app.add_argument("--target", help="base URL of a running app (variants by override)")
    app.add_argument("--launch-cmd", help="command template with {config} {port} {variant}")
    app.add_argument(
        "--token",
        default=os.environ.get("SPECFLIP_TOKEN", ""),
        help="control bearer token (default: $SPECFLIP_TOKEN)",
    )
    app.add_argument(
        "--variant-config",
        action="append",
        default=[],
        metavar="VARIANT=PATH",
        help="config given to --launch-cmd for a variant (repeatable)",
    )
    app.add_argument("--port", type=int, help="port for --launch-cmd (default: a free port)")
    app.add_argument("--ready-timeout", type=float, default=900.0, help="seconds to wait for /v1/models")
    run = p.add_argument_group("sweep")
    run.add_argument("--variants", default="on,off,dynamic", help="comma list of on,off,dynamic,adaptive")
    run.add_argument("--concurrency", help="comma list of concurrency levels, e.g. 1,2,4,8")
    run.add_argument("--max-concurrency", type=int, help="sweep 1,2,4,... up to this")
    run.add_argument("--duration", type=float, default=30.0, help="measured seconds per point")
    run.add_argument("--warmup", type=float, default=5.0, help="seconds of load before measuring")
    run.add_argument(
        "--transition",
        default="low=1,high=16,low_s=30,high_s=60,tail_s=30",
        help="low/high users and phase seconds of the transition shape, or 'none'",
    )
    run.add_argument("--transition-variants", help="variants that run the transition (default: all)")
    run.add_argument("--poll-interval", type=float, default=0.5, help="seconds between status polls")
    run.add_argument("--progress-every", type=float, default=5.0, help="seconds between progress lines")
    run.add_argument(
        "--locust-processes",
        type=int,
        default=1,
        help="Locust worker processes (raise it when one core cannot keep up at high concurrency)",
    )
    run.add_argument(
        "--calibration",
        type=Path,
        help="calibration.json of `python -m loadtests.calibrate` on this host: a level where Locust ran "
        "above --max-client-load of its ceiling is reported as client-bound, not as a ratio",
    )
    run.add_argument("--max-client-load", type=float, default=0.7)
    run.add_argument("--out", type=Path, default=Path("out/bench"))
    run.add_argument("--title", default="concurrency sweep")
    load = p.add_argument_group("requests")
    load.add_argument("--model", default="", help="model id (default: first of /v1/models)")
    load.add_argument("--api", choices=["chat", "completions"], default="chat")
    load.add_argument("--prompt-set", choices=["synthetic", "corpus"], default="synthetic")
    load.add_argument("--corpus-dir", default="")
    load.add_argument("--input-len", type=int, default=128)
    load.add_argument("--output-len", type=int, default=128)
    load.add_argument("--num-prompts", type=int, default=256)
    load.add_argument("--seed", type=int, default=0)
    load.add_argument("--temperature", type=float, default=0.0)
    load.add_argument("--no-ignore-eos", action="store_true", help="let requests stop at EOS")
    load.add_argument(
        "--no-itl-events",
        action="store_true",
        help="no per-gap ITL entries in Locust's stats (less load-generator CPU; the JSONL keeps ITL)",
    )
    load.add_argument(
        "--slo-ttft-ms", type=_slo, default=2000.0, help="TTFT SLO for goodput ('none': unchecked)"
    )
    load.add_argument(
        "--slo-tpot-ms", type=_slo, default=100.0, help="TPOT SLO for goodput ('none': unchecked)"
    )
    return p


class _Progress:
    """Prints `[sweep] variant=on c=4 12/30s ok=18 err=0 tok/s=...` lines while Locust runs."""

    def __init__(self, label: str, total_s: float, schedule: Schedule | None = None) -> None:
        self.label, self.total_s, self.t_first, self.schedule = label, total_s, 0.0, schedule
        self.poller: StatusPoller | None = None

    def __call__(self, now: float, records: list[RequestRecord]) -> None:
        if not records:
            print(f"[sweep] {self.label} starting...", flush=True)
            return
        self.t_first = self.t_first or min(r.start for r in records)
        done = [r for r in records if r.error != "cancelled"]
        ok = sum(1 for r in done if r.ok)
        span = max(1e-3, min(5.0, now - self.t_first))  # tok/s over the last 5 s (or since the start)
        recent = [r for r in done if r.ok and r.end >= now - span]
        tok_s = sum(r.output_tokens for r in recent) / span
        elapsed = min(now - self.t_first, self.total_s)
        line = f"[sweep] {self.label} {elapsed:.0f}/{self.total_s:.0f}s "
        phase = None if self.schedule is None else self.schedule.phase_at(elapsed)
        if phase is not None:
            line += f"phase={phase.name} users={phase.users} "
        line += f"ok={ok} err={len(done) - ok} tok/s={tok_s:.1f}"
        if self.poller is not None and self.poller.samples:
            last_t = self.poller.samples[-1].t
            line += " modes=" + " ".join(
                f"{s.replica_id}:{s.mode}" for s in self.poller.samples if s.t == last_t
            )
        print(line, flush=True)


def _transition_spec(text: str) -> str:
    return "transition:" + text


def run_sweep(args: argparse.Namespace, launcher: AppLauncher, target_label: str) -> SweepResults:
    variants = [Variant(v.strip()) for v in args.variants.split(",") if v.strip()]
    levels = concurrency_levels(args.concurrency, args.max_concurrency)
    t_variants = {Variant(v) for v in (args.transition_variants or args.variants).split(",") if v.strip()}
    slo = Slo(args.slo_ttft_ms, args.slo_tpot_ms)
    base = LoadConfig(
        model=args.model,
        api=args.api,
        prompt_set=args.prompt_set,
        corpus_dir=args.corpus_dir,
        input_len=args.input_len,
        output_len=args.output_len,
        num_prompts=args.num_prompts,
        seed=args.seed,
        temperature=args.temperature,
        ignore_eos=not args.no_ignore_eos,
        itl_events=not args.no_itl_events,
        slo_ttft_ms=slo.ttft_ms,
        slo_tpot_ms=slo.tpot_ms,
    )
    res = SweepResults(
        settings={
            "title": args.title,
            "target": target_label,
            "variants": [v.value for v in variants],
            "concurrency": levels,
            "duration_s": args.duration,
            "warmup_s": args.warmup,
            "api": args.api,
            "prompt_set": args.prompt_set,
            "input_len": args.input_len,
            "output_len": args.output_len,
            "ignore_eos": base.ignore_eos,
            "temperature": args.temperature,
            "slo_text": slo.describe(),
            "transition": args.transition,
            "max_client_load": args.max_client_load,
            "client_ceiling_chunks_s": getattr(args, "ceiling_chunks_s", None),
            "started": dt.datetime.now().isoformat(timespec="seconds"),
        }
    )
    for variant in variants:
        try:
            _run_variant(args, launcher, variant, levels, variant in t_variants, base, slo, res)
        except (LauncherError, ControlError, LocustError) as e:
            # one variant failing (e.g. its app does not start) must not lose the others
            print(f"[sweep] variant={variant.value} failed: {e}", flush=True)
            res.notes.append(f"variant {variant.value} failed: {str(e).splitlines()[0]}")
            res.failed.append(variant.value)
        write_outputs(res, args.out)
    return res


def _run_variant(
    args: argparse.Namespace,
    launcher: AppLauncher,
    variant: Variant,
    levels: list[int],
    transition: bool,
    base: LoadConfig,
    slo: Slo,
    res: SweepResults,
) -> None:
    out: Path = args.out
    url = launcher.start(variant)
    client = SpecflipClient(url, args.token, timeout=10.0)
    model = args.model or client.models()[0]
    res.settings["model"] = model
    client.probe(model, args.api)
    cfg = base.replace(model=model)
    for c in levels:
        total = args.warmup + args.duration
        shape_cfg = cfg.replace(shape=f"fixed:users={c},duration={total:g}")
        progress = _Progress(f"variant={variant.value} c={c}", total)
        with StatusPoller(client, interval=max(args.poll_interval, 1.0)) as poller:
            progress.poller = poller
            run = run_locust(
                url,
                shape_cfg,
                out / "runs" / variant.value / f"c{c}",
                on_progress=progress,
                progress_every=args.progress_every,
                processes=args.locust_processes,
            )
        w0 = run.load_start + args.warmup
        w1 = w0 + args.duration
        summary = summarize(run.records, w0, w1, slo)
        window = [s for s in poller.samples if w0 <= s.t < w1]
        res.rows.append(
            ResultRow.from_summary(
                variant.value,
                c,
                summary,
                mean_accept_length(window),
                on_fraction(window),
                getattr(args, "ceiling_chunks_s", None),
            )
        )
        print(
            f"[sweep] variant={variant.value} c={c} done: ok={summary.ok} err={summary.errors} "
            f"tok/s={summary.output_tok_s:.1f} ttft_p50={summary.ttft_p50_ms or 0:.0f}ms "
            f"tpot_p50={summary.tpot_p50_ms or 0:.1f}ms goodput={summary.goodput_req_s:.2f}req/s",
            flush=True,
        )
        write_outputs(res, out, plots=False)
    if args.transition != "none" and transition:
        res.transitions.append(_run_transition(args, url, client, cfg, variant, slo, out))


def _run_transition(
    args: argparse.Namespace,
    url: str,
    client: SpecflipClient,
    cfg: LoadConfig,
    variant: Variant,
    slo: Slo,
    out: Path,
) -> TransitionResult:
    shape_cfg = cfg.replace(shape=_transition_spec(args.transition))
    total = shape_cfg.schedule.duration
    progress = _Progress(f"variant={variant.value} transition", total, shape_cfg.schedule)
    with StatusPoller(client, interval=args.poll_interval) as poller:
        progress.poller = poller
        run = run_locust(
            url,
            shape_cfg,
            out / "runs" / variant.value / "transition",
            on_progress=progress,
            progress_every=args.progress_every,
            processes=args.locust_processes,
            stop_timeout=30.0,
        )
    t0 = run.load_start  # phase times count from the first request (see LocustRun.load_start)
    phases = []
    for p, start, end in phase_bounds(run.phases):
        s = summarize(run.records, t0 + start, t0 + end, slo)
        phases.append(PhaseResult(p.name, start, end, p.users, s))
    tok_s = throughput_timeline(run.records, t0, t0 + total, 1.0)
    samples = [s for s in poller.samples if t0 <= s.t <= t0 + total]
    if not poller.available:
        print(f"[sweep] variant={variant.value}: no /specflip/status, the transition has no mode timeline")
    print(
        f"[sweep] variant={variant.value} transition done: "
        + " ".join(f"{p.name}={p.summary.output_tok_s:.1f}tok/s" for p in phases),
        flush=True,
    )
    return TransitionResult(variant.value, t0, phases, samples, tok_s, 1.0, poller.available)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if bool(args.target) == bool(args.launch_cmd):
        print("give exactly one of --target URL (running app) or --launch-cmd TEMPLATE", file=sys.stderr)
        return 2
    try:
        specs = parse_variant_configs(args.variant_config, DEFAULT_SPECS)
        variants = [Variant(v.strip()) for v in args.variants.split(",") if v.strip()]
        concurrency_levels(args.concurrency, args.max_concurrency)
        if args.transition != "none":
            parse_shape(_transition_spec(args.transition))
        for v in (args.transition_variants or "").split(","):
            if v.strip():
                Variant(v.strip())
    except (LauncherError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    args.ceiling_chunks_s = None
    if args.calibration is not None:
        ceiling = load_ceiling(args.calibration, "locust", args.locust_processes)
        if ceiling is None:
            print(
                f"error: {args.calibration} has no ceiling for Locust with {args.locust_processes} process(es): "
                "calibrate with that many (python -m loadtests.calibrate --processes N)",
                file=sys.stderr,
            )
            return 2
        args.ceiling_chunks_s = ceiling.chunks_s
    switched = [v.value for v in variants if specs[v].override is not None]
    if switched and not args.token:
        print(
            f"error: variants {switched} are set by override: pass --token (or SPECFLIP_TOKEN)",
            file=sys.stderr,
        )
        return 2
    launcher: AppLauncher
    if args.target:
        ext = ExternalApp(args.target, args.token, specs)
        missing = [v.value for v in variants if not ext.supports(v)]
        if missing:
            print(f"error: variants {missing} need their own app: use --launch-cmd", file=sys.stderr)
            return 2
        launcher, label = ext, args.target
    else:
        launcher = CommandLauncher(
            args.launch_cmd,
            token=args.token,
            specs=specs,
            port=args.port,
            ready_timeout=args.ready_timeout,
            log_dir=args.out / "launch",
        )
        label = f"launched: {args.launch_cmd}"
    try:
        res = run_sweep(args, launcher, label)
    finally:
        launcher.stop()
    print(
        f"[sweep] wrote {args.out / 'report.md'} ({len(res.rows)} points, {len(res.transitions)} transitions)"
    )
    if res.failed:
        print(
            f"[sweep] failed variants: {', '.join(res.failed)} (see the log above and report.md)",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
