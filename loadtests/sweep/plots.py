"""PNG plots of a sweep (matplotlib, Agg backend: no display needed).

- `throughput.png`: output tok/s vs concurrency, one line per variant;
- `latency.png`: p50/p99 TTFT and TPOT vs concurrency;
- `goodput.png`: goodput (req/s within the SLOs) vs concurrency;
- `transition.png`: during low->high->low, speculation mode per replica, queue
  depth per replica, and output tok/s of every variant over time, phases shaded.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402

from loadtests.sweep.results import ResultRow, TransitionResult  # noqa: E402

__all__ = ["plot_goodput", "plot_latency", "plot_throughput", "plot_transition"]

COLORS = {"on": "tab:red", "off": "tab:blue", "dynamic": "tab:green", "adaptive": "tab:purple"}
PHASE_SHADE = {"low": "#f2f2f2", "high": "#ffe9cc", "low2": "#f2f2f2"}


def _variants(rows: list[ResultRow]) -> list[str]:
    return list(dict.fromkeys(r.variant for r in rows))


def _series(rows: list[ResultRow], variant: str, attr: str) -> tuple[list[int], list[float]]:
    pts = sorted((r.concurrency, getattr(r, attr)) for r in rows if r.variant == variant)
    pts = [(c, v) for c, v in pts if v is not None]
    return [c for c, _ in pts], [v for _, v in pts]


def _concurrency_axis(ax: Axes, rows: list[ResultRow]) -> None:
    cs = sorted({r.concurrency for r in rows})
    if len(cs) > 1 and cs[0] > 0:
        ax.set_xscale("log", base=2)
    ax.set_xticks(cs)
    ax.set_xticklabels([str(c) for c in cs])
    ax.set_xlabel("concurrency (users)")
    ax.grid(True, alpha=0.3)


def _line(ax: Axes, rows: list[ResultRow], attr: str, style: str = "o-", suffix: str = "") -> None:
    for v in _variants(rows):
        xs, ys = _series(rows, v, attr)
        if xs:
            ax.plot(xs, ys, style, color=COLORS.get(v), label=v + suffix)


def plot_throughput(rows: list[ResultRow], path: Path) -> None:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    _line(ax, rows, "output_tok_s")
    _concurrency_axis(ax, rows)
    ax.set_ylabel("output tokens/s")
    ax.set_title("Output throughput vs concurrency")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_latency(rows: list[ResultRow], path: Path) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, metric, title in ((axes[0], "ttft", "TTFT"), (axes[1], "tpot", "TPOT")):
        _line(ax, rows, f"{metric}_p50_ms", "o-", " p50")
        _line(ax, rows, f"{metric}_p99_ms", "x--", " p99")
        _concurrency_axis(ax, rows)
        ax.set_ylabel(f"{title} (ms)")
        ax.set_title(f"{title} p50 / p99 vs concurrency")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_goodput(rows: list[ResultRow], path: Path, slo_text: str) -> None:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    _line(ax, rows, "goodput_req_s")
    _concurrency_axis(ax, rows)
    ax.set_ylabel("goodput (requests/s)")
    ax.set_title(f"Goodput: {slo_text}", fontsize=10)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _shade(ax: Axes, tr: TransitionResult) -> None:
    for p in tr.phases:
        ax.axvspan(p.start_s, p.end_s, color=PHASE_SHADE.get(p.name, "#eeeeee"), zorder=0)


def plot_transition(transitions: list[TransitionResult], focus: str, path: Path) -> None:
    """Mode and queue depth per replica for the `focus` variant; tok/s over time for all."""
    main = next((t for t in transitions if t.variant == focus), transitions[0])
    fig, axes = plt.subplots(3, 1, figsize=(11, 9), sharex=True)
    ax_mode, ax_q, ax_tok = axes
    replicas = sorted({s.replica_id for s in main.samples})
    for i, rid in enumerate(replicas):
        pts = [(s.t - main.t0, s) for s in main.samples if s.replica_id == rid]
        xs = [t for t, _ in pts]
        ax_mode.step(xs, [i + (0.8 if s.mode == "on" else 0.0) for _, s in pts], where="post", label=rid)
        ax_q.step(xs, [s.running + s.waiting for _, s in pts], where="post", label=f"{rid} running+waiting")
    ax_mode.set_yticks([i + d for i in range(len(replicas)) for d in (0.0, 0.8)])
    ax_mode.set_yticklabels([f"{rid} {m}" for rid in replicas for m in ("off", "on")])
    ax_mode.set_title(
        f"Speculation mode per replica ({main.variant})"
        + ("" if main.status_available else ": no /specflip/status")
    )
    ax_q.set_ylabel("requests")
    ax_q.set_title(f"Queue depth per replica ({main.variant})")
    if replicas:
        ax_q.legend(fontsize=8)
    for tr in transitions:
        xs = [i * tr.bin_s for i in range(len(tr.tok_s) + 1)]
        ys = tr.tok_s + tr.tok_s[-1:]  # one step per bin
        ax_tok.step(
            xs,
            ys,
            where="post",
            color=COLORS.get(tr.variant),
            label=tr.variant,
            lw=1.8 if tr is main else 1.0,
        )
    ax_tok.set_ylabel("output tokens/s")
    ax_tok.set_xlabel("time since load start (s)")
    ax_tok.set_title("Output throughput over time (phases: low | high | low)")
    ax_tok.legend(fontsize=8)
    for ax in axes:
        _shade(ax, main)
        ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
