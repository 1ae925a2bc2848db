"""Soak: the CPU app at saturation for a long time, with the transition shape repeating and some
oversized and malformed requests mixed in.

    python -m loadtests.bench.soak [--minutes 30] [--pair models/tiny] [--out out/soak] [--doc docs/benchmarks.md]

Streaming clients follow a repeating low -> high -> low cycle (`--cycle`, seconds per phase and
clients per phase); every few seconds a bad request goes in (a 31 MB prompt, malformed JSON, a
NaN, a lone surrogate, a wrongly typed field), each of which must get its 4xx. Every `--sample-s`
it records each process of this app (found among this process's descendants: Ray's request router, each
replica, their SGLang scheduler and detokenizer, the policy actor, Serve's controller and proxy,
the raylet and GCS): resident memory and open file descriptors, and the policy's flips.

Reports (progress lines while it runs; soak.json and soak.md in --out; the `## soak` section of
--doc): good requests and their errors (a stream must reach [DONE] with no error event), bad
requests answered other than 4xx, flips per minute against the bound the dwell sets, and the
memory slope of each process (least squares over the run after the first tenth).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import psutil

from loadtests.locust.hosts import HostBoundUrls
from loadtests.markdown import table, write_section

__all__ = ["main", "slope"]

_ROLES = (
    ("router", "ray::ServeReplica:specflip:LLMRouter"),
    ("replica", "ray::ServeReplica:specflip:SpecFlipServer"),
    ("scheduler", "sglang::scheduler"),
    ("detokenizer", "sglang::detokenizer"),
    ("policy", "ray::SpeculationPolicy"),
    ("controller", "ray::ServeController"),
    ("proxy", "ray::ProxyActor"),
    ("raylet", "raylet"),
    ("gcs", "gcs_server"),
)
_PROMPTS = ("def add(a, b):", "class Stack:", "import os\n\ndef", "for i in range(", "return self.")
_BAD: tuple[tuple[str, str | bytes], ...] = (
    ("oversized prompt", json.dumps({"model": "specflip-tiny", "prompt": "x" * 31_000_000, "max_tokens": 4})),
    ("malformed JSON", '{"model": "specflip-tiny", "prompt": '),
    ("NaN", '{"model": "specflip-tiny", "prompt": "a", "temperature": NaN}'),
    ("lone surrogate", '{"model": "specflip-tiny", "prompt": "a\\ud800"}'),
    ("wrong type", '{"model": "specflip-tiny", "prompt": "a", "max_tokens": "ten"}'),
    ("token id beyond the vocabulary", '{"model": "specflip-tiny", "prompt": [1, 99999999]}'),
)


def slope(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (x, y) points (None with fewer than 3)."""
    if len(points) < 3:
        return None
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    var = sum((x - mx) ** 2 for x, _ in points)
    return None if var == 0 else sum((x - mx) * (y - my) for x, y in points) / var


def _processes() -> dict[str, psutil.Process]:
    """This app's processes by role (descendants of this process: another app on the host is not ours)."""
    found: dict[str, psutil.Process] = {}
    counts: Counter[str] = Counter()
    for p in psutil.Process().children(recursive=True):
        try:
            cmd = " ".join(p.cmdline())
        except psutil.Error:
            continue
        for role, title in _ROLES:
            if cmd.startswith(title) or (role in ("raylet", "gcs") and f"/{title} " in f"{cmd} "):
                found[
                    f"{role}-{counts[role]}" if role in ("replica", "scheduler", "detokenizer") else role
                ] = p
                counts[role] += 1
                break
    return found


