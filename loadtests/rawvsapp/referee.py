"""The engine's own count of the tokens it generated, read for a client's measurement window.

A client's tok/s says what reached the client; the engine's counters say what the engine made.
Over the same window the two must agree (within the share of first tokens, which come from
prefill and which both counters below leave out: ~1% for 128-token outputs), or the client (or
the path to it) is the bottleneck and its number is not the server's.

- `LogReferee`: SGLang's own server. Its scheduler logs a `Decode batch, ... gen throughput
  (token/s): X` line every `decode_log_interval` (40) decode steps, X = tokens generated since the
  previous line over the wall time since it. Each line covers 40 steps of `#running-req`
  requests, i.e. about 40 x #running-req tokens, so the rate over a window is those tokens over
  the time they took: sum(n_i) / sum(n_i / X_i) over the lines stamped inside it (stamps have 1-s
  resolution: the window is taken to whole seconds), or the next line after it when none is
  (windows shorter than 40 steps of a slow engine). The plain mean of the X_i is not the rate: a
  line whose 40 steps were slowed by prefills counts as much as a fast one, and on the H200 the
  mean read 1.3-1.6x what both clients saw at c >= 128 (2026-12-02).
  That time base is wrong for a run that starts after the server idled: the first line's "time
  since the previous line" holds the idle gap (on the H200, 4-6 s before SGLang's client's runs:
  its engine rate read 1.17-1.65x low while the engine's token count matched the client's within
  4%). A whole client run is refereed by `tokens` instead: the tokens its lines count (40 x n_i,
  times the line's `accept len` under speculation, whose 40 steps are verify steps) over the
  client's own duration. `prompt_tokens` reads the prefill lines: the prompt tokens per
  new request the engine saw, i.e. which workload a client actually sent. `running` is the mean
  `#running-req` of the lines stamped in a window: the batch the engine was fed.
- `StatusReferee`: the app. Each replica reports its engine's cumulative `generated_tokens` with
  its tick (`/specflip/status`, `engine.generated_tokens`); a thread polls the status and keeps (time the
  report was made, count) per replica; the rate over a window is the interpolated count at its
  end minus at its start, summed over replicas. `running` is the mean of the running requests the
  replicas reported in a window, summed over replicas.

A client whose server path delivers late (a late first token, a stream's end seen late) holds
fewer requests in the engine at the same concurrency: `running` beside the raw server's at the
same c shows whether an engine made fewer tokens because it was slower or because it was fed less.
"""

from __future__ import annotations

import csv
import re
import threading
import time
from datetime import datetime
from pathlib import Path
from statistics import median

import httpx

from loadtests.locust.hosts import HostBoundUrls

__all__ = [
    "LogReferee",
    "StatusReferee",
    "decode_at",
    "decode_lines",
    "prefill_batches",
    "prefill_lines",
    "queue_lines",
    "replica_log_paths",
]

_DECODE = re.compile(
    r"\[(?P<time>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})[^\]]*\]\s+Decode batch[^,]*, "
    r"#running-req:\s*(?P<running>\d+)(?:.*?accept len:\s*(?P<accept>[0-9.]+))?"
    r".*?gen throughput \(token/s\):\s*(?P<rate>[0-9.]+)"
)

_PREFILL = re.compile(
    r"\[(?P<time>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})[^\]]*\]\s+Prefill batch[^,]*, "
    r"#new-seq:\s*(?P<seqs>\d+), #new-token:\s*(?P<new>\d+), #cached-token:\s*(?P<cached>\d+)"
)
_QUEUE = re.compile(
    r"\[(?P<time>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})[^\]]*\]\s+Decode batch[^\n]*?#queue-req:\s*(?P<queue>\d+)"
)
RAY_LOGS = Path("/tmp/ray/session_latest/logs")  # where Ray writes its workers' stdout / stderr
DECODE_LOG_INTERVAL = 40  # SGLang's default `decode_log_interval`: decode steps per decode-batch line


