"""report.md of `loadtests.rawvsapp`: raw SGLang vs the app per mode, the goals, the client
agreement with the engine's own counters, the profiles.

A level measured in several windows is reported by its median window (the lowest and highest
beside it); ratios are of medians.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from loadtests.markdown import table as markdown_table

__all__ = ["comparisons", "levels", "write_report"]

RATIO_GOAL = 0.95  # app output tok/s over raw, at every c >= RATIO_FROM_C
RATIO_FROM_C = 32
TTFT_GOAL_MS = 5.0  # app TTFT p50 over raw at c = 1
FLIP_GOAL = 0.05  # app's OFF/ON (high c) and ON/OFF (c=1) within this of raw's
AGREE_GOAL = 0.10  # a client's tok/s within this of the engine's own count
SCALE_GOAL = 1.9  # two replicas over one raw server at the highest concurrency


def _f(x: float | None, fmt: str = "{:,.0f}") -> str:
    return "" if x is None else fmt.format(x)


def levels(points: list[dict[str, Any]]) -> dict[tuple[str, str, bool, int], dict[str, Any]]:
    """One entry per (target, speculation, stream, concurrency): the median window's fields, with
    `windows`, `tok_min`, `tok_max` and the median of the referee's rate (`engine_tok_s`)."""
    grouped: dict[tuple[str, str, bool, int], list[dict[str, Any]]] = defaultdict(list)
    for p in points:
        grouped[(p["target"], p["speculation"], p["stream"], p["concurrency"])].append(p)
    out = {}
    for key, windows in grouped.items():
        ranked = sorted(windows, key=lambda p: p["output_tok_s"])
        mid = dict(ranked[(len(ranked) - 1) // 2])  # the lower median: a real window, not a mean
        mid["output_tok_s"] = statistics.median(p["output_tok_s"] for p in ranked)
        engines = [p["engine_tok_s"] for p in ranked if p.get("engine_tok_s") is not None]
        mid["engine_tok_s"] = statistics.median(engines) if engines else None
        for field in ("engine_running", "engine_queued"):
            values = [p[field] for p in ranked if p.get(field) is not None]
            mid[field] = statistics.median(values) if values else None
        mid.update(windows=len(ranked), tok_min=ranked[0]["output_tok_s"], tok_max=ranked[-1]["output_tok_s"])
        out[key] = mid
    return out


def comparisons(points: list[dict[str, Any]], max_load: float) -> list[dict[str, Any]]:
    """Each app variant beside raw for every (speculation, stream, concurrency) both measured."""
    by_key = levels(points)
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


def _spread(p: dict[str, Any]) -> str:
    if p["windows"] < 2:
        return _f(p["output_tok_s"])
    return f"{p['output_tok_s']:,.0f} ({p['tok_min']:,.0f}-{p['tok_max']:,.0f}, {p['windows']} windows)"


def _table(rows: list[dict[str, Any]]) -> str:
    body = []
    for r in rows:
        raw, app = r["raw"], r["app"]
        ratio = "client-bound" if r["client_bound"] else _f(r["ratio"], "{:.3f}x")
        body.append(
            [
                r["concurrency"], _spread(raw), _spread(app), ratio, _f(raw["engine_tok_s"]), _f(app["engine_tok_s"]),
                _f(raw.get("engine_running"), "{:.0f}"), _f(app.get("engine_running"), "{:.0f}"),
                _f(raw.get("engine_queued"), "{:.1f}"), _f(app.get("engine_queued"), "{:.1f}"), _f(raw["ttft_p50_ms"], "{:.1f}"), _f(app["ttft_p50_ms"], "{:.1f}"), _f(r["ttft_overhead_ms"], "{:+.1f}"),
                _f(raw["ttft_p99_ms"], "{:.0f}"), _f(app["ttft_p99_ms"], "{:.0f}"), _f(raw["tpot_p50_ms"], "{:.2f}"),
                _f(app["tpot_p50_ms"], "{:.2f}"), _f(raw["itl_p99_ms"], "{:.1f}"), _f(app["itl_p99_ms"], "{:.1f}"),
                _f(r["client_load"], "{:.0%}"), f"{raw['errors']}/{app['errors']}",
            ]
        )  # fmt: skip
    header = [
        "c", "raw tok/s (median, min-max)", "app tok/s (median, min-max)", "app/raw", "raw engine tok/s",
        "app engine tok/s", "raw engine batch", "app engine batch",
        "raw engine queue", "app engine queue", "raw TTFT p50 ms", "app TTFT p50 ms", "TTFT Δ ms", "raw TTFT p99", "app TTFT p99",
        "raw TPOT p50 ms", "app TPOT p50 ms", "raw ITL p99 ms", "app ITL p99 ms", "client load", "errors raw/app",
    ]  # fmt: skip
    return markdown_table(header, body)


def _ratio_goal(rows: list[dict[str, Any]], target: str, spec: str, stream: bool) -> str | None:
    mine = [
        r
        for r in rows
        if (r["target"], r["speculation"], r["stream"]) == (target, spec, stream) and not r["client_bound"]
    ]
    # the loaded levels: c >= RATIO_FROM_C, or every c > 1 in a run without such levels (CPU)
    floor = RATIO_FROM_C if any(r["concurrency"] >= RATIO_FROM_C for r in mine) else 2
    judged = [r for r in mine if r["concurrency"] >= floor]
    if not judged:
        return None
    low = [r for r in judged if r["ratio"] is None or r["ratio"] < RATIO_GOAL]
    verdict = "met" if not low else "not met at c = " + ", ".join(str(r["concurrency"]) for r in low)
    worst = min((r["ratio"] or 0.0) for r in judged)
    kind = "streaming" if stream else "not streamed"
    levels_ = ", ".join(str(r["concurrency"]) for r in judged)
    return (
        f"- {target}, speculation {spec}, {kind}: >= {RATIO_GOAL}x raw tok/s (median) at every c in "
        f"{levels_}: **{verdict}** (lowest {worst:.3f}x)"
    )


def _flip_goals(rows: list[dict[str, Any]], target: str) -> list[str]:
    """The flip is worth on the app what it is worth on raw: OFF/ON at the highest c, ON/OFF at c=1."""
    by = {(r["speculation"], r["concurrency"]): r for r in rows if r["target"] == target and r["stream"]}
    lines: list[str] = []
    common = sorted({c for s, c in by if s == "off"} & {c for s, c in by if s == "on"})
    if not common:
        return lines
    for c, num, den in ((common[-1], "off", "on"), (common[0], "on", "off")):
        if c == common[0] and c != 1 and num == "on":
            continue
        a, b = by[(num, c)], by[(den, c)]
        if not (a["app"]["output_tok_s"] and b["app"]["output_tok_s"] and b["raw"]["output_tok_s"]):
            continue
        app_ratio = a["app"]["output_tok_s"] / b["app"]["output_tok_s"]
        raw_ratio = a["raw"]["output_tok_s"] / b["raw"]["output_tok_s"]
        ok = abs(app_ratio / raw_ratio - 1) <= FLIP_GOAL
        lines.append(
            f"- {target}: {num.upper()}/{den.upper()} at c={c} within {FLIP_GOAL:.0%} of raw's: "
            f"**{'met' if ok else 'not met'}** (app {app_ratio:.3f}, raw {raw_ratio:.3f})"
        )
    return lines


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
        for stream in (True, False):
            line = _ratio_goal(rows, target, spec, stream)
            if line:
                lines.append(line)
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
    for target in sorted({r["target"] for r in rows}):
        lines += _flip_goals(rows, target)
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


def _agreement(data: dict[str, Any]) -> list[str]:
    """Each client's tok/s beside the engine's own decode tok/s over the same span, raw server."""
    rows: list[tuple[str, dict[str, Any]]] = []
    for (target, spec, stream, _), p in sorted(levels(data["points"]).items()):
        if target == "raw" and stream and spec == "off" and p["engine_tok_s"] is not None:
            rows.append(("Locust (loadtests.locust.users)", p))
    rows += [(r["client"], r) for r in data.get("client_runs", []) if r["engine_tok_s"] is not None]
    if not rows:
        return []
    body = []
    for client, p in rows:
        ratio = p["output_tok_s"] / p["engine_tok_s"] if p["engine_tok_s"] else None
        verdict = "agree" if ratio is not None and abs(ratio - 1) <= AGREE_GOAL else "disagree"
        body.append(
            [client, p["concurrency"], _f(p["output_tok_s"]), _f(p["engine_tok_s"]), _f(ratio, "{:.3f}"),
             verdict, _f(p.get("tpot_p50_ms"), "{:.2f}"), _f(p.get("engine_prompt_tokens"))]
        )  # fmt: skip
    header = [
        "client",
        "c",
        "client tok/s",
        "engine decode tok/s",
        "client/engine",
        f"within {AGREE_GOAL:.0%}",
        "TPOT p50 ms",
        "prompt tokens/request (engine)",
    ]
    return [
        "",
        "## Clients against the engine's own count (raw server, speculation off)",
        "",
        "Locust: the median window's token-window rate; engine: the scheduler's decode-batch lines over "
        "the same window, weighted by the time each covered. SGLang's client: output tokens over its "
        "whole run (first request to last end, ramp-up and tail included); engine: the decode tokens "
        "its lines count over the client's run, divided by the client's duration (a line's own time "
        "base holds the server's idle gap before the run). First tokens, made by prefill, are in "
        "neither engine count. Prompt tokens per request: the engine's prefill lines over the span "
        "(which workload each client actually sent).",
        "",
        markdown_table(header, body),
    ]


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
        f"{s['api']} API, {s['input_len']} prompt words, output lengths {s['output_len']} x "
        f"[{1 - s['output_spread']:g}, {1 + s['output_spread']:g}] (ignore_eos), users staggered over "
        f"{s['stagger']:g} s; per level {s['settle']:g} s to settle, then {s['window']:g}-s windows "
        "(tokens counted by arrival). raw = `sglang.launch_server` with the replica's engine arguments "
        "(plain engine for speculation off, EAGLE-3 for on); app variants = `specflip serve` with their "
        "config, speculation set by operator override. Engine batch and queue: the mean `#running-req` "
        "and `#queue-req` of the engine's decode lines in the window (the app's from its replica's Ray "
        "worker log when its engine logs at info; else the batch its replica reports): the same batch "
        "on both targets with fewer tokens means a slower engine, a smaller batch an engine fed less.",
        "",
        f"Client ceiling: {ceiling:,.0f} chunks/s (calibrated); a point above {max_load:.0%} of it is client-bound."
        if ceiling
        else "Client ceiling: not calibrated for this run (no --calibration): client load unchecked.",
        *[f"\nNote: {n}" for n in notes],
        "",
        "## Goals",
        "",
        *(_goals(rows) or ["- no point measured on both targets yet"]),
        *_agreement(data),
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
