"""Per-class results of two-class runs (loadtests/locust/two_class.py) and the goodput of docs/routing.md.

    python -m loadtests.locust.two_class_report --run always-on=out/on --run always-off=out/off \\
        --run dynamic=out/dyn --run dynamic+classes=out/cls --ttft-slo-ms 500 --tpot-slo-ms 25 \\
        --out out/two-class --doc docs/benchmarks.md --command "bash docs/gpu/two_class.sh"

Each run folder holds Locust's `requests-*.jsonl` (records with `request_class`, `replica`, `mode`).
Writes `results.json` and a markdown table to `--out`, and the table as a section of `--doc`.
Goodput (docs/routing.md): interactive requests within both SLOs per second, and batch output tok/s.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from loadtests.locust.records import RequestRecord, read_records
from loadtests.markdown import table, write_section
from loadtests.metrics import percentile

__all__ = ["ClassResult", "summarize_class", "main"]


@dataclass(frozen=True)
class ClassResult:
    run: str
    request_class: str
    requests: int
    errors: int
    output_tok_s: float
    ttft_p50_ms: float | None
    tpot_p50_ms: float | None
    slo_attainment: float | None  # share of ok requests within both SLOs
    within_slo_per_s: float
    on_share: float | None  # share of ok requests answered by a replica whose mode header said on


def summarize_class(
    run: str, cls: str, records: list[RequestRecord], ttft_slo_s: float, tpot_slo_s: float
) -> ClassResult:
    mine = [r for r in records if r.request_class == cls and r.error != "cancelled"]
    ok = [r for r in mine if r.ok]
    if not ok:
        return ClassResult(run, cls, len(mine), len(mine), 0.0, None, None, None, 0.0, None)
    t0, t1 = min(r.start for r in ok), max(r.end for r in ok)
    span = max(t1 - t0, 1e-9)
    within = [r for r in ok if (r.ttft or 0) <= ttft_slo_s and (r.tpot or 0) <= tpot_slo_s]
    ttft = percentile([r.ttft for r in ok if r.ttft is not None], 50)
    tpot = percentile([r.tpot for r in ok if r.tpot is not None], 50)
    with_mode = [r for r in ok if r.mode]
    return ClassResult(
        run,
        cls,
        len(mine),
        len(mine) - len(ok),
        sum(r.output_tokens for r in ok) / span,
        None if ttft is None else ttft * 1e3,
        None if tpot is None else tpot * 1e3,
        len(within) / len(ok),
        len(within) / span,
        sum(r.mode == "on" for r in with_mode) / len(with_mode) if with_mode else None,
    )


def _fmt(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", action="append", required=True, help="name=folder with requests-*.jsonl")
    p.add_argument("--ttft-slo-ms", type=float, required=True)
    p.add_argument("--tpot-slo-ms", type=float, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--doc", type=Path, help="markdown file to write the section into")
    p.add_argument("--command", default="", help="the command that produced the runs (for the doc)")
    p.add_argument("--heading", default="## two-class routing")
    args = p.parse_args(argv)
    results: list[ClassResult] = []
    goodput: dict[str, dict[str, float]] = {}
    for spec in args.run:
        name, _, folder = spec.partition("=")
        records = list(read_records(sorted(Path(folder).glob("requests-*.jsonl"))))
        inter = summarize_class(name, "interactive", records, args.ttft_slo_ms / 1e3, args.tpot_slo_ms / 1e3)
        batch = summarize_class(name, "batch", records, args.ttft_slo_ms / 1e3, args.tpot_slo_ms / 1e3)
        results += [inter, batch]
        goodput[name] = {
            "interactive_in_slo_req_s": inter.within_slo_per_s,
            "batch_tok_s": batch.output_tok_s,
        }
    rows = []
    for r in results:
        rows.append(
            [
                r.run,
                r.request_class,
                r.requests,
                r.errors,
                _fmt(r.ttft_p50_ms, 0),
                _fmt(r.tpot_p50_ms),
                _fmt(None if r.slo_attainment is None else 100 * r.slo_attainment, 0),
                _fmt(r.output_tok_s, 0),
                _fmt(None if r.on_share is None else 100 * r.on_share, 0),
                _fmt(r.within_slo_per_s, 2) + " req/s"
                if r.request_class == "interactive"
                else _fmt(r.output_tok_s, 0) + " tok/s",
            ]
        )
    md = table(
        [
            "run",
            "class",
            "requests",
            "errors",
            "TTFT p50 ms",
            "TPOT p50 ms",
            "in SLO %",
            "out tok/s",
            "on ON %",
            "goodput",
        ],
        rows,
        "llrrrrrrrr",
    )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(
        json.dumps({"results": [asdict(r) for r in results], "goodput": goodput}, indent=2)
    )
    (args.out / "table.md").write_text(md)
    print(md)
    if args.doc is not None:
        body = (
            f"{args.heading}\n\n"
            f"Written by `{args.command or 'python -m loadtests.locust.two_class_report'}`. SLO: TTFT <= "
            f"{args.ttft_slo_ms:g} ms and TPOT <= {args.tpot_slo_ms:g} ms. Goodput (docs/routing.md): "
            "interactive requests within both SLOs per second, and batch output tok/s.\n\n" + md
        )
        write_section(args.doc, body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