def _stamp(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S").timestamp()


def prefill_lines(text: str) -> list[tuple[float, int, int]]:
    """(epoch seconds, new requests, their prompt tokens: new + cached) of every prefill-batch line."""
    return [
        (_stamp(m["time"]), int(m["seqs"]), int(m["new"]) + int(m["cached"])) for m in _PREFILL.finditer(text)
    ]


def queue_lines(text: str) -> list[tuple[float, int]]:
    """(epoch seconds, requests waiting in the engine's queue) of every decode-batch line."""
    return [(_stamp(m["time"]), int(m["queue"])) for m in _QUEUE.finditer(text)]


def replica_log_paths(pid: int | None, logs: Path = RAY_LOGS) -> list[Path]:
    """The Ray worker log files of process `pid` (a Serve replica): its engine's scheduler, a child
    process, writes its decode and prefill lines there (with the engine's `log_level` at info)."""
    if pid is None or not logs.is_dir():
        return []
    return sorted(p for p in logs.glob(f"worker-*-{pid}.*") if p.suffix in (".out", ".err"))


def decode_lines(text: str) -> list[tuple[float, int, float]]:
    """(epoch seconds of the stamp, running requests, gen throughput) of every decode-batch line
    in a log text. Stamps are the host's local time (SGLang's log format)."""
    out = []
    for m in _DECODE.finditer(text):
        out.append((_stamp(m["time"]), int(m["running"]), float(m["rate"])))
    return out


def _stamped_in(t: float, start: float, end: float) -> bool:
    """Whether a log stamp (1-s resolution) falls in [start, end] taken to whole seconds."""
    return int(start) <= t <= int(end)


def _inside(t: float, window: tuple[float, float] | None) -> bool:
    return window is None or _stamped_in(t, *window)


def _prefills_in(text: str, window: tuple[float, float] | None) -> list[tuple[int, int]]:
    """(new requests, new prompt tokens) of the prefill lines stamped inside `window`."""
    return [(n, k) for t, n, k in prefill_lines(text) if _inside(t, window)]


def _in_or_next(series: list[tuple[float, int]], start: float, end: float, wait_s: float) -> list[int]:
    """The values stamped in [start, end]; a window too short for a line of its own gets the first
    line within `wait_s` after it."""
    inside = [v for t, v in series if _stamped_in(t, start, end)]
    return inside or [v for t, v in series if int(end) < t < int(end) + wait_s][:1]


def _decodes_in(text: str, window: tuple[float, float] | None) -> list[re.Match[str]]:
    """The decode-batch lines (regex matches: running, accept, rate) stamped inside `window`."""
    return [m for m in _DECODE.finditer(text) if _inside(_stamp(m["time"]), window)]


def decode_at(
    text: str, running: int, window: tuple[float, float] | None = None, at_least: int | None = None
) -> tuple[int, float | None, float | None]:
    """The decode-batch lines of a log at exactly `running` requests, or from `at_least` to `running`
    (stamped inside `window`, epoch seconds, if given): how many, their mean accept length (None
    without speculation) and their median gen throughput (None without lines). Two engines compared
    at the same batch and acceptance: a lower rate is a slower step, or more time between steps (a
    line's rate counts the prefills and idle time among its 40 steps). A closed loop at c=256 seldom
    logs exactly 256 running: `at_least` takes the lines of a band below it."""
    low = running if at_least is None else at_least
    found = [m for m in _decodes_in(text, window) if low <= int(m["running"]) <= running]
    accepts = [float(m["accept"]) for m in found if m["accept"] is not None]
    rates = [float(m["rate"]) for m in found]
    return len(rates), (sum(accepts) / len(accepts) if accepts else None), median(rates) if rates else None


def prefill_batches(text: str, window: tuple[float, float] | None = None) -> tuple[int, int]:
    """(prefill batches, new requests in them) of a log's prefill lines inside `window`: a closed-loop
    wave whose requests reach the scheduler together is one batch, one that trickles in is several."""
    found = _prefills_in(text, window)
    return len(found), sum(n for n, _ in found)


def _tokens_over_time(lines: list[tuple[int, float]]) -> float | None:
    """sum(n) / sum(n / rate): the rate of lines that each cover 40 steps of n requests."""
    lines = [(n, r) for n, r in lines if r > 0 and n > 0]
    if not lines:
        return None
    return sum(n for n, _ in lines) / sum(n / r for n, r in lines)


class LogReferee:
    """Decode tok/s of an SGLang engine from its scheduler's log: SGLang's own server's log file, or
    the Ray worker logs of an app replica (several files: read as one)."""

    def __init__(self, log_path: Path | list[Path], log_interval: int = DECODE_LOG_INTERVAL) -> None:
        self.log_paths = [log_path] if isinstance(log_path, Path) else list(log_path)
        self.log_path = self.log_paths[0] if self.log_paths else None
        self.log_interval = log_interval

    def _text(self) -> str | None:
        texts = []
        for path in self.log_paths:
            try:
                texts.append(path.read_text(errors="replace"))
            except OSError:
                continue
        return "\n".join(texts) if texts else None

    def tokens(self, start: float, end: float) -> int | None:
        """Decode tokens the lines stamped in [start, end] count (`log_interval` steps of n requests
        each, times the line's `accept len` under speculation: SGLang's tokens per request per verify
        step, bonus token included); the steps after the last line are not logged. None if no line
        is stamped there.

        n is the batch at the line's last step: the count is right while the batch holds steady over
        a line's steps (on the H200, 128-256 requests of 64-192 tokens: within 4% of SGLang's client's
        own count) and too high where requests shorter than the interval come and go (the CPU chain
        test, 2 requests of 12-36 tokens: about 2x)."""
        text = self._text()
        if text is None:
            return None
        inside = [int(m["running"]) * float(m["accept"] or 1) for m in _decodes_in(text, (start, end))]
        return round(self.log_interval * sum(inside)) if inside else None

    def prompt_tokens(self, start: float, end: float) -> float | None:
        """Mean prompt tokens per new request over the prefill lines stamped in [start, end]."""
        text = self._text()
        if text is None:
            return None
        inside = _prefills_in(text, (start, end))
        seqs = sum(n for n, _ in inside)
        return sum(k for _, k in inside) / seqs if seqs else None

    def running(self, start: float, end: float, wait_s: float = 10.0) -> float | None:
        """Mean `#running-req` over the decode lines stamped in [start, end]; a window too short for a
        line of its own gets the first line after it (as `rate`). None if there is none."""
        text = self._text()
        if text is None:
            return None
        inside = _in_or_next([(t, n) for t, n, _ in decode_lines(text)], start, end, wait_s)
        return sum(inside) / len(inside) if inside else None

    def queued(self, start: float, end: float, wait_s: float = 10.0) -> float | None:
        """Mean `#queue-req` (requests waiting for a prefill) over the decode lines stamped in [start, end];
        a window without a line of its own gets the first line after it (as `rate`)."""
        text = self._text()
        if text is None:
            return None
        inside = _in_or_next(queue_lines(text), start, end, wait_s)
        return sum(inside) / len(inside) if inside else None

    def rate(self, start: float, end: float, wait_s: float = 10.0) -> float | None:
        """Mean gen throughput of the lines stamped in [start, end) (to whole seconds); a window too
        short for a line of its own (a slow engine: 40 steps take longer) gets the first line after
        it, which covers its end. None if there is none within `wait_s` after it."""
        text = self._text()
        if text is None:
            return None
        lo, hi = int(start), int(end)
        lines = decode_lines(text)
        inside = [(n, r) for t, n, r in lines if lo <= t < hi]
        if not inside:
            inside = [(n, r) for t, n, r in lines if hi <= t < hi + wait_s][:1]
        return _tokens_over_time(inside)

    def close(self) -> None:
        pass


class StatusReferee:
    """Decode tok/s of the app's engines, from the cumulative counts their replicas report."""

    def __init__(self, base_url: str, every_s: float = 0.5) -> None:
        self._urls = HostBoundUrls(base_url)
        self._every_s = every_s
        self._samples: dict[str, list[tuple[float, int]]] = {}
        self._running: dict[str, list[tuple[float, int]]] = {}  # (report time, running requests)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="status-referee", daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        with httpx.Client(timeout=5.0) as client:
            while not self._stop.is_set():
                asked = time.time()
                try:
                    url = self._urls.url("/specflip/status")
                    replicas = client.get(url).json().get("replicas") or []
                except (httpx.HTTPError, ValueError):
                    replicas = []
                with self._lock:
                    for r in replicas:
                        engine = r.get("engine") or {}
                        count = engine.get("generated_tokens")
                        age = r.get("last_report_age_s")
                        if not isinstance(count, int) or not isinstance(age, int | float):
                            continue
                        series = self._samples.setdefault(str(r.get("replica_id")), [])
                        at = asked - float(age)
                        if not series or at > series[-1][0]:
                            series.append((at, count))
                            if isinstance(r.get("running"), int):
                                self._running.setdefault(str(r.get("replica_id")), []).append(
                                    (at, r["running"])
                                )
                self._stop.wait(self._every_s)

    def rate(self, start: float, end: float, wait_s: float = 5.0) -> float | None:
        """Tokens the engines generated in [start, end) per second; None without samples around it
        (a window that just ended waits up to `wait_s` for the reports that cover its end)."""
        deadline = time.time() + wait_s
        while True:
            with self._lock:
                series = [list(s) for s in self._samples.values()]
            covered = bool(series) and all(s and s[-1][0] >= end for s in series)
            if covered or time.time() >= deadline or self._stop.is_set():
                break
            time.sleep(0.2)
        total = 0.0
        if not series:
            return None
        for s in series:
            a, b = _at(s, start), _at(s, end)
            if a is None or b is None:
                return None
            total += b - a
        return total / (end - start)

    def running(self, start: float, end: float) -> float | None:
        """Mean running requests the replicas reported in [start, end], summed over replicas."""
        with self._lock:
            series = [[n for t, n in s if start <= t <= end] for s in self._running.values()]
        means = [sum(s) / len(s) for s in series if s]
        return sum(means) if means else None

    def queued(self, start: float, end: float) -> float | None:
        """None: the replicas report no queue (`LogReferee` reads it from the engine's log)."""
        return None

    def prompt_tokens(self, start: float, end: float) -> float | None:
        """None: the replicas report no prompt counts (LogReferee reads them from SGLang's log)."""
        return None

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5.0)


