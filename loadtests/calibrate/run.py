"""How much streamed output a load generator can take in on this host: its calibrated ceiling.

    python -m loadtests.calibrate --out out/calibration                  # Locust, 1..N processes
    python -m loadtests.calibrate --clients locust,sglang --tokenizer models/tiny/target --out ...

Each client runs against `loadtests.calibrate.nullserver` (no model: every stream gets a chunk every
`--step-ms`, so the offered rate is `concurrency x 1000 / step_ms` chunks/s), for every number
of client processes and concurrency asked. A row says what the client took in (chunks/s, one
token per chunk), the CPU the client and the null server used (cores), and what limited it:
`client` (it took in less than was offered while the null server had CPU to spare), `server`
(the null server was busy: add --server-processes), or `offered` (it kept up: not a ceiling).
A client's ceiling is its best `client`-limited row; `loadtests.sweep` and
`loadtests.rawvsapp` refuse to report a point where the client ran above `--max-load`
(default 0.7) of it. Writes calibration.json and calibration.md into --out.

Clients: `locust` (this package's Locust user, `--processes` worker processes) and `sglang`
(SGLang's own `python -m sglang.benchmark.serving`, a peer's client: N copies side by side,
each at concurrency/N; its throughput is its whole-run average, ramp included).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import resource
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil

from loadtests.locust.config import LoadConfig
from loadtests.locust.run import run_locust
from loadtests.markdown import table as markdown_table
from loadtests.metrics import Slo, summarize
from loadtests.servers import CpuMeter, ServerProcess

__all__ = ["CalibrationRow", "Ceiling", "build_parser", "load_ceiling", "main"]

CLIENTS = ("locust", "sglang")


@dataclass(frozen=True)
class CalibrationRow:
    client: str
    processes: int
    concurrency: int
    offered_chunks_s: float
    chunks_s: float
    tok_s: float
    client_cores: float
    server_cores: float
    limit: str  # client | server | offered


@dataclass(frozen=True)
class Ceiling:
    client: str
    processes: int
    chunks_s: float
    exact: bool  # False: no row was client-limited, the best seen is only a lower bound


def _limit(chunks_s: float, offered: float, server_cores: float, server_procs: int) -> str:
    if server_cores >= 0.8 * server_procs:
        return "server"
    return "offered" if chunks_s >= 0.9 * offered else "client"


def ceilings(rows: list[CalibrationRow]) -> list[Ceiling]:
    out = []
    for key in sorted({(r.client, r.processes) for r in rows}):
        group = [r for r in rows if (r.client, r.processes) == key]
        bound = [r for r in group if r.limit == "client"]
        best = max(bound or group, key=lambda r: r.chunks_s)
        out.append(Ceiling(key[0], key[1], best.chunks_s, exact=bool(bound)))
    return out


def load_ceiling(path: str | Path, client: str, processes: int) -> Ceiling | None:
    """The calibrated ceiling of `client` with `processes` processes (None if not calibrated)."""
    data = json.loads(Path(path).read_text())
    for c in data["ceilings"]:
        if c["client"] == client and c["processes"] == processes:
            return Ceiling(**c)
    return None


def _children_named(word: str) -> list[int]:
    found = []
    for p in psutil.Process().children():
        try:  # a child can exit (or be a zombie) between the listing and the read
            if word in " ".join(p.cmdline()):
                found.append(p.pid)
        except psutil.Error:
            continue
    return found


class _WindowMeter:
    """Starts a CpuMeter `warmup_s` after the first request and stops it `duration_s` later
    (driven by run_locust's progress callback, which sees the records as they arrive)."""

    def __init__(self, meter: CpuMeter, warmup_s: float, duration_s: float) -> None:
        self.meter, self.warmup_s, self.duration_s = meter, warmup_s, duration_s
        self.first: float | None = None
        self.started = False
        self.cores: dict[str, float] = {}

    def __call__(self, now: float, records: list) -> None:  # noqa: ANN001 - RequestRecord list
        if self.first is None and records:
            self.first = min(r.start for r in records)
        if self.first is None or self.cores:
            return
        if not self.started and now >= self.first + self.warmup_s:
            self.meter.start()
            self.started = True
        elif self.started and now >= self.first + self.warmup_s + self.duration_s:
            self.cores = self.meter.stop()


def run_locust_point(
    url: str, server_pid: int, processes: int, c: int, args: argparse.Namespace, out_dir: Path
) -> tuple[float, float, dict[str, float]]:
    cfg = LoadConfig(
        model="null",
        input_len=args.input_len,
        output_len=args.output_len,
        shape=f"fixed:users={c},duration={args.warmup + args.duration + 1}",
        slo_ttft_ms=None,
        slo_tpot_ms=None,
    )
    meter = CpuMeter(lambda: {"client": _children_named("locust"), "server": [server_pid]})
    window = _WindowMeter(meter, args.warmup, args.duration)
    run = run_locust(url, cfg, out_dir, processes=processes, on_progress=window, progress_every=0.25)
    t0 = run.load_start + args.warmup
    s = summarize(run.records, t0, t0 + args.duration, Slo(None, None))
    return s.chunks_s, s.output_tok_s, window.cores


def _reaped_children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def run_sglang_point(
    url: str, server_pid: int, processes: int, c: int, args: argparse.Namespace, out_dir: Path
) -> tuple[float, float, dict[str, float]]:
    out_dir.mkdir(parents=True, exist_ok=True)
    per = max(1, c // processes)
    procs = []
    for i in range(processes):
        cmd = [
            sys.executable, "-m", "sglang.benchmark.serving", "--backend", "sglang-oai", "--base-url", url,
            "--dataset-name", "random-ids", "--random-input-len", str(args.input_len),
            "--random-output-len", str(args.output_len), "--random-range-ratio", "1",
            "--num-prompts", str(per * args.sglang_rounds), "--max-concurrency", str(per),
            "--tokenizer", args.tokenizer, "--output-file", str(out_dir / f"sglang-{i}.jsonl"), "--disable-tqdm",
        ]  # fmt: skip
        log = (out_dir / f"sglang-{i}.log").open("wb")
        procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT))
    # the client's CPU over its whole run, read from the kernel once its processes are reaped
    server = CpuMeter(lambda: {"server": [server_pid]})
    server.start()
    t0, before = time.monotonic(), _reaped_children_cpu()
    codes = [p.wait() for p in procs]
    cpu = {"client": (_reaped_children_cpu() - before) / (time.monotonic() - t0), **server.stop()}
    if any(codes):
        raise RuntimeError(f"sglang.benchmark.serving failed (exit {codes}); see {out_dir}/sglang-*.log")
    results = [
        json.loads((out_dir / f"sglang-{i}.jsonl").read_text().splitlines()[-1]) for i in range(processes)
    ]
    tok_s = sum(r["output_throughput"] for r in results)
    return tok_s, tok_s, cpu


