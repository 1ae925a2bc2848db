"""SGLang's own benchmark client (`sglang.benchmark.serving`) over variants and concurrency levels, in
one process: the app held ON, held OFF and left to its policy (`dynamic`), and SGLang's own servers
(`raw_eagle`, `raw_plain`, and `sglang_adaptive`: SGLang's `--speculative-adaptive`, topk 1 only) with
the same engine arguments, one after the other on one host.

    python -m loadtests.bench.client_sweep --config deployments/examples/h200-dummy8b-tree.yaml \\
        --shape tree --variants dynamic,on,off,raw_eagle,raw_plain --concurrency 1,16,64,256 \\
        --prompts 1=40,16=352,64=768,256=1024 --out out/client_sweep

The workload is the one of issue reports and the seed: `--backend sglang-oai`, `random-ids` prompts of
`--input-len` token ids and `--output-len` tokens each with `--random-range-ratio 1` (fixed lengths),
so a closed-loop client runs in waves: the case a dynamic policy must not flap on. The client is
imported once (a fresh `python -m sglang.benchmark.serving` spends 25-30 s loading before it sends)
and its `run_benchmark` called per run. A run is a whole client run (first send to last token);
`--prompts C=N` sizes it (default `--min-waves` waves of C), and the CSV keeps each run's duration so
a run shorter than 20 s shows. Referee: the engine's own decode tokens over the run (the replicas'
`generated_tokens` for the app, the scheduler's decode lines for a raw server). Every 0.5 s the
app's replicas' status (or a raw server's `/v1/loads`) is sampled into status.csv: running and waiting
requests for every variant alike (sampled_running, full_fraction, idle_fraction: how much of a run
the batch was full, and how much the engine sat idle between waves; refill_s: how long, on average,
the engine took from emptied to a full wave again, the client's turnaround between waves as the
engine sees it), and the app's mode and flips
(`flips`: of the policy's desired mode; `engine_flips`: those the engines applied, their own count).
App variants that follow each other in `--variants` share one app and run level by level (every
variant at a level, then the next level; repeat k starts with the k-th variant); a raw server runs
all its levels once started. The app and each raw server first get one unmeasured warm-up run at
the highest level.

ITL comes twice. `itl_p50_ms`/`itl_p99_ms` are SGLang's own, and SGLang's client computes them two
ways: for a server that reports an accept length on /server_info (SGLang's EAGLE-3 server:
`raw_eagle`, `sglang_adaptive`) it divides each streamed chunk's gap by the tokens its tokenizer finds
in the chunk's text (a per-token ITL); for every other server (the app, `raw_plain`) it keeps the gap
between chunks. `chunk_itl_p50_ms`/`chunk_itl_p99_ms` are the gaps between streamed chunks that
carried text, from the same client's per-request gaps, the same way for every variant: compare those
across variants.

Every run's CPU (the kernel's counters, `sweep_profile.RunCpu`): `front_cpu_cores` and
`front_cpu_us_per_token` of the process in front of the engine (the app's replica, SGLang's HTTP +
tokenizer process; near one core it is the bottleneck), `scheduler_cpu_cores`, for the app the
processes on a request's way to its replica, `router_cpu_cores` (Ray's LLMRouter) and
`haproxy_cpu_cores`, and `client_cpu_cores`: this process, SGLang's client and the status poller
(near one core, the client bounds the run).

Writes into --out after every run: sweep.csv (shape, variant, concurrency, repeat, output_tok_s,
ttft_p50_ms, tpot_p50_ms, flips, then the rest), results.json, status.csv, and per run SGLang's
own JSONL line. `--dry-run` checks the arguments and prints each server's runs in order with their
prompts, starting nothing: a long sweep's plan read before a GPU runs it.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import sys
import time
from dataclasses import asdict, fields
from functools import partial
from pathlib import Path
from typing import Any

from deployments.config import CPU_ENV
from loadtests.bench.app_session import APP_VARIANTS, AppSession, add_app_args, log, settle
from loadtests.bench.mode_plots import plot_modes
from loadtests.bench.sglang_bench import SglangClient, chunk_gaps, gap_ms, ms
from loadtests.bench.sweep_plan import levels_of, pairs, plan, servers
from loadtests.bench.sweep_profile import DELAY_S, SECONDS, RunCpu, RunProfile, serving_pids
from loadtests.bench.sweep_run import CSV_FIRST, SweepRun
from loadtests.sweep.control import (
    StatusPoller,
    flip_count,
    load_fractions,
    mean_running,
    on_fraction,
    raw_samples,
    refill_gaps,
    slow_step_count,
)
from loadtests.sweep.launcher import LauncherError

__all__ = ["APP_VARIANTS", "CSV_FIRST", "SweepRun", "main"]

# variant -> raw_sglang's arguments: SGLang's server with the config's draft, without it, and with its
# own engine-internal adaptive steps (`--speculative-adaptive`, SGLang's default candidates; topk 1 only)
RAW_VARIANTS = {
    "raw_eagle": ["--speculation", "on"],
    "raw_plain": ["--speculation", "off"],
    "sglang_adaptive": ["--speculation", "on", "--", "--speculative-adaptive"],
}


class Sweep:
    def __init__(self, args: argparse.Namespace) -> None:
        from deployments.config import Device, load_config

        self.args, self.out = args, Path(args.out)
        config = load_config(str(args.config))
        self.policy = config.policy
        self.model_id = config.model.id
        self.tokenizer = args.tokenizer or config.model.tokenizer_path or config.model.path
        self.cpu = config.engine.device is Device.CPU
        self.client = SglangClient()
        self.runs: list[SweepRun] = []
        self.status_rows: list[dict[str, Any]] = []
        self.raw_pid: int | None = None  # the raw server running now (its HTTP process), for --profile-at
        self.out.mkdir(parents=True, exist_ok=True)

    def prompts(self, c: int) -> int:
        return self.args.prompts.get(c, c * self.args.min_waves)

    def one(
        self, url: str, variant: str, c: int, k: int, referee: Any, poller_client: Any, lines: Any = None
    ) -> None:
        """One client run; `referee` counts the engine's tokens, `lines` (a LogReferee over the engine's
        decode lines, when it logs them) gives its batch and queue."""
        a, n = self.args, self.prompts(c)
        jsonl = self.out / f"sglang-{variant}-c{c}-r{k}.jsonl"
        kwargs = dict(
            base_url=url, model=self.model_id, tokenizer=self.tokenizer, num_prompts=n, max_concurrency=c,
            random_input_len=a.input_len, random_output_len=a.output_len, random_range_ratio=1.0,
            output_file=str(jsonl), disable_tqdm=True, seed=a.seed + k, request_rate=float("inf"),
        )  # fmt: skip
        app = poller_client is not None  # else one of SGLang's servers: its /v1/loads
        poller = StatusPoller(
            poller_client, interval=0.5, fetch=None if app else partial(raw_samples, url, variant)
        )
        started = time.time()
        pids = serving_pids(self.raw_pid)
        with poller, RunCpu(pids) as cpu, self.profile(pids, variant, c, k):
            result = self.client.run(**kwargs)
        ended = time.time()
        duration = float(result.get("duration") or (ended - started))
        samples = poller.samples
        # the client's own measured window only (SGLang's client sends a warm-up request first)
        window = [s for s in samples if s.t >= ended - duration]
        fractions = load_fractions(window, c)
        for s in samples:
            row = {"variant": variant, "concurrency": c, "repeat": k, **asdict(s)}
            self.status_rows.append({**row, "t_rel": round(s.t - started, 3)})
        engine = None
        if referee is not None:
            tokens = referee.tokens(started, ended) if hasattr(referee, "tokens") else None
            engine = tokens / duration if tokens and duration > 0 else referee.rate(ended - duration, ended)
        gaps = chunk_gaps(result)
        run = SweepRun(
            shape=a.shape, variant=variant, concurrency=c, repeat=k,
            output_tok_s=round(float(result.get("output_throughput") or 0.0), 1),
            ttft_p50_ms=ms(result, "median_ttft_ms"), tpot_p50_ms=ms(result, "median_tpot_ms"),
            flips=flip_count(samples) if app else None, engine_flips=flip_count(samples, True) if app else None,
            ttft_p99_ms=ms(result, "p99_ttft_ms"), tpot_p99_ms=ms(result, "p99_tpot_ms"),
            itl_p50_ms=ms(result, "median_itl_ms"), itl_p99_ms=ms(result, "p99_itl_ms"),
            chunk_itl_p50_ms=gap_ms(gaps, 50), chunk_itl_p99_ms=gap_ms(gaps, 99),
            duration_s=round(duration, 2), prompts=n, completed=int(result.get("completed") or 0),
            output_tokens=int(result.get("total_output_tokens") or 0),
            engine_tok_s=None if engine is None else round(engine, 1),
            on_fraction=None if not (app and samples) else round(on_fraction(samples) or 0.0, 3),
            engine_running=_round(lines.running(started, ended)) if lines is not None else None,
            engine_queued=_round(lines.queued(started, ended)) if lines is not None else None,
            sampled_running=_round(mean_running(window)),
            full_fraction=None if fractions is None else round(fractions[0], 3),
            idle_fraction=None if fractions is None else round(fractions[1], 3),
            refill_s=_round(sum(g) / len(g) if (g := refill_gaps(window, c)) else None, 2),
            front_cpu_us_per_token=cpu.front_us_per(int(result.get("total_output_tokens") or 0)),
            front_cpu_cores=_round(cpu.front(), 2), scheduler_cpu_cores=_round(cpu.cores.get("scheduler"), 2),
            router_cpu_cores=_round(cpu.cores.get("router"), 3),
            haproxy_cpu_cores=_round(cpu.cores.get("haproxy"), 3),
            client_cpu_cores=_round(cpu.cores.get("client"), 2),
            started=round(started, 3),
        )  # fmt: skip
        self.runs.append(run)
        app_text = (
            f", flips {run.flips} (applied {run.engine_flips}), ON {run.on_fraction or 0:.0%}, "
            f"slow engine steps {slow_step_count(samples)}"
            if app
            else ""
        )
        log(
            f"{variant} c={c} repeat {k}: {run.output_tok_s:,.0f} tok/s over {run.duration_s:.1f} s "
            f"({run.completed}/{n} done; engine {run.engine_tok_s or 0:,.0f}), TTFT p50 {run.ttft_p50_ms} ms, "
            f"TPOT p50 {run.tpot_p50_ms} ms, ITL p99 {run.itl_p99_ms} ms (chunk {run.chunk_itl_p99_ms} ms)"
            + f", batch {run.engine_running}, queue {run.engine_queued}"
            + f"; sampled: running {run.sampled_running}, full {run.full_fraction}, idle {run.idle_fraction}"
            + f", refill {run.refill_s} s"
            + f"; CPU cores: front {run.front_cpu_cores}, scheduler {run.scheduler_cpu_cores}"
            + ("" if run.router_cpu_cores is None else f", router {run.router_cpu_cores}")
            + ("" if run.haproxy_cpu_cores is None else f", haproxy {run.haproxy_cpu_cores}")
            + f", client {run.client_cpu_cores}"
            + app_text
        )
        self.write()

    def profile(
        self, pids: dict[str, int], variant: str, c: int, k: int
    ) -> contextlib.AbstractContextManager[Any]:
        """py-spy of the serving processes `pids` during this run, at the `--profile-at` levels."""
        if c not in self.args.profile_at:
            return contextlib.nullcontext()
        delay, seconds = self.args.profile_window
        return RunProfile(pids, self.out, f"{variant}-c{c}-r{k}", delay, seconds)

    def plan(self, variants: list[str]) -> list[tuple[int, int, str]]:
        return plan(variants, self.args.concurrency, self.args.repeat, self.args.levels_of)

    def run_app(self, variants: list[str]) -> None:
        """Level by level, every variant at a level before the next level (one app, switched by
        override): a host that drifts or warms up, or a lease that ends mid-sweep, leaves whole
        comparisons rather than one variant's levels. Repeat k starts with the k-th variant
        (`rotated`), so over as many repeats as variants each runs first at a level once and its
        place in the order is not confounded with it. Before the first measured run, one unmeasured
        run warms the app up (see `warm_up`)."""
        session = AppSession(self.args, variants, self.out)
        try:
            if self.args.warmup and variants:
                self.warm_up(session.switch(variants[0]).url, "app")
                settle(self.policy)
            for c, k, v in self.plan(variants):
                served = session.switch(v)
                self.one(served.url, v, c, k, served.referee, served.client, served.lines)
        finally:
            session.close()

    def warm_up(self, url: str, name: str) -> None:
        """`SglangClient.warm_up` at the highest level, for the app and for each raw server alike."""
        a, c = self.args, max(self.args.concurrency)
        took = self.client.warm_up(
            url, c, model=self.model_id, tokenizer=self.tokenizer, random_input_len=a.input_len,
            random_output_len=a.output_len, output_file=str(self.out / f"warmup-{name}.jsonl"), seed=a.seed + 1000,
        )  # fmt: skip
        log(f"{name} warm-up: {2 * c} requests at c={c} in {took:.1f} s (not measured)")

    def run_raw(self, variant: str) -> None:
        from loadtests.rawvsapp.referee import LogReferee

        server, url = self.start_raw(variant)
        self.raw_pid = server.pid
        try:
            if self.args.warmup:
                self.warm_up(url, variant)
            referee = LogReferee(server.log_path)
            for c, k, _ in self.plan([variant]):
                self.one(url, variant, c, k, referee, None, referee)
        finally:
            server.stop()
            self.raw_pid = None

    def start_raw(self, variant: str) -> tuple[Any, str]:
        """SGLang's server for `variant`, answering. A port picked free can be taken before the server
        binds it (its uvicorn then logs the bind error and hangs in shutdown): another port, then."""
        from loadtests.servers import ServerError, ServerProcess
        from loadtests.sweep.launcher import BIND_ATTEMPTS, BIND_FAILED, free_port

        env = {**os.environ, **(CPU_ENV if self.cpu else {})}
        for attempt in range(BIND_ATTEMPTS):
            port = free_port()
            cmd = [sys.executable, "-m", "loadtests.rawvsapp.raw_sglang", "--config", str(self.args.config),
                   "--port", str(port), *RAW_VARIANTS[variant]]  # fmt: skip
            server = ServerProcess(cmd, self.out / f"{variant}.log", env=env, log=log)
            url = f"http://127.0.0.1:{port}"
            try:
                took = server.wait_ready(url + "/v1/models", self.args.ready_timeout, fatal=BIND_FAILED)
            except ServerError:
                server.stop()
                if attempt + 1 == BIND_ATTEMPTS or not any(sign in server.tail(40) for sign in BIND_FAILED):
                    raise
                log(
                    f"{variant}: port {port} was taken before SGLang's server bound it; again on another port"
                )
                continue
            log(f"{variant}: SGLang's server up after {took:.0f} s")
            return server, url
        raise AssertionError("unreachable")

    def write(self) -> None:
        names = [f.name for f in fields(SweepRun)]
        with (self.out / "sweep.csv").open("w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=names)
            w.writeheader()
            w.writerows(asdict(r) for r in self.runs)
        if self.status_rows:
            with (self.out / "status.csv").open("w", newline="") as fh:
                w = csv.DictWriter(fh, fieldnames=list(self.status_rows[0]))
                w.writeheader()
                w.writerows(self.status_rows)
        settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(self.args).items()}
        doc = {"settings": settings, "runs": [asdict(r) for r in self.runs]}
        (self.out / "results.json").write_text(json.dumps(doc, indent=2))


def _round(v: float | None, digits: int = 1) -> float | None:
    return None if v is None else round(v, digits)


def dry_run(args: argparse.Namespace, variants: list[str]) -> str:
    """`--dry-run`: each server and its runs in order with their prompts, then the totals; starts nothing."""
    lines, runs, tokens = [], 0, 0
    for group in servers(variants, APP_VARIANTS):
        order = plan(group, args.concurrency, args.repeat, args.levels_of)
        lines.append(
            f"{'app' if group[0] in APP_VARIANTS else group[0]} ({', '.join(group)}): {len(order)} runs"
        )
        for c, k, v in order:
            n = args.prompts.get(c, c * args.min_waves)
            lines.append(f"  c={c} repeat {k} {v}: {n} prompts")
            runs, tokens = runs + 1, tokens + n * args.output_len
    lines.append(f"{runs} runs, {tokens:,} output tokens")
    return "\n".join(lines) + "\n"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m loadtests.bench.client_sweep",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--config", type=Path, required=True, help="specflip config (its engine args serve all)")
    p.add_argument("--shape", default="tree", help="label of the draft shape in sweep.csv (e.g. tree, chain)")
    p.add_argument(
        "--variants",
        default="dynamic,on,off,raw_eagle,raw_plain",
        help=f"comma list, run in this order: {', '.join([*APP_VARIANTS, *RAW_VARIANTS])}",
    )
    p.add_argument("--concurrency", default="1,16,64,256", help="levels, in this order")
    p.add_argument("--repeat", type=int, default=1, help="client runs per level")
    p.add_argument(
        "--levels-of",
        action="append",
        default=[],
        metavar="VARIANT=C,...",
        help="VARIANT only at these of --concurrency's levels (repeatable; the others run at all)",
    )
    p.add_argument("--prompts", default="", metavar="C=N,...", help="prompts per run at level C")
    p.add_argument("--min-waves", type=int, default=4, help="prompts = C x this, where --prompts is silent")
    p.add_argument("--input-len", type=int, default=64)
    p.add_argument("--output-len", type=int, default=128)
    p.add_argument("--tokenizer", help="tokenizer dir (default: the config's model)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument(
        "--warmup",
        type=int,
        default=1,
        choices=(0, 1),
        help="one unmeasured run at the highest level before the app's and each raw server's first (1)",
    )
    p.add_argument("--ready-timeout", type=float, default=900.0)
    add_app_args(p)
    p.add_argument(
        "--profile-at",
        default="",
        metavar="C,...",
        help="at these levels, py-spy and the CPU of every serving process and the client during each run "
        "(profiles.md and profiles/ in --out; loadtests.bench.sweep_profile)",
    )
    p.add_argument(
        "--profile-window",
        default=f"{DELAY_S:g},{SECONDS:g}",
        metavar="DELAY,SECONDS",
        help="with --profile-at: sample from DELAY s into each run for SECONDS s",
    )
    p.add_argument("--out", type=Path, default=Path("out/client_sweep"))
    p.add_argument("--replot", action="store_true", help="only redraw modes.png from --out's status.csv")
    p.add_argument(
        "--dry-run", action="store_true", help="check the arguments, print the runs in order, start nothing"
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.replot:
        plot_modes(args.out / "status.csv", args.out / "modes.png")
        return 0
    args.concurrency = [int(x) for x in args.concurrency.split(",") if x.strip()]
    args.profile_at = [int(x) for x in args.profile_at.split(",") if x.strip()]
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = set(variants) - set(APP_VARIANTS) - set(RAW_VARIANTS)
    try:
        args.prompts = pairs(args.prompts)
        if stray := sorted(set(args.prompts) - set(args.concurrency)):  # a typo would size nothing
            unknown.add(f"--prompts at {','.join(map(str, stray))}, not a level of --concurrency")
    except ValueError:
        unknown.add(f"--prompts {args.prompts}")
    try:
        delay, seconds = (float(x) for x in args.profile_window.split(","))
        args.profile_window = (delay, seconds)
    except ValueError:
        unknown.add(f"--profile-window {args.profile_window}")
    try:
        args.levels_of = levels_of(args.levels_of, variants, args.concurrency)
    except ValueError as e:
        unknown.add(str(e))
    if unknown or not args.concurrency:
        print(f"client_sweep: unknown {sorted(unknown)} (or no --concurrency)", file=sys.stderr)
        return 2
    app = [v for v in variants if v in APP_VARIANTS]
    if args.dry_run:
        print(dry_run(args, variants), end="")
        return 0
    sweep = Sweep(args)
    started = time.monotonic()
    try:
        for group in servers(variants, APP_VARIANTS):
            if group[0] in APP_VARIANTS:
                sweep.run_app(group)
            else:
                sweep.run_raw(group[0])
    except LauncherError as e:  # the app did not start, or --target does not answer: the runs so far stay
        print(f"client_sweep: {e}", file=sys.stderr)
        return 1
    sweep.write()
    if (args.out / "status.csv").exists():
        try:
            plot_modes(args.out / "status.csv", args.out / "modes.png")
        except ImportError:  # matplotlib comes with the bench extra
            log("no matplotlib: modes.png not drawn")
    log(
        f"done in {time.monotonic() - started:.0f} s ({len(sweep.runs)} runs, app variants {app}): {args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
