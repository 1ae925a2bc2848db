"""SGLang's own server vs the specflip app: same engine arguments, same client, same host, one run.

    python -m loadtests.rawvsapp --config deployments/examples/h200-dummy8b-1replica.yaml \
        --speculation off,on --concurrency 1,32,64,128,256 --repeat 128=3,256=3 --window 20 \
        --stream yes --plain-concurrency 128,256 --locust-processes 8 --output-spread 0.5 \
        --sglang-client 128,256 --calibration out/calibration/calibration.json --profile-at 128 \
        --out out/rawvsapp

Each app variant (`--app NAME=CONFIG`, default the --config itself: `specflip serve`, the
config's replicas; speculation set by operator override) is measured, then, for each speculation
mode, SGLang's `launch_server` with the replica's engine arguments (`loadtests.rawvsapp.raw_sglang`; plain
engine for `off`, EAGLE-3 for `on`), with the same Locust client. Apps go first so that on a fresh
host any kernel compiled on first use lands in an app replica's warm-up.

One Locust run per (target, mode, streaming) steps through the concurrency levels: each level
runs `--settle` seconds, then `--window` seconds per measured window (`--repeat C=N`: N
consecutive windows at level C). A window counts the output tokens that arrived inside it
(`loadtests.metrics`: by chunk arrival, not by request completion, which quantizes into waves);
output lengths are drawn from `--output-len` x [1 - s, 1 + s] (`--output-spread`) and users start
`--stagger` seconds apart at most, so they do not run in lockstep. Every window also gets the
engine's own decode tok/s (`loadtests.rawvsapp.referee`: SGLang's scheduler log for raw, the replicas'
`decode_tokens` for the app) as referee. `--sglang-client C,...`: SGLang's own benchmark client
(`python -m sglang.benchmark.serving`) against the plain raw server at those levels too, with the
referee over its run. With `--calibration`, a point whose client took in more than `--max-load`
of its calibrated ceiling (chunks/s) is marked client-bound. With `--profile-at C,...`, the first
streaming window at level C is profiled (py-spy, every process on the serving path and the
client; `loadtests.rawvsapp.profiles`). Writes results.json and report.md (`loadtests.rawvsapp.report`)
into --out after every run.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from deployments.client import SpecflipClient
from deployments.config import CPU_ENV
from loadtests.calibrate.run import load_ceiling
from loadtests.locust.config import LoadConfig
from loadtests.locust.run import run_locust
from loadtests.metrics import Slo, Summary, summarize
from loadtests.rawvsapp.profiles import RunProfiler, profiles_markdown, serving_processes
from loadtests.rawvsapp.referee import LogReferee, StatusReferee, replica_log_paths
from loadtests.rawvsapp.report import write_report
from loadtests.rawvsapp.sglang_client import ClientRun, run_sglang_client
from loadtests.servers import ServerError, ServerProcess
from loadtests.sweep.launcher import CommandLauncher, Variant, VariantSpec, free_port

__all__ = ["Point", "build_parser", "main"]

_BIND_FAILED = "error while attempting to bind"


@dataclass(frozen=True, kw_only=True)
class Point(Summary):
    """One measured window of one target: its summary, with what it was measured on."""

    target: str  # raw, or the name of an app variant
    replicas: int  # engines behind the target (raw: 1)
    speculation: str  # on | off
    stream: bool
    concurrency: int
    client_load: float | None  # chunks/s over the client's calibrated ceiling (streaming only)
    repeat: int = 0  # which consecutive window at this level (0, 1, ...)
    engine_tok_s: float | None = None  # the engine's own decode tok/s over the window (the referee)
    window_start: float = 0.0  # epoch seconds
    engine_prompt_tokens: float | None = None  # prompt tokens per new request, as the engine saw them
    engine_running: float | None = None  # mean requests running in the engine over the window
    engine_queued: float | None = None  # mean requests waiting in the engine's queue (its log lines)
    engine_log_tok_s: float | None = None  # the engine log's decode tok/s (the app: a second referee)


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.out: Path = args.out
        self.points: list[Point] = []
        self.profiles: list[str] = []
        self.notes: list[str] = []
        self.client_runs: list[ClientRun] = []
        self.ceiling = None
        if args.calibration:
            self.ceiling = load_ceiling(args.calibration, "locust", args.locust_processes)
            if self.ceiling is None:
                self.notes.append(
                    f"{args.calibration} has no ceiling for Locust with {args.locust_processes} process(es): "
                    "client load not checked"
                )

    def log(self, line: str) -> None:
        print(line, flush=True)

    def levels_for(self, target: str, spec: str, stream: bool) -> list[int]:
        a = self.args
        if not stream:
            return a.plain_concurrency if spec in a.plain_speculation else []
        return a.app_levels.get(target) or (a.concurrency_on if spec == "on" else a.concurrency)

    def measure(
        self, url: str, target: str, spec: str, server_pids: dict[str, int], referee: Any, replicas: int = 1,
        engine_log: LogReferee | None = None,
    ) -> None:  # fmt: skip
        """One Locust run per streaming mode through every level; a Point per measured window."""
        a = self.args
        for stream in a.streams:
            levels = self.levels_for(target, spec, stream)
            if not levels:
                continue
            repeats = [a.repeats.get(c, 1) for c in levels]
            lengths = [a.settle + a.window * n for n in repeats]
            label = f"{target} speculation={spec} {'stream' if stream else 'plain'}"
            self.log(f"[rawvsapp] {label} c={'/'.join(map(str, levels))} ({sum(lengths):.0f} s) ...")
            steps = "/".join(map(str, levels))
            cfg = LoadConfig(
                api=a.api, input_len=a.input_len, output_len=a.output_len, output_spread=a.output_spread,
                start_stagger_s=a.stagger, stream=stream, slo_ttft_ms=None, slo_tpot_ms=None,
                shape=f"steps:users={steps},step={'/'.join(f'{x:g}' for x in lengths)}",
            )  # fmt: skip
            cfg = cfg.replace(shape=cfg.shape + f",spawn_rate={max(levels)}")
            run_dir = self.out / "runs" / f"{target}-{spec}-{'s' if stream else 'n'}"
            profilers: dict[int, RunProfiler] = {}
            for c in a.profile_at if stream else []:
                if c in levels:
                    at = sum(lengths[: levels.index(c)]) + a.settle
                    seconds = max(2.0, min(10.0, a.window - 2))
                    out_dir = self.out / "profiles" / f"{target}-{spec}-c{c}"
                    profilers[c] = RunProfiler(server_pids, at, seconds, out_dir)

            run = run_locust(
                url, cfg, run_dir, processes=a.locust_processes, on_progress=_each(list(profilers.values())),
                progress_every=0.5,
            )  # fmt: skip
            level_start = run.t0
            for c, n, length in zip(levels, repeats, lengths, strict=True):
                for k in range(n):
                    w0 = level_start + a.settle + k * a.window
                    self.add_point(run.records, target, replicas, spec, stream, c, k, w0, referee, engine_log)
                level_start += length
            for c, profiler in profilers.items():
                title = f"{target}, speculation {spec}, c={c} (streaming)"
                self.profiles.append(profiles_markdown(title, profiler.finish(), profiler.seconds))
            self.write()

    def add_point(
        self, records: list, target: str, replicas: int, spec: str, stream: bool, c: int, k: int,
        w0: float, referee: Any, engine_log: LogReferee | None = None,
    ) -> None:  # fmt: skip
        """One window; `engine_log` (the engine's scheduler log, when it logs) gives the batch and queue."""
        a = self.args
        w1 = w0 + a.window
        s = summarize(records, w0, w0 + a.window, Slo(None, None))
        load = s.chunks_s / self.ceiling.chunks_s if (stream and self.ceiling) else None
        engine = referee.rate(w0, w0 + a.window) if referee is not None else None
        point = Point(
            **asdict(s), target=target, replicas=replicas, speculation=spec, stream=stream, concurrency=c,
            client_load=load, repeat=k, engine_tok_s=engine, window_start=w0,
            engine_prompt_tokens=referee.prompt_tokens(w0, w0 + a.window) if referee is not None else None,
            engine_running=(engine_log or referee).running(w0, w1) if (engine_log or referee) else None,
            engine_queued=engine_log.queued(w0, w1) if engine_log is not None else None,
            engine_log_tok_s=engine_log.rate(w0, w1) if engine_log is not None else None,
        )  # fmt: skip
        self.points.append(point)
        self.log(
            f"[rawvsapp] {target} speculation={spec} {'stream' if stream else 'plain'} c={c} window {k}: "
            f"{s.output_tok_s:,.0f} tok/s (engine {engine or 0:,.0f}, batch {point.engine_running or 0:.0f}, "
            f"queue {point.engine_queued or 0:.1f}), {s.requests} requests done "
            f"({s.errors} errors), TTFT p50 {s.ttft_p50_ms or 0:.1f} ms, TPOT p50 {s.tpot_p50_ms or 0:.2f} ms"
            + (f", client at {load:.0%} of its ceiling" if load is not None else "")
        )

    def run_sglang_client(self, url: str, referee: LogReferee) -> None:
        """SGLang's own benchmark client against the raw server at each `--sglang-client` level."""
        a = self.args
        for c in a.sglang_client:
            self.log(f"[rawvsapp] SGLang's client c={c} ...")
            run = run_sglang_client(
                url, referee, c, input_len=a.input_len, output_len=a.output_len, spread=a.output_spread,
                window=a.window, tokenizer=a.tokenizer or _model_path(a.config), model_id=_model_id(a.config),
                out=self.out,
            )  # fmt: skip
            if isinstance(run, str):
                self.notes.append(run)
                continue
            self.client_runs.append(run)
            self.log(
                f"[rawvsapp] SGLang's client c={c}: {run.output_tok_s:,.0f} tok/s (engine {run.engine_tok_s or 0:,.0f}) "
                f"over {run.duration_s:.1f} s ({run.prompts} requests), TPOT p50 {run.tpot_p50_ms or 0:.2f} ms, "
                f"prompts of {run.engine_prompt_tokens or 0:.0f} tokens at the engine"
            )
            self.write()

    def start_raw(self, spec: str) -> tuple[ServerProcess, str]:
        """SGLang's own server for `spec`, started (not yet ready)."""
        a = self.args
        env = {**os.environ, **(CPU_ENV if a.cpu else {})}
        port = free_port()  # another process can take it before SGLang binds: run_raw starts again
        cmd = [sys.executable, "-m", "loadtests.rawvsapp.raw_sglang", "--config", str(a.config),
               "--port", str(port), "--speculation", spec, *a.raw_args]  # fmt: skip
        return ServerProcess(
            cmd, self.out / f"raw-{spec}.log", env=env, log=self.log
        ), f"http://127.0.0.1:{port}"

    def run_raw(self, spec: str, started: tuple[ServerProcess, str] | None = None, attempts: int = 2) -> None:
        a = self.args
        for attempt in range(attempts):
            server, url = started if started is not None and attempt == 0 else self.start_raw(spec)
            try:
                try:
                    took = server.wait_ready(url + "/v1/models", a.ready_timeout, fatal=(_BIND_FAILED,))
                except ServerError:
                    if _BIND_FAILED in server.tail() and attempt + 1 < attempts:
                        continue
                    raise
                with SpecflipClient(url, timeout=60) as client:
                    client.probe(_model_id(a.config), api=a.api)
                self.log(f"[rawvsapp] raw SGLang server up ({took:.0f} s waited, speculation {spec})")
                referee = LogReferee(server.log_path)
                self.measure(
                    url, "raw", spec, serving_processes("raw", server.pid), referee, engine_log=referee
                )
                if spec == "off" and a.sglang_client:
                    self.run_sglang_client(url, referee)
                return
            finally:
                server.stop()

    def run_app(self, name: str, config: Path, specs: list[str]) -> None:
        from deployments.config import load_config

        a = self.args
        replicas = load_config(str(config)).replicas.count
        token = os.environ.get("SPECFLIP_CONTROL_TOKEN") or "rawvsapp"
        variant_specs = {
            Variant(s): VariantSpec(Variant(s), str(config), s, f"speculation {s} by override") for s in specs
        }
        env = {**os.environ, "SPECFLIP_CONTROL_TOKEN": token}
        launcher = CommandLauncher(
            f"{sys.executable} -m deployments serve --config {{config}} --port {{port}}",
            token=token, specs=variant_specs, ready_timeout=a.ready_timeout, log_dir=self.out / name, env=env, log=self.log,
        )  # fmt: skip
        try:
            for s in specs:
                url = launcher.start(Variant(s))
                with SpecflipClient(url, timeout=60) as client:  # one request of the measured kind first
                    client.probe(_model_id(a.config), api=a.api)
                app_pid = launcher.proc.pid if launcher.proc is not None else None
                referee = StatusReferee(url)
                pids = serving_processes("app", app_pid)
                # the replica's engine logs its decode lines into Ray's worker logs when the config's
                # engine `log_level` is info (as SGLang's own server does): batch and queue from there
                logs = replica_log_paths(pids.get("replica")) if replicas == 1 else []
                try:
                    self.measure(url, name, s, pids, referee, replicas, LogReferee(logs) if logs else None)
                finally:
                    referee.close()
        finally:
            launcher.stop()

    def write(self) -> None:
        data = {
            "when": dt.datetime.now().isoformat(timespec="seconds"),
            "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(self.args).items()},
            "ceiling_chunks_s": self.ceiling.chunks_s if self.ceiling else None,
            "points": [asdict(p) for p in self.points],
            "client_runs": [asdict(r) for r in self.client_runs],
        }
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "results.json").write_text(json.dumps(data, indent=2))
        write_report(self.out / "report.md", data, self.profiles, self.notes, self.args.max_load)