def calibrate(args: argparse.Namespace, log=print) -> dict[str, Any]:  # noqa: ANN001 - log: print-like
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    port = args.port
    url = f"http://127.0.0.1:{port}"
    server = ServerProcess(
        [sys.executable, "-m", "loadtests.calibrate.nullserver", "--port", str(port),
         "--step-ms", str(args.step_ms), "--processes", str(args.server_processes)],
        out / "nullserver.log",
        log=log,
    )  # fmt: skip
    rows: list[CalibrationRow] = []
    try:
        server.wait_ready(url + "/health", 60)
        for client in args.clients:
            for procs in args.processes:
                for c in args.concurrency:
                    if c < procs:
                        continue
                    offered = c * 1000.0 / args.step_ms if args.step_ms > 0 else float("inf")
                    point = out / "runs" / f"{client}-p{procs}-c{c}"
                    log(f"[calibrate] {client} processes={procs} concurrency={c} ...")
                    fn = run_locust_point if client == "locust" else run_sglang_point
                    chunks_s, tok_s, cpu = fn(url, server.pid, procs, c, args, point)
                    s_cores = cpu.get("server", 0.0)
                    row = CalibrationRow(
                        client, procs, c, offered, round(chunks_s, 1), round(tok_s, 1),
                        round(cpu.get("client", 0.0), 2), round(s_cores, 2),
                        _limit(chunks_s, offered, s_cores, args.server_processes),
                    )  # fmt: skip
                    rows.append(row)
                    log(
                        f"[calibrate] {client} p={procs} c={c}: {row.chunks_s:,.0f} chunks/s, "
                        f"client {row.client_cores:.2f} cores, server {row.server_cores:.2f} cores, limit={row.limit}"
                    )
                    write(out, args, rows)
    finally:
        server.stop()
    return write(out, args, rows)