def _at(series: list[tuple[float, int]], t: float) -> float | None:
    """The count at time t, linear between the samples around it (None outside them)."""
    for (t0, c0), (t1, c1) in zip(series, series[1:], strict=False):
        if t0 <= t <= t1:
            return c0 + (c1 - c0) * (t - t0) / (t1 - t0) if t1 > t0 else float(c1)
    return None


def _row(text: str, running: int, window: tuple[float, float] | None, at_least: int | None) -> str:
    """decode lines | accept length | gen throughput median | prefill batches | requests per batch."""
    k, accept, rate = decode_at(text, running, window, at_least)
    batches, requests = prefill_batches(text, window)
    accept_text = "-" if accept is None else f"{accept:.3f}"
    rate_text = "-" if rate is None else f"{rate:,.0f}"
    per_batch = "-" if not batches else f"{requests / batches:.2f}"
    return f"{k} | {accept_text} | {rate_text} | {batches} | {per_batch}"


_COLUMNS = (
    "decode lines | accept length | gen throughput median (tok/s) | prefill batches | requests per batch"
)


def _sweep_rows(sweep: Path, logs: list[str], running: int, at_least: int | None = None) -> list[str]:
    """One row per run of `sweep` (a client_sweep sweep.csv) at concurrency `running` whose variant
    has a log (`VARIANT=LOG`), read in that run's window (`started` to `started + duration_s`)."""
    by_variant: dict[str, str] = {}
    for item in logs:
        variant, eq, path = item.partition("=")
        if not eq or not variant or not path:
            raise ValueError(f"with --sweep each log is VARIANT=PATH, got {item!r}")
        by_variant[variant] = Path(path).read_text(errors="replace")
    with sweep.open(newline="") as fh:
        runs = [
            r for r in csv.DictReader(fh) if r["variant"] in by_variant and int(r["concurrency"]) == running
        ]
    out = []
    for r in runs:
        start = float(r["started"])
        window = (start, start + float(r["duration_s"]))
        out.append(
            f"{r['variant']} | {r['repeat']} | {_row(by_variant[r['variant']], running, window, at_least)}"
        )
    return out


