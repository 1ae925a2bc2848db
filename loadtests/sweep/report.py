"""Markdown report and plots of a sweep; rebuild them with `python -m loadtests.sweep.report OUT_DIR`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from loadtests.sweep.plots import plot_goodput, plot_latency, plot_throughput, plot_transition
from loadtests.sweep.results import SweepResults, ratios, write_results_csv, write_transition_csv

__all__ = ["DYNAMIC_GOAL", "main", "render_report", "write_outputs"]

DYNAMIC_GOAL = 0.97  # dynamic must keep >= 97% of the best static mode's throughput


def _f(v: float | None, digits: int = 1) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.0f}%"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def render_report(res: SweepResults, plots: list[str]) -> str:
    s = res.settings
    lines = [f"# specflip benchmark: {s.get('title', 'sweep')}", ""]
    lines += [
        f"- target: {s.get('target', '?')}; model `{s.get('model', '?')}`; API `{s.get('api', '?')}`",
        f"- prompts: {s.get('prompt_set', '?')}, {s.get('input_len', '?')} words in, "
        f"{s.get('output_len', '?')} tokens out (ignore_eos={s.get('ignore_eos', '?')}), "
        f"temperature {s.get('temperature', '?')}",
        f"- each point: {s.get('warmup_s', '?')} s warm-up, then {s.get('duration_s', '?')} s measured "
        "(requests counted when they complete inside the window)",
        f"- goodput SLO: {s.get('slo_text', '?')}",
        f"- started {s.get('started', '?')}",
        "",
        "## Results",
        "",
    ]
    order = list(dict.fromkeys(r.variant for r in res.rows))  # the sweep's variant order
    header = [
        "variant",
        "c",
        "output tok/s",
        "req/s",
        "goodput req/s",
        "TTFT p50 ms",
        "TTFT p99 ms",
        "TPOT p50 ms",
        "TPOT p99 ms",
        "ITL p50 ms",
        "accept len",
        "spec ON",
        "ok",
        "errors",
    ]
    body = [
        [
            r.variant,
            str(r.concurrency),
            _f(r.output_tok_s),
            _f(r.req_s, 2),
            _f(r.goodput_req_s, 2),
            _f(r.ttft_p50_ms),
            _f(r.ttft_p99_ms),
            _f(r.tpot_p50_ms, 2),
            _f(r.tpot_p99_ms, 2),
            _f(r.itl_p50_ms, 2),
            _f(r.mean_accept_length, 2),
            _pct(r.spec_on_fraction),
            str(r.ok),
            str(r.errors),
        ]
        for r in sorted(res.rows, key=lambda r: (order.index(r.variant), r.concurrency))
    ]
    lines += _table(header, body) + [""]
    lines += [
        "TTFT: request start to the first token chunk. TPOT: (last - first token chunk) / (output tokens - 1). "
        "ITL: gap between token chunks (under speculation one chunk can carry several tokens). "
        "Goodput: completed requests/s within the SLO. accept len / spec ON: mean of the replicas' "
        "reported accept length and share of status polls in ON mode, during the window.",
        "",
    ]

    max_load = res.settings.get("max_client_load")
    rat = ratios(res.rows, max_load)
    lines += [
        "## Ratios",
        "",
        f"Output tok/s relative to the better static mode at each concurrency "
        f"(goal for dynamic: >= {DYNAMIC_GOAL}).",
        "",
    ]
    if rat:
        lines += _table(
            [
                "c",
                "best static",
                "best tok/s",
                "dynamic / best",
                f"dynamic >= {DYNAMIC_GOAL}",
                "adaptive / best",
            ],
            [
                [
                    str(r.concurrency),
                    r.best_static,
                    _f(r.best_static_tok_s),
                    "client-bound" if r.client_bound else _f(r.dynamic_ratio, 3),
                    "-" if r.dynamic_ratio is None else ("yes" if r.dynamic_ratio >= DYNAMIC_GOAL else "NO"),
                    "client-bound" if r.client_bound else _f(r.adaptive_ratio, 3),
                ]
                for r in rat
            ],
        )
        if any(r.client_bound for r in rat):
            lines += [
                "",
                f"client-bound: the load generator took in more than {max_load:.0%} of its calibrated "
                "ceiling (`loadtests.calibrate`) at that level; its ratio measures the client and is not reported.",
            ]
    else:
        lines.append("(needs both `on` and `off` in the sweep)")
    lines += ["", "## Plots", ""] + [f"![{p}]({p})" for p in plots if p != "transition.png"] + [""]

    if res.transitions:
        lines += ["## Transition (low -> high -> low)", ""]
        rows = []
        for tr in res.transitions:
            for p in tr.phases:
                m = p.summary
                rows.append(
                    [
                        tr.variant,
                        p.name,
                        f"{p.start_s:.0f}-{p.end_s:.0f}",
                        str(p.users),
                        _f(m.output_tok_s),
                        _f(m.ttft_p50_ms),
                        _f(m.ttft_p99_ms),
                        _f(m.tpot_p50_ms, 2),
                        _f(m.tpot_p99_ms, 2),
                        str(m.ok),
                        str(m.errors),
                    ]
                )
        lines += _table(
            [
                "variant",
                "phase",
                "t (s)",
                "users",
                "output tok/s",
                "TTFT p50 ms",
                "TTFT p99 ms",
                "TPOT p50 ms",
                "TPOT p99 ms",
                "ok",
                "errors",
            ],
            rows,
        ) + [""]
        for tr in res.transitions:
            if not tr.status_available:
                lines.append(f"- {tr.variant}: the app has no /specflip/status, no mode timeline")
            else:
                flips = ", ".join(f"{k}: {v}" for k, v in sorted(tr.flips().items())) or "no samples"
                lines.append(f"- {tr.variant}: mode changes seen per replica: {flips}")
        lines += ["", "Timeline: `transition.csv`.", "", "![transition.png](transition.png)", ""]

    notes = list(res.notes)
    chunked = sum(r.chunk_counted for r in res.rows)
    if chunked:
        notes.append(
            f"{chunked} requests had neither usage nor finish_reason=length: their output tokens are "
            "counted as stream chunks, an undercount when a chunk carries several tokens "
            "(speculation). Have the server send usage (stream_options.include_usage)."
        )
    if notes:
        lines += ["## Notes", ""] + [f"- {n}" for n in notes] + [""]
    return "\n".join(lines)


def write_outputs(res: SweepResults, out: Path, *, plots: bool = True) -> list[Path]:
    """results.csv/json, transition.csv, the PNGs and report.md; returns the files written.

    `plots=False` skips the PNGs (seconds each with matplotlib): the sweep saves its
    data after every point that way and draws once per variant.
    """
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "results.csv", out / "results.json"]
    write_results_csv(res.rows, written[0])
    written[1].write_text(res.to_json())
    names: list[str] = []
    if res.rows:
        names += ["throughput.png", "latency.png", "goodput.png"]
        if plots:
            plot_throughput(res.rows, out / "throughput.png")
            plot_latency(res.rows, out / "latency.png")
            plot_goodput(res.rows, out / "goodput.png", str(res.settings.get("slo_text", "")))
    if res.transitions:
        write_transition_csv(res.transitions, out / "transition.csv")
        written.append(out / "transition.csv")
        names.append("transition.png")
        if plots:
            plot_transition(res.transitions, "dynamic", out / "transition.png")
    (out / "report.md").write_text(render_report(res, names))
    return written + ([out / p for p in names] if plots else []) + [out / "report.md"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Rebuild report.md and plots from OUT_DIR/results.json")
    p.add_argument("out_dir", type=Path)
    a = p.parse_args(argv)
    src = a.out_dir / "results.json"
    if not src.exists():
        print(f"no {src}: run python -m loadtests.sweep first", file=sys.stderr)
        return 2
    for f in write_outputs(SweepResults.from_json(src.read_text()), a.out_dir):
        print(f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