def write(out: Path, args: argparse.Namespace, rows: list[CalibrationRow]) -> dict[str, Any]:
    host = {"node": platform.node(), "cpus": os.cpu_count(), "python": platform.python_version()}
    data: dict[str, Any] = {
        "when": dt.datetime.now().isoformat(timespec="seconds"),
        "host": host,
        "settings": {
            "step_ms": args.step_ms,
            "server_processes": args.server_processes,
            "duration_s": args.duration,
            "output_len": args.output_len,
        },
        "rows": [asdict(r) for r in rows],
        "ceilings": [asdict(c) for c in ceilings(rows)],
    }
    (out / "calibration.json").write_text(json.dumps(data, indent=2))
    table = markdown_table(
        [
            "client",
            "processes",
            "concurrency",
            "offered chunks/s",
            "chunks/s",
            "client cores",
            "server cores",
            "limit",
        ],
        [
            [
                r.client,
                r.processes,
                r.concurrency,
                f"{r.offered_chunks_s:,.0f}",
                f"{r.chunks_s:,.0f}",
                f"{r.client_cores:.2f}",
                f"{r.server_cores:.2f}",
                r.limit,
            ]
            for r in rows
        ],  # fmt: skip
    )
    ceil = markdown_table(
        ["client", "processes", "ceiling chunks/s", "kind"],
        [
            [c.client, c.processes, f"{c.chunks_s:,.0f}", "measured" if c.exact else "lower bound"]
            for c in ceilings(rows)
        ],
    )
    h = host
    (out / "calibration.md").write_text(
        f"# Load-generator calibration\n\n{data['when']} on {h['node']} ({h['cpus']} CPUs, Python {h['python']}); "
        f"null server: {args.server_processes} process(es), a chunk per stream every {args.step_ms:g} ms, "
        f"{args.output_len} tokens per request; {args.duration:g} s measured per row.\n\n"
        f"{table}\n\nCeilings (best client-limited row):\n\n{ceil}\n"
    )
    return data


def _ints(text: str) -> list[int]:
    return sorted({int(x) for x in text.split(",") if x.strip()})


def build_parser() -> argparse.ArgumentParser:
    cpus = os.cpu_count() or 2
    p = argparse.ArgumentParser(
        prog="python -m loadtests.calibrate",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--out", type=Path, default=Path("out/calibration"))
    p.add_argument("--clients", type=lambda s: [c for c in s.split(",") if c], default=["locust"])
    p.add_argument("--processes", type=_ints, default=[n for n in (1, 2, 4, 8) if n <= max(1, cpus // 2)])
    p.add_argument("--concurrency", type=_ints, default=[64, 256])
    p.add_argument("--duration", type=float, default=15.0, help="measured seconds per row")
    p.add_argument("--warmup", type=float, default=3.0)
    p.add_argument("--step-ms", type=float, default=1.0, help="null server: ms between chunks of a stream")
    p.add_argument("--server-processes", type=int, default=max(1, min(8, cpus // 4)))
    p.add_argument("--port", type=int, default=8199)
    p.add_argument("--input-len", type=int, default=128)
    p.add_argument("--output-len", type=int, default=256)
    p.add_argument("--tokenizer", default="", help="tokenizer dir for the sglang client's random-ids prompts")
    p.add_argument("--sglang-rounds", type=int, default=8, help="sglang client: requests per concurrent slot")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    unknown = [c for c in args.clients if c not in CLIENTS]
    if unknown:
        print(f"calibrate: unknown client(s) {unknown}; choose from {', '.join(CLIENTS)}", file=sys.stderr)
        return 2
    if "sglang" in args.clients and not args.tokenizer:
        print("calibrate: the sglang client needs --tokenizer (a tokenizer directory)", file=sys.stderr)
        return 2
    data = calibrate(args)
    print((args.out / "calibration.md").read_text())
    return 0 if data["rows"] else 1


if __name__ == "__main__":
    sys.exit(main())