def _sample(processes: dict[str, psutil.Process]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for name, p in processes.items():
        with contextlib.suppress(psutil.Error):
            out[name] = {
                "rss_mb": p.memory_info().rss / 2**20,
                "fds": float(p.num_fds()),
                "pid": float(p.pid),
            }
    return out


class _Load:
    def __init__(self, base: str, cycle: list[tuple[float, int]], max_tokens: int) -> None:
        self.urls, self.cycle, self.max_tokens = HostBoundUrls(base), cycle, max_tokens
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.good: Counter[str] = Counter()
        self.bad: Counter[str] = Counter()
        self.errors: list[str] = []
        self.started = time.monotonic()

    def wanted(self, now: float) -> int:
        period = sum(s for s, _ in self.cycle)
        t = (now - self.started) % period
        for seconds, clients in self.cycle:
            if t < seconds:
                return clients
            t -= seconds
        return self.cycle[-1][1]

    def client(self, i: int) -> None:
        with httpx.Client(timeout=300) as http:
            n = 0
            while not self.stop.is_set():
                if i >= self.wanted(time.monotonic()):
                    time.sleep(0.2)
                    continue
                body = {
                    "model": "specflip-tiny",
                    "prompt": _PROMPTS[(i + n) % len(_PROMPTS)],
                    "max_tokens": self.max_tokens,
                    "temperature": 0,
                    "ignore_eos": True,
                    "stream": True,
                }
                n += 1
                self._record_good(_stream(http, self.urls.url("/v1/completions"), body))

    def _record_good(self, problem: str | None) -> None:
        with self.lock:
            self.good["error" if problem else "ok"] += 1
            if problem and len(self.errors) < 50:
                self.errors.append(problem)

    def bad_sender(self, every_s: float) -> None:
        with httpx.Client(timeout=300) as http:
            n = 0
            while not self.stop.wait(every_s):
                name, content = _BAD[n % len(_BAD)]
                n += 1
                try:
                    r = http.post(
                        self.urls.url("/v1/completions"),
                        content=content,
                        headers={"Content-Type": "application/json"},
                    )
                    status = r.status_code
                except httpx.HTTPError as err:
                    status = 0
                    name = f"{name}: {type(err).__name__}"
                with self.lock:
                    self.bad["4xx" if 400 <= status < 500 else "other"] += 1
                    if not 400 <= status < 500:
                        self.errors.append(f"bad request {name} got {status}")


def _stream(http: httpx.Client, url: str, body: dict[str, Any]) -> str | None:
    try:
        with http.stream("POST", url, json=body) as r:
            if r.status_code != 200:
                return f"HTTP {r.status_code}"
            done = False
            for line in r.iter_lines():
                if line == "data: [DONE]":
                    done = True
                elif line.startswith("data: ") and '"error"' in line:
                    return f"error event: {line[:200]}"
            return None if done else "stream without [DONE]"
    except httpx.HTTPError as err:
        return f"{type(err).__name__}: {err}"


def _parse_cycle(spec: str) -> list[tuple[float, int]]:
    """'40:1,60:10,20:1' -> [(40 s, 1 client), (60 s, 10 clients), (20 s, 1 client)]."""
    out = []
    for part in spec.split(","):
        seconds, clients = part.split(":")
        out.append((float(seconds), int(clients)))
    return out


def _flips(client: Any) -> int | None:
    with contextlib.suppress(Exception):
        return int(client.status()["policy"]["flips_total"])
    return None


def run(args: argparse.Namespace) -> dict[str, Any]:
    from deployments.defaults import cpu_demo_config, require_pair
    from deployments.local import run_local

    pair = require_pair(args.pair)
    config = cpu_demo_config(pair, policy={"dwell_s": args.dwell_s}, serve={"port": args.port})
    cycle = _parse_cycle(args.cycle)
    samples: list[dict[str, Any]] = []
    with run_local(
        config, host="127.0.0.1", port=args.port, log=lambda line: print(f"soak: {line}", flush=True)
    ) as app:
        load = _Load(app.base, cycle, args.max_tokens)
        threads = [
            threading.Thread(target=load.client, args=(i,), daemon=True)
            for i in range(max(c for _, c in cycle))
        ]
        threads.append(threading.Thread(target=load.bad_sender, args=(args.bad_every_s,), daemon=True))
        flips0 = _flips(app.client) or 0
        for t in threads:
            t.start()
        end = load.started + args.minutes * 60
        while time.monotonic() < end:
            time.sleep(min(args.sample_s, max(0.0, end - time.monotonic())))
            elapsed = time.monotonic() - load.started
            procs = _sample(_processes())
            flips = (_flips(app.client) or flips0) - flips0
            samples.append({"t_s": round(elapsed, 1), "flips": flips, "processes": procs})
            with load.lock:
                good, bad = dict(load.good), dict(load.bad)
            total_rss = sum(p["rss_mb"] for p in procs.values())
            print(
                f"soak: {elapsed / 60:5.1f} min  good {good}  bad {bad}  flips {flips}  "
                f"rss {total_rss:,.0f} MB in {len(procs)} processes  fds {sum(int(p['fds']) for p in procs.values())}",
                flush=True,
            )
        load.stop.set()
        for t in threads:
            t.join(timeout=300)
        status = app.client.status()
    return _summary(args, config, load, samples, status)


def _summary(
    args: argparse.Namespace, config: Any, load: _Load, samples: list[dict[str, Any]], status: Any
) -> dict[str, Any]:
    minutes = samples[-1]["t_s"] / 60 if samples else 0.0
    skip = max(1, len(samples) // 10)  # the first tenth: startup and caches filling
    per_process: dict[str, dict[str, Any]] = {}
    names = sorted({n for s in samples for n in s["processes"]})
    for name in names:
        rss = [
            (s["t_s"] / 60, s["processes"][name]["rss_mb"]) for s in samples[skip:] if name in s["processes"]
        ]
        fds = [s["processes"][name]["fds"] for s in samples if name in s["processes"]]
        pids = {s["processes"][name]["pid"] for s in samples if name in s["processes"]}
        per_process[name] = {
            "rss_mb_first": round(rss[0][1], 1) if rss else None,
            "rss_mb_last": round(rss[-1][1], 1) if rss else None,
            "rss_mb_per_min": None if slope(rss) is None else round(slope(rss) or 0.0, 3),
            "fds_min": int(min(fds)) if fds else None,
            "fds_max": int(max(fds)) if fds else None,
            "restarted": len(pids) > 1,
        }
    flips = samples[-1]["flips"] if samples else 0
    replicas = config.replicas.count
    return {
        "minutes": round(minutes, 2),
        "cycle": args.cycle,
        "max_tokens": args.max_tokens,
        "dwell_s": args.dwell_s,
        "good": dict(load.good),
        "bad": dict(load.bad),
        "errors": load.errors,
        "flips": flips,
        "flips_per_min": round(flips / minutes, 2) if minutes else None,
        "flips_per_min_bound": round(replicas * 60 / args.dwell_s, 1),
        "processes": per_process,
        "samples": samples,
        "final_status": status,
        "cpu_count": os.cpu_count(),
        "load_average": os.getloadavg(),
    }


def markdown(result: dict[str, Any], command: str) -> str:
    good, bad = result["good"], result["bad"]
    rows = [
        [
            name,
            p["rss_mb_first"],
            p["rss_mb_last"],
            p["rss_mb_per_min"],
            f"{p['fds_min']}-{p['fds_max']}",
            "yes" if p["restarted"] else "no",
        ]
        for name, p in result["processes"].items()
    ]
    errors = good.get("error", 0) + bad.get("other", 0)
    return (
        "## soak\n\n"
        f"`{command}` on {time.strftime('%Y-%m-%d %H:%M')} ({result['cpu_count']} CPUs; "
        f"load average at the end {', '.join(f'{x:.1f}' for x in result['load_average'])}). The CPU app (2 replicas of "
        f"the tiny pair) for {result['minutes']} min, cycle `{result['cycle']}` (seconds:clients), streamed "
        f"completions of {result['max_tokens']} tokens, a bad request every few seconds.\n\n"
        f"- requests: {good.get('ok', 0) + good.get('error', 0)} good ({good.get('error', 0)} errors), "
        f"{bad.get('4xx', 0) + bad.get('other', 0)} bad ({bad.get('other', 0)} not answered 4xx); **errors: {errors}**\n"
        f"- flips: {result['flips']} ({result['flips_per_min']}/min; the dwell of {result['dwell_s']} s bounds it at "
        f"{result['flips_per_min_bound']}/min)\n"
        f"- memory slope: least squares over the run after its first tenth, per process\n\n"
        + table(
            ["process", "RSS MB after warm-up", "RSS MB at end", "MB/min", "open fds", "restarted"],
            rows,
            "lrrrrl",
        )
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m loadtests.bench.soak",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--minutes", type=float, default=30.0, help="how long to run (default 30)")
    p.add_argument("--pair", help="tiny pair directory (default ./models/tiny or $SPECFLIP_PAIR_DIR)")
    p.add_argument("--cycle", default="40:1,60:10,20:1", help="seconds:clients per phase, repeating")
    p.add_argument("--max-tokens", type=int, default=32, help="tokens per streamed completion")
    p.add_argument("--dwell-s", type=float, default=2.0, help="policy dwell: the least time between flips")
    p.add_argument("--bad-every-s", type=float, default=3.0, help="seconds between two bad requests")
    p.add_argument("--sample-s", type=float, default=20.0, help="seconds between process samples")
    p.add_argument("--port", type=int, default=8123, help="port of the app this run starts")
    p.add_argument("--out", default="out/soak", help="folder for soak.json and soak.md")
    p.add_argument("--doc", help="write the `## soak` section of this markdown file")
    args = p.parse_args(argv)
    result = run(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "soak.json").write_text(json.dumps(result, indent=1, default=str))
    command = "python -m loadtests.bench.soak " + " ".join(
        argv if argv is not None else __import__("sys").argv[1:]
    )
    text = markdown(result, command.strip())
    (out / "soak.md").write_text(text)
    if args.doc:
        write_section(args.doc, text)
    print(text)
    errors = result["good"].get("error", 0) + result["bad"].get("other", 0)
    return 0 if errors == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
