"""SGLang's own server vs the specflip app: same engine arguments, same client, same host, one run.

    python -m loadtests.rawvsapp --config deployments/examples/h200-dummy8b-1replica.yaml \\
        --speculation off,on --concurrency 1,8,32,64,128,256 --stream both --duration 20 \\
        --locust-processes 8 --calibration out/calibration/calibration.json --profile-at 128 \\
        --out out/rawvsapp

Each app variant (`--app NAME=CONFIG`, default the --config itself: `specflip serve`, the
config's replicas; speculation set by operator override) serves every point, then, for each
speculation mode, SGLang's `launch_server` with the replica's engine arguments
(`loadtests.raw_sglang`; plain engine for `off`, EAGLE-3 for `on`) serves the same points, with
the same Locust client. Apps go first so that on a fresh host any kernel compiled on first use
lands in an app replica's warm-up, where a first-token stall would show. A point is a fixed number of users
sending back to back for `--warmup` + `--duration` seconds; only requests that complete
inside the measured window count. With `--calibration`, a point whose client took in more
than `--max-load` of its calibrated ceiling (chunks/s) is marked client-bound and left out of
the comparison. With `--profile-at C`, the streaming point at concurrency C is also profiled
(py-spy, every process on the serving path and the client; `loadtests.profiles`).
Writes results.json and report.md (`loadtests.rawvsapp_report`) into --out after every point.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from deployments.client import SpecflipClient
from loadtests.calibrate import load_ceiling
from loadtests.config import LoadConfig
from loadtests.launcher import CommandLauncher, Variant, VariantSpec, free_port
from loadtests.locust_run import run_locust
from loadtests.metrics import Slo, summarize
from loadtests.profiles import ProcessProfile, profiles_markdown, record, serving_processes
from loadtests.rawvsapp_report import write_report
from loadtests.servers import ServerError, ServerProcess

__all__ = ["Point", "build_parser", "main"]

_BIND_FAILED = "error while attempting to bind"
CPU_ENV = {"SPECFLIP_CPU": "1", "SGLANG_USE_CPU_ENGINE": "1", "TORCHDYNAMO_DISABLE": "1"}


@dataclass(frozen=True)
class Point:
    """One measured point of one target."""

    target: str  # raw, or the name of an app variant
    replicas: int  # engines behind the target (raw: 1)
    speculation: str  # on | off
    stream: bool
    concurrency: int
    requests: int
    errors: int
    duration_s: float
    output_tok_s: float
    req_s: float
    chunks_s: float
    client_load: float | None  # chunks/s over the client's calibrated ceiling (streaming only)
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    tpot_p50_ms: float | None
    itl_p99_ms: float | None
    e2e_p50_ms: float | None


class _Profiler:
    """Called by run_locust while a point runs: profiles once, `warmup_s` after the first request."""

    def __init__(self, pids: dict[str, int], warmup_s: float, seconds: float, out_dir: Path) -> None:
        self.pids, self.warmup_s, self.seconds, self.out_dir = pids, warmup_s, seconds, out_dir
        self.first: float | None = None
        self.thread: threading.Thread | None = None
        self.result: list[ProcessProfile] = []

    def __call__(self, now: float, records: list) -> None:  # noqa: ANN001 - RequestRecord list
        if self.first is None and records:
            self.first = min(r.start for r in records)
        if self.thread is None and self.first is not None and now >= self.first + self.warmup_s:
            pids = {**self.pids, **_locust_pids()}

            def run() -> None:
                self.result = record(pids, self.seconds, self.out_dir)

            self.thread = threading.Thread(target=run, daemon=True)
            self.thread.start()

    def finish(self) -> list[ProcessProfile]:
        if self.thread is not None:
            self.thread.join()
        return self.result


def _locust_pids() -> dict[str, int]:
    import psutil

    found = {}
    for i, p in enumerate(
        p for p in psutil.Process().children(recursive=True) if "locust" in " ".join(p.cmdline())
    ):
        found[f"client-{i}"] = p.pid
    return found


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.out: Path = args.out
        self.points: list[Point] = []
        self.profiles: list[str] = []
        self.notes: list[str] = []
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

    def measure(
        self, url: str, target: str, spec: str, server_pids: dict[str, int], replicas: int = 1
    ) -> None:
        a = self.args
        levels = a.app_levels.get(target) or (a.concurrency_on if spec == "on" else a.concurrency)
        for stream in a.streams:
            for c in levels:
                label = f"{target} speculation={spec} {'stream' if stream else 'plain'} c={c}"
                self.log(f"[rawvsapp] {label} ...")
                cfg = LoadConfig(
                    api=a.api, input_len=a.input_len, output_len=a.output_len, stream=stream,
                    shape=f"fixed:users={c},duration={a.warmup + a.duration + 1}", slo_ttft_ms=None, slo_tpot_ms=None,
                )  # fmt: skip
                run_dir = self.out / "runs" / f"{target}-{spec}-{'s' if stream else 'n'}-c{c}"
                profiler = None
                if stream and c == a.profile_at:
                    seconds = max(2.0, min(10.0, a.duration - 2))
                    profiler = _Profiler(
                        server_pids, a.warmup, seconds, self.out / "profiles" / f"{target}-{spec}"
                    )
                run = run_locust(
                    url, cfg, run_dir, processes=a.locust_processes, on_progress=profiler, progress_every=0.5
                )
                t0 = run.load_start + a.warmup
                s = summarize(run.records, t0, t0 + a.duration, Slo(None, None))
                load = s.chunks_s / self.ceiling.chunks_s if (stream and self.ceiling) else None
                point = Point(
                    target, replicas, spec, stream, c, s.requests, s.errors, s.duration_s, s.output_tok_s, s.req_s, s.chunks_s,
                    load, s.ttft_p50_ms, s.ttft_p99_ms, s.tpot_p50_ms, s.itl_p99_ms, s.e2e_p50_ms,
                )  # fmt: skip
                self.points.append(point)
                self.log(
                    f"[rawvsapp] {label}: {s.output_tok_s:,.0f} tok/s, {s.requests} requests ({s.errors} errors), "
                    f"TTFT p50 {s.ttft_p50_ms or 0:.1f} ms, TPOT p50 {s.tpot_p50_ms or 0:.2f} ms"
                    + (f", client at {load:.0%} of its ceiling" if load is not None else "")
                )
                if profiler is not None:
                    title = f"{target}, speculation {spec}, c={c} (streaming)"
                    self.profiles.append(profiles_markdown(title, profiler.finish(), profiler.seconds))
                self.write()

    def run_raw(self, spec: str, attempts: int = 2) -> None:
        a = self.args
        env = {**os.environ, **(CPU_ENV if a.cpu else {})}
        for attempt in range(attempts):
            port = free_port()  # another process can take it before SGLang binds: then a new one
            cmd = [sys.executable, "-m", "loadtests.raw_sglang", "--config", str(a.config), "--port", str(port),
                   "--speculation", spec, *a.raw_args]  # fmt: skip
            server = ServerProcess(cmd, self.out / f"raw-{spec}.log", env=env, log=self.log)
            try:
                url = f"http://127.0.0.1:{port}"
                try:
                    took = server.wait_ready(url + "/v1/models", a.ready_timeout, fatal=(_BIND_FAILED,))
                except ServerError:
                    if _BIND_FAILED in server.tail() and attempt + 1 < attempts:
                        continue
                    raise
                with SpecflipClient(url, timeout=60) as client:
                    client.probe(_model_id(a.config), api=a.api)
                self.log(f"[rawvsapp] raw SGLang server up in {took:.0f} s (speculation {spec})")
                self.measure(url, "raw", spec, serving_processes("raw", server.pid))
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
                app_pid = launcher.proc.pid if launcher.proc is not None else None
                self.measure(url, name, s, serving_processes("app", app_pid), replicas)
        finally:
            launcher.stop()

    def write(self) -> None:
        data = {
            "when": dt.datetime.now().isoformat(timespec="seconds"),
            "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(self.args).items()},
            "ceiling_chunks_s": self.ceiling.chunks_s if self.ceiling else None,
            "points": [asdict(p) for p in self.points],
        }
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "results.json").write_text(json.dumps(data, indent=2))
        write_report(self.out / "report.md", data, self.profiles, self.notes, self.args.max_load)


def _levels(text: str) -> list[int]:
    return sorted({int(x) for x in text.split(",") if x.strip()})


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
    p.add_argument("--stream", choices=["yes", "no", "both"], default="both")
    p.add_argument("--duration", type=float, default=20.0, help="measured seconds per point")
    p.add_argument("--warmup", type=float, default=5.0)
    p.add_argument("--api", choices=["chat", "completions"], default="chat")
    p.add_argument("--input-len", type=int, default=128)
    p.add_argument("--output-len", type=int, default=128)
    p.add_argument("--locust-processes", type=int, default=1)
    p.add_argument("--calibration", type=Path, help="calibration.json of loadtests.calibrate on this host")
    p.add_argument(
        "--max-load", type=float, default=0.7, help="largest client load (of its ceiling) reported"
    )
    p.add_argument("--profile-at", type=int, help="profile the streaming point at this concurrency (py-spy)")
    p.add_argument("--ready-timeout", type=float, default=900.0)
    p.add_argument("--raw-arg", dest="raw_args", action="append", default=[], help="extra launch_server flag")
    p.add_argument("--out", type=Path, default=Path("out/rawvsapp"))
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.concurrency = _levels(args.concurrency)
    args.concurrency_on = _levels(args.concurrency_on) if args.concurrency_on else args.concurrency
    args.app_levels = {n.strip(): _levels(v) for n, _, v in (x.partition("=") for x in args.app_concurrency)}
    args.streams = {"yes": [True], "no": [False], "both": [True, False]}[args.stream]
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
    for name, config in apps:
        bench.run_app(name, config, specs)
    if args.reuse_raw:
        earlier = json.loads(args.reuse_raw.read_text())["points"]
        bench.points += [Point(**p) for p in earlier if p["target"] == "raw"]
        bench.notes.append(f"raw points reused from {args.reuse_raw} (same host, earlier in the run)")
    elif not args.no_raw:
        for s in specs:
            bench.run_raw(s)
    bench.write()
    print(f"[rawvsapp] done in {time.monotonic() - started:.0f} s: {args.out / 'report.md'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
