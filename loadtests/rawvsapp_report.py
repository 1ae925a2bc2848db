"""report.md of `loadtests.rawvsapp`: raw SGLang vs the app per mode, the goals, the profiles."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loadtests.markdown import table as markdown_table

__all__ = ["comparisons", "write_report"]

RATIO_GOAL = 0.95  # app output tok/s over raw, streaming, at c >= RATIO_FROM_C
RATIO_FROM_C = 32
TTFT_GOAL_MS = 5.0  # app TTFT p50 over raw at c = 1


def _f(x: float | None, fmt: str = "{:,.0f}") -> str:
    return "" if x is None else fmt.format(x)


def comparisons(points: list[dict[str, Any]], max_load: float) -> list[dict[str, Any]]:
    """Each app variant beside raw for every (speculation, stream, concurrency) both measured."""
    by_key = {(p["target"], p["speculation"], p["stream"], p["concurrency"]): p for p in points}
    out = []
    for (target, spec, stream, c), app in sorted(by_key.items()):
        raw = by_key.get(("raw", spec, stream, c))
        if target == "raw" or raw is None:
            continue
        loads = [x["client_load"] for x in (raw, app) if x["client_load"] is not None]
        bound = bool(loads) and max(loads) > max_load
        ratio = app["output_tok_s"] / raw["output_tok_s"] if raw["output_tok_s"] else None
        ttft = (
            app["ttft_p50_ms"] - raw["ttft_p50_ms"]
            if app["ttft_p50_ms"] is not None and raw["ttft_p50_ms"] is not None
            else None
        )
        out.append(
            {"target": target, "replicas": app.get("replicas", 1), "speculation": spec, "stream": stream, "concurrency": c, "raw": raw, "app": app,
             "ratio": ratio, "ttft_overhead_ms": ttft, "client_bound": bound, "client_load": max(loads, default=None)}
        )  # fmt: skip
    return out


def _table(rows: list[dict[str, Any]]) -> str:
    body = []
    for r in rows:
        raw, app = r["raw"], r["app"]
        ratio = "client-bound" if r["client_bound"] else _f(r["ratio"], "{:.3f}x")
        body.append(
            [
                r["concurrency"],
                _f(raw["output_tok_s"]),
                _f(app["output_tok_s"]),
                ratio,
                _f(raw["ttft_p50_ms"], "{:.1f}"),
                _f(app["ttft_p50_ms"], "{:.1f}"),
                _f(r["ttft_overhead_ms"], "{:+.1f}"),
                _f(raw["ttft_p99_ms"], "{:.0f}"),
                _f(app["ttft_p99_ms"], "{:.0f}"),
                _f(raw["tpot_p50_ms"], "{:.2f}"),
                _f(app["tpot_p50_ms"], "{:.2f}"),
                _f(raw["itl_p99_ms"], "{:.1f}"),
                _f(app["itl_p99_ms"], "{:.1f}"),
                _f(r["client_load"], "{:.0%}"),
                f"{raw['errors']}/{app['errors']}",
            ]  # fmt: skip
        )
    header = [
        "c", "raw tok/s", "app tok/s", "app/raw", "raw TTFT p50 ms", "app TTFT p50 ms", "TTFT Δ ms",
        "raw TTFT p99", "app TTFT p99", "raw TPOT p50 ms", "app TPOT p50 ms", "raw ITL p99 ms", "app ITL p99 ms",
        "client load", "errors raw/app",
    ]  # fmt: skip
    return markdown_table(header, body)


SCALE_GOAL = 1.9  # two replicas over one raw server at the highest concurrency


def _goals(rows: list[dict[str, Any]]) -> list[str]:
    lines = []
    for target, spec in sorted({(r["target"], r["speculation"]) for r in rows}):
        streamed = [r for r in rows if (r["target"], r["speculation"]) == (target, spec) and r["stream"]]
        replicas = streamed[0]["replicas"] if streamed else 1
        if replicas > 1:
            top = max(streamed, key=lambda r: r["concurrency"])
            goal = SCALE_GOAL * replicas / 2
            ok = "met" if (top["ratio"] or 0) >= goal and not top["client_bound"] else "not met"
            lines.append(
                f"- {target} ({replicas} replicas), speculation {spec}: >= {goal:g}x one raw server at "
                f"c={top['concurrency']}: **{ok}** ({_f(top['ratio'], '{:.3f}x')}"
                f"{', client-bound' if top['client_bound'] else ''})"
            )
            continue
        judged = [r for r in streamed if r["concurrency"] >= RATIO_FROM_C and not r["client_bound"]]
        if judged:
            low = [r for r in judged if r["ratio"] is None or r["ratio"] < RATIO_GOAL]
            verdict = "met" if not low else "not met at c = " + ", ".join(str(r["concurrency"]) for r in low)
            worst = min((r["ratio"] or 0.0) for r in judged)
            lines.append(
                f"- {target}, speculation {spec}: >= {RATIO_GOAL}x raw tok/s at every c >= {RATIO_FROM_C} (streaming): "
                f"**{verdict}** (lowest {worst:.3f}x)"
            )
        loaded = next(
            (r["app"] for r in sorted(streamed, key=lambda r: r["concurrency"]) if r["concurrency"] > 1), None
        )
        if loaded is not None and loaded["ttft_p50_ms"] and loaded["ttft_p99_ms"] is not None:
            ratio = loaded["ttft_p99_ms"] / loaded["ttft_p50_ms"]
            lines.append(
                f"- {target}, speculation {spec}: no first-token stall after the switch (TTFT p99 <= 2x p50 at "
                f"the first loaded point, c={loaded['concurrency']}): **{'met' if ratio <= 2 else 'not met'}** "
                f"(p50 {loaded['ttft_p50_ms']:.0f} ms, p99 {loaded['ttft_p99_ms']:.0f} ms)"
            )
        one = next((r for r in streamed if r["concurrency"] == 1), None)
        if one is not None and one["ttft_overhead_ms"] is not None:
            ok = "met" if one["ttft_overhead_ms"] <= TTFT_GOAL_MS else "not met"
            lines.append(
                f"- {target}, speculation {spec}: TTFT p50 overhead at c=1 <= {TTFT_GOAL_MS:g} ms: **{ok}** "
                f"({one['ttft_overhead_ms']:+.1f} ms)"
            )
    bound = [r for r in rows if r["client_bound"]]
    if bound:
        lines.append(
            "- not reported (the client ran above its calibrated limit): "
            + ", ".join(
                f"{r['speculation']}/{'stream' if r['stream'] else 'plain'}/c={r['concurrency']}"
                for r in bound
            )
        )
    return lines


def write_report(
    path: Path, data: dict[str, Any], profiles: list[str], notes: list[str], max_load: float
) -> None:
    s = data["settings"]
    rows = comparisons(data["points"], max_load)
    ceiling = data.get("ceiling_chunks_s")
    lines = [
        "# SGLang's server vs the specflip app",
        "",
        f"{data['when']}. Config `{s['config']}`; Locust with {s['locust_processes']} process(es), "
        f"{s['api']} API, {s['input_len']} prompt words, {s['output_len']} output tokens (ignore_eos), "
        f"{s['warmup']:g} s warm-up + {s['duration']:g} s measured per point. raw = `sglang.launch_server` with "
        "the replica's engine arguments (plain engine for speculation off, EAGLE-3 for on); app variants = "
        "`specflip serve` with their config, speculation set by operator override.",
        "",
        f"Client ceiling: {ceiling:,.0f} chunks/s (calibrated); a point above {max_load:.0%} of it is client-bound."
        if ceiling
        else "Client ceiling: not calibrated for this run (no --calibration): client load unchecked.",
        *[f"\nNote: {n}" for n in notes],
        "",
        "## Goals",
        "",
        *(_goals(rows) or ["- no point measured on both targets yet"]),
    ]
    for target in sorted({r["target"] for r in rows}):
        for spec in sorted({r["speculation"] for r in rows}):
            for stream in (True, False):
                part = [
                    r for r in rows if (r["target"], r["speculation"], r["stream"]) == (target, spec, stream)
                ]
                if part:
                    lines += [
                        "",
                        f"## {target} vs raw, speculation {spec}, {'streaming' if stream else 'not streamed'}",
                        "",
                        _table(part),
                    ]
    if profiles:
        lines += ["", "## Profiles", "", *profiles]
    path.write_text("\n".join(lines) + "\n")
