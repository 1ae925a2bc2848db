"""The worst body under the default caps, alone and many at once, with normal requests meanwhile.

    python -m loadtests.bench.worst_body [--at-once 16] [--clients 2] [--out out/worst_body] [--doc docs/benchmarks.md]

The body: `/v1/completions` with `prompt` = 64 x `"a " * 32500` (4.16 MB of text: within
`serve.max_prompts` 64, `serve.max_input_bytes` 4 MiB and the per-prompt size bound, yet 32,501
tokens a prompt against a context of 2,048). Before the bounded tokenization a replica tokenized all 2.1 M tokens
of it before refusing it: 2 s alone, 20-75 s several at once, state probes and health checks
missed, and Serve restarting replicas under 16 at once.

On the CPU app (2 replicas of the tiny pair, the default caps), `--clients` closed-loop clients
send normal streamed completions the whole time; the phases: a quiet baseline, one worst body,
then `--at-once` worst bodies at once, then a quiet tail. Reports (worst_body.json and
worst_body.md in --out; the `## worst body under the caps` section of --doc): each worst body's
status and latency; normal requests per phase (count, lost, p50/p99 latency); the replica
processes at the start and at the end (a restarted replica is a new process) and the engines'
control timeouts (a state read or a switch the engine did not answer in time).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import psutil

from loadtests.locust.hosts import HostBoundUrls
from loadtests.markdown import table, write_section

__all__ = ["main", "worst_body"]

_REPLICA_TITLE = "ray::ServeReplica:specflip:SpecFlipServer"
_BEFORE = (
    "before (the same body on 2512a81, tokenized whole before the engine refused it): "
    "2 s alone, 20-75 s several at once, state probes missed; 16 at once: Serve restarted 3 replicas "
    "in ~5 min, 2 of 1,438 normal requests lost, others waited up to 40 s"
)
_PROMPTS = ("def add(a, b):", "class Stack:", "import os\n\ndef", "for i in range(", "return self.")


def worst_body(model: str = "specflip-tiny") -> bytes:
    """64 prompts of 65,000 bytes each, 32,501 tokens each: under every cap, over the context."""
    return json.dumps({"model": model, "prompt": ["a " * 32500] * 64, "max_tokens": 4}).encode()


def _replica_pids() -> set[int]:
    """The replica processes of the app this process started (Ray runs under it)."""
    pids = set()
    for p in psutil.Process().children(recursive=True):
        try:
            if " ".join(p.cmdline()).startswith(_REPLICA_TITLE):
                pids.add(p.pid)
        except psutil.Error:
            continue
    return pids


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class _Normal:
    """Closed-loop clients of normal streamed completions; each result tagged with the phase it started in."""

    def __init__(self, base: str, clients: int, max_tokens: int) -> None:
        self.urls, self.clients, self.max_tokens = HostBoundUrls(base), clients, max_tokens
        self.phase = "baseline"
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.results: list[tuple[str, float, str | None]] = []  # (phase, seconds, problem)

    def client(self, i: int) -> None:
        with httpx.Client(timeout=300) as http:
            n = 0
            while not self.stop.is_set():
                body = {
                    "model": "specflip-tiny",
                    "prompt": _PROMPTS[(i + n) % len(_PROMPTS)],
                    "max_tokens": self.max_tokens,
                    "temperature": 0,
                    "ignore_eos": True,
                    "stream": True,
                }
                n += 1
                phase, started = self.phase, time.monotonic()
                problem = _stream(http, self.urls.url("/v1/completions"), body)
                with self.lock:
                    self.results.append((phase, time.monotonic() - started, problem))


def _stream(http: httpx.Client, url: str, body: dict[str, Any]) -> str | None:
    try:
        with http.stream("POST", url, json=body) as r:
            if r.status_code != 200:
                return f"HTTP {r.status_code}"
            done = any(line == "data: [DONE]" for line in r.iter_lines())
            return None if done else "stream without [DONE]"
    except httpx.HTTPError as err:
        return f"{type(err).__name__}: {err}"


def _send_worst(base: str, body: bytes) -> dict[str, Any]:
    started = time.monotonic()
    try:
        with httpx.Client(timeout=600) as http:
            r = http.post(
                HostBoundUrls(base).url("/v1/completions"),
                content=body,
                headers={"Content-Type": "application/json"},
            )
        status, message = r.status_code, r.text[:300]
    except httpx.HTTPError as err:
        status, message = 0, f"{type(err).__name__}: {err}"
    return {"status": status, "seconds": round(time.monotonic() - started, 3), "message": message}


def _control_timeouts(client: Any) -> int:
    try:
        replicas = client.status().get("replicas") or []
    except Exception:  # the app is unreachable: counted as none, the lost requests say the rest
        return 0
    return sum(int((r.get("engine") or {}).get("control_timeouts") or 0) for r in replicas)


def run(args: argparse.Namespace) -> dict[str, Any]:
    from deployments.defaults import cpu_demo_config, require_pair
    from deployments.local import run_local

    config = cpu_demo_config(require_pair(args.pair), serve={"port": args.port})
    body = worst_body()
    phases: dict[str, Any] = {}
    with run_local(
        config, host="127.0.0.1", port=args.port, log=lambda line: print(f"worst_body: {line}")
    ) as app:
        replicas_before, timeouts_before = _replica_pids(), _control_timeouts(app.client)
        normal = _Normal(app.base, args.clients, args.max_tokens)
        threads = [
            threading.Thread(target=normal.client, args=(i,), daemon=True) for i in range(args.clients)
        ]
        for t in threads:
            t.start()
        time.sleep(args.quiet_s)
        for phase, count in (("alone", 1), (f"{args.at_once} at once", args.at_once)):
            normal.phase = phase
            print(f"worst_body: {phase}: sending {count} worst bodies", flush=True)
            with ThreadPoolExecutor(count) as pool:
                phases[phase] = list(pool.map(lambda _: _send_worst(app.base, body), range(count)))
            print(f"worst_body: {phase}: {phases[phase]}", flush=True)
            time.sleep(args.quiet_s)  # normal requests started in this phase finish in it
        normal.phase = "tail"
        time.sleep(args.quiet_s)
        normal.stop.set()
        for t in threads:
            t.join(timeout=300)
        replicas_after, timeouts_after = _replica_pids(), _control_timeouts(app.client)
    by_phase: dict[str, Any] = {}
    for phase in ["baseline", *phases, "tail"]:
        rows = [(s, p) for ph, s, p in normal.results if ph == phase]
        ok = [s for s, p in rows if p is None]
        by_phase[phase] = {
            "requests": len(rows),
            "lost": len(rows) - len(ok),
            "problems": sorted({p for _, p in rows if p})[:10],
            "p50_s": _percentile(ok, 0.5),
            "p99_s": _percentile(ok, 0.99),
            "max_s": max(ok) if ok else None,
        }
    return {
        "body_bytes": len(body),
        "worst": phases,
        "normal": by_phase,
        "clients": args.clients,
        "max_tokens": args.max_tokens,
        "replica_processes_before": sorted(replicas_before),
        "replica_processes_after": sorted(replicas_after),
        "replicas_restarted": len(replicas_before - replicas_after),
        "control_timeouts": timeouts_after - timeouts_before,
        "cpu_count": os.cpu_count(),
        "load_average": os.getloadavg(),
    }


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def markdown(result: dict[str, Any], command: str) -> str:
    worst_rows = [
        [
            phase,
            len(answers),
            ", ".join(
                f"{s}x{sum(1 for a in answers if a['status'] == s)}"
                for s in sorted({a["status"] for a in answers})
            ),
            _fmt(min(a["seconds"] for a in answers)),
            _fmt(max(a["seconds"] for a in answers)),
        ]
        for phase, answers in result["worst"].items()
    ]
    normal_rows = [
        [phase, n["requests"], n["lost"], _fmt(n["p50_s"]), _fmt(n["p99_s"]), _fmt(n["max_s"])]
        for phase, n in result["normal"].items()
    ]
    first = next(iter(result["worst"].values()))[0]["message"]
    return (
        "## worst body under the caps\n\n"
        f"`{command}` on {time.strftime('%Y-%m-%d %H:%M')} ({result['cpu_count']} CPUs; load average at the end "
        f"{', '.join(f'{x:.1f}' for x in result['load_average'])}). The CPU app (2 replicas of the tiny pair, "
        f'the default caps); the body: `/v1/completions` with `prompt` = 64 x `"a " * 32500` '
        f"({result['body_bytes']:,} bytes, 32,501 tokens a prompt, context 2,048), sent alone, then many at once, "
        f"while {result['clients']} clients stream normal completions of {result['max_tokens']} tokens.\n\n"
        + table(["worst bodies", "sent", "status x count", "fastest s", "slowest s"], worst_rows, "lrlrr")
        + "\n"
        + table(["phase", "normal requests", "lost", "p50 s", "p99 s", "max s"], normal_rows, "lrrrrr")
        + f"\n- replica restarts: **{result['replicas_restarted']}** (replica processes at the start "
        f"{len(result['replica_processes_before'])}, gone by the end {result['replicas_restarted']}); engine "
        f"control timeouts (state reads or switches unanswered in time): {result['control_timeouts']}\n"
        f"- the answer: `{first[:240]}`\n"
        f"- {_BEFORE}\n"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m loadtests.bench.worst_body",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--pair", help="tiny pair directory (default ./models/tiny or $SPECFLIP_PAIR_DIR)")
    p.add_argument("--at-once", type=int, default=16, help="worst bodies sent at once in the second phase")
    p.add_argument("--clients", type=int, default=2, help="closed-loop clients of normal requests")
    p.add_argument("--max-tokens", type=int, default=16, help="tokens per normal streamed completion")
    p.add_argument("--quiet-s", type=float, default=15.0, help="seconds of normal load alone between phases")
    p.add_argument("--port", type=int, default=8124, help="port of the app this run starts")
    p.add_argument("--out", default="out/worst_body", help="folder for worst_body.json and worst_body.md")
    p.add_argument("--doc", help="write the `## worst body under the caps` section of this markdown file")
    args = p.parse_args(argv)
    result = run(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "worst_body.json").write_text(json.dumps(result, indent=1, default=str))
    command = "python -m loadtests.bench.worst_body " + " ".join(argv if argv is not None else sys.argv[1:])
    text = markdown(result, command.strip())
    (out / "worst_body.md").write_text(text)
    if args.doc:
        write_section(args.doc, text)
    print(text)
    lost = sum(n["lost"] for n in result["normal"].values())
    return 0 if lost == 0 and result["replicas_restarted"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