def main(argv: list[str] | None = None) -> int:
    """`python -m loadtests.rawvsapp.referee --running N [--at-least M] [--window START,END] LOG...`:
    for each engine log, its decode lines at N running requests (M to N with --at-least;
    `decode_at`) and its prefill batches (`prefill_batches`). With `--sweep sweep.csv VARIANT=LOG...`:
    one row per run of the sweep at concurrency N, each read in its own window from its variant's log."""
    import argparse

    p = argparse.ArgumentParser(description=main.__doc__)
    p.add_argument("--running", type=int, required=True, help="the batch to compare at (#running-req)")
    p.add_argument(
        "--at-least",
        type=int,
        metavar="N",
        help="decode lines from N to --running requests (a band), not exactly --running",
    )
    p.add_argument(
        "--window", default="", metavar="START,END", help="epoch seconds: only lines stamped inside"
    )
    p.add_argument(
        "--sweep", type=Path, help="a client_sweep sweep.csv: its runs' windows, logs as VARIANT=LOG"
    )
    p.add_argument("logs", nargs="+")
    args = p.parse_args(argv)
    if args.at_least is not None and not 0 <= args.at_least <= args.running:
        p.error(f"--at-least {args.at_least}: expected 0 to --running ({args.running})")
    if args.sweep is not None:
        if args.window:
            p.error("--window and --sweep: the sweep's runs give the windows")
        try:
            rows = _sweep_rows(args.sweep, args.logs, args.running, args.at_least)
        except (ValueError, KeyError, OSError) as e:
            p.error(f"--sweep: {e}")
        print(f"variant | repeat | {_COLUMNS}")
        print("\n".join(rows) if rows else f"(no run of those variants at concurrency {args.running})")
        return 0
    window: tuple[float, float] | None = None
    if args.window:
        start, _, end = args.window.partition(",")
        try:
            window = (float(start), float(end))
        except ValueError:
            p.error("--window: expected START,END in epoch seconds")
    print(f"log | {_COLUMNS}")
    for log in args.logs:
        print(f"{log} | {_row(Path(log).read_text(errors='replace'), args.running, window, args.at_least)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