def _each(callbacks: list[RunProfiler]) -> Any:
    """One progress callback calling each of `callbacks`."""

    def call(now: float, records: list) -> None:
        for callback in callbacks:
            callback(now, records)

    return call


def _levels(text: str) -> list[int]:
    return sorted({int(x) for x in text.split(",") if x.strip()})


def _model_path(config: Path) -> str:
    from deployments.config import load_config

    c = load_config(str(config))
    return c.model.tokenizer_path or c.model.path


def _model_id(config: Path) -> str:
    from deployments.config import load_config

    return load_config(str(config)).model.id


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m loadtests.rawvsapp",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--config", type=Path, required=True, help="specflip config (its engine args serve both)")
    p.add_argument("--speculation", default="off,on", help="comma list of off,on")
    p.add_argument("--no-raw", action="store_true", help="skip SGLang's own server")
    p.add_argument("--no-app", action="store_true", help="skip the app variants (raw servers only)")
    p.add_argument(
        "--merge",
        type=Path,
        help="results.json of an earlier run on this host: all its points join this one's",
    )
    p.add_argument(
        "--app",
        action="append",
        default=[],
        metavar="NAME=CONFIG",
        help="an app variant to measure (repeatable; default: app=--config), e.g. direct=cfg-direct.yaml",
    )
    p.add_argument("--concurrency", default="1,8,32,64,128,256")
    p.add_argument("--concurrency-on", help="levels for speculation on (default: --concurrency)")
    p.add_argument(
        "--app-concurrency",
        action="append",
        default=[],
        metavar="NAME=LIST",
        help="levels for one app variant (default: the mode's levels), e.g. two=256",
    )
    p.add_argument(
        "--reuse-raw", type=Path, help="results.json of an earlier run on this host: its raw points"
    )
    p.add_argument("--stream", choices=["yes", "no", "both"], default="yes")
    p.add_argument(
        "--plain-concurrency", default="", help="levels of the not-streamed runs (--stream no/both)"
    )
    p.add_argument(
        "--plain-speculation", default="off,on", help="modes of the not-streamed runs (comma list)"
    )
    p.add_argument("--window", type=float, default=20.0, help="measured seconds per window")
    p.add_argument("--settle", type=float, default=4.0, help="seconds at a level before its first window")
    p.add_argument(
        "--repeat", default="", metavar="C=N,...", help="N consecutive windows at level C (default 1)"
    )
    p.add_argument("--api", choices=["chat", "completions"], default="chat")
    p.add_argument("--input-len", type=int, default=128)
    p.add_argument("--output-len", type=int, default=128, help="mean max_tokens per request")
    p.add_argument(
        "--output-spread", type=float, default=0.5, help="max_tokens uniform in output-len x [1-s, 1+s]"
    )
    p.add_argument("--stagger", type=float, default=2.0, help="users start up to this many s apart")
    p.add_argument(
        "--sglang-client", default="", help="levels for SGLang's own client on the plain raw server"
    )
    p.add_argument("--tokenizer", help="tokenizer dir for SGLang's client (default: the model's)")
    p.add_argument("--locust-processes", type=int, default=1)
    p.add_argument("--calibration", type=Path, help="calibration.json of loadtests.calibrate on this host")
    p.add_argument(
        "--max-load", type=float, default=0.7, help="largest client load (of its ceiling) reported"
    )
    p.add_argument(
        "--profile-at",
        default="",
        help="profile the streaming points at these concurrencies (py-spy), e.g. 128,256",
    )
    p.add_argument("--ready-timeout", type=float, default=900.0)
    p.add_argument(
        "--start-raw-early",
        action="store_true",
        help="start the raw servers together with the first app (they idle until measured; the "
        "config's mem_fraction_static must leave room for all of them on the device)",
    )
    p.add_argument("--raw-arg", dest="raw_args", action="append", default=[], help="extra launch_server flag")
    p.add_argument("--out", type=Path, default=Path("out/rawvsapp"))
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.concurrency = _levels(args.concurrency)
    args.concurrency_on = _levels(args.concurrency_on) if args.concurrency_on else args.concurrency
    args.app_levels = {n.strip(): _levels(v) for n, _, v in (x.partition("=") for x in args.app_concurrency)}
    args.streams = {"yes": [True], "no": [False], "both": [True, False]}[args.stream]
    args.plain_concurrency = _levels(args.plain_concurrency) if args.plain_concurrency else args.concurrency
    args.sglang_client = _levels(args.sglang_client)
    args.profile_at = _levels(args.profile_at)
    args.plain_speculation = [x for x in args.plain_speculation.split(",") if x]
    try:
        args.repeats = {int(c): int(n) for c, _, n in (x.partition("=") for x in args.repeat.split(",") if x)}
    except ValueError:
        print("rawvsapp: --repeat takes C=N,... (e.g. 128=3,256=3)", file=sys.stderr)
        return 2
    specs = [s for s in args.speculation.split(",") if s]
    apps = [(n.strip(), Path(p.strip())) for n, _, p in (a.partition("=") for a in args.app)]
    if not args.app:
        apps = [("app", args.config)]
    if set(specs) - {"on", "off"} or any(not n or n == "raw" or not str(p) for n, p in apps):
        print(
            "rawvsapp: --speculation takes on,off; --app takes NAME=CONFIG (NAME not 'raw')", file=sys.stderr
        )
        return 2
    from deployments.config import Device, load_config

    args.cpu = load_config(str(args.config)).engine.device is Device.CPU
    bench = Bench(args)
    started = time.monotonic()
    # the app variants first: on a fresh host the first server compiles kernels on first use, and a
    # replica's warm-up must absorb that before its first measured point (the raw server gets its own
    # warm-up request either way)
    # raw servers started now start beside the apps (a fresh host compiles kernels once, under
    # file locks, for all of them); they idle, holding their GPU memory, until their turn
    early = {s: bench.start_raw(s) for s in specs} if args.start_raw_early and not args.no_raw else {}
    if early:
        bench.notes.append(
            "the raw servers were started with the app and idled beside it (GPU memory held, no "
            "requests) until measured; each engine has the config's mem_fraction_static"
        )
    try:
        for name, config in [] if args.no_app else apps:
            bench.run_app(name, config, specs)
    except BaseException:
        for server, _ in early.values():
            server.stop()
        raise
    if args.merge:  # points (and client runs) of an earlier run on this host, e.g. its apps
        earlier = json.loads(args.merge.read_text())
        bench.points[:0] = [Point.from_dict(p) for p in earlier["points"]]
        bench.client_runs[:0] = [ClientRun(**r) for r in earlier.get("client_runs", [])]
        bench.notes.append(f"points of {args.merge} (same host, earlier in the run) merged in")
    if args.reuse_raw:
        earlier = json.loads(args.reuse_raw.read_text())["points"]
        bench.points += [Point.from_dict(p) for p in earlier if p["target"] == "raw"]
        bench.notes.append(f"raw points reused from {args.reuse_raw} (same host, earlier in the run)")
    elif not args.no_raw:
        for s in specs:
            bench.run_raw(s, early.get(s))
    bench.write()
    print(f"[rawvsapp] done in {time.monotonic() - started:.0f} s: {args.out / 'report.md'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
