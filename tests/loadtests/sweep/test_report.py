"""Results files, ratios, plots and the markdown report on a small hand-made result set."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import matplotlib.image as mpimg
import pytest

from loadtests.locust.records import RequestRecord
from loadtests.metrics import Slo, summarize
from loadtests.sweep.control import ReplicaSample
from loadtests.sweep.report import main as report_main
from loadtests.sweep.report import write_outputs
from loadtests.sweep.results import (
    PhaseResult,
    ResultRow,
    SweepResults,
    TransitionResult,
    ratios,
    read_results_csv,
    write_results_csv,
)

TOK_S = {  # (variant, concurrency) -> output tok/s
    ("on", 1): 100.0,
    ("off", 1): 80.0,
    ("dynamic", 1): 99.0,
    ("adaptive", 1): 90.0,
    ("on", 8): 150.0,
    ("off", 8): 200.0,
    ("dynamic", 8): 190.0,
    ("adaptive", 8): 150.0,
}


def row(variant: str, c: int) -> ResultRow:
    tok = TOK_S[(variant, c)]
    return ResultRow(
        variant=variant, concurrency=c, requests=10 * c, ok=10 * c, errors=0, duration_s=20.0, output_tokens=int(20 * tok),
        output_tok_s=tok, req_s=tok / 100, goodput_req_s=tok / 200, ttft_p50_ms=10.0 * c, ttft_p90_ms=12.0 * c,
        ttft_p99_ms=15.0 * c, tpot_p50_ms=5.0 + c, tpot_p90_ms=6.0 + c, tpot_p99_ms=7.0 + c, itl_p50_ms=5.5,
        itl_p99_ms=9.0, e2e_p50_ms=700.0, mean_accept_length=2.5 if variant != "off" else None,
        spec_on_fraction={"on": 1.0, "off": 0.0, "dynamic": 0.5, "adaptive": None}[variant], chunk_counted=0,
    )  # fmt: skip


ROWS = [row(v, c) for v in ("on", "off", "dynamic", "adaptive") for c in (1, 8)]


def transition() -> TransitionResult:
    recs = [
        RequestRecord(
            start=1000.0 + t,
            end=1000.5 + t,
            ok=True,
            status=200,
            output_tokens=4,
            ttft=0.1,
            tpot=0.1,
            itl=(0.1, 0.1, 0.1),
            token_source="usage",
        )
        for t in range(9)
    ]
    slo = Slo()
    phases = [
        PhaseResult(n, a, b, u, summarize(recs, 1000.0 + a, 1000.0 + b, slo))
        for n, a, b, u in (("low", 0, 3, 1), ("high", 3, 6, 8), ("low2", 6, 9, 1))
    ]
    samples = []
    for i in range(18):
        t = 1000.0 + 0.5 * i
        mode = "off" if 3 <= 0.5 * i < 6 else "on"
        for rid in ("r0", "r1"):
            samples.append(ReplicaSample(t, rid, mode, mode, 4 if mode == "off" else 1, 0, 2.5, 0))
    return TransitionResult("dynamic", 1000.0, phases, samples, [4.0] * 9, 1.0, True)


def results() -> SweepResults:
    return SweepResults(
        settings={
            "title": "unit",
            "target": "http://h:1",
            "model": "m",
            "api": "chat",
            "slo_text": "TTFT <= 1 ms",
        },
        rows=list(ROWS),
        transitions=[transition()],
        notes=["hand-made numbers"],
    )


def test_ratios_against_the_best_static_mode() -> None:
    got = {r.concurrency: r for r in ratios(ROWS)}
    assert got[1].best_static == "on" and got[1].best_static_tok_s == 100.0
    assert got[1].dynamic_ratio == pytest.approx(0.99) and got[1].adaptive_ratio == pytest.approx(0.90)
    assert got[8].best_static == "off"
    assert got[8].dynamic_ratio == pytest.approx(0.95) and got[8].adaptive_ratio == pytest.approx(0.75)
    assert ratios([r for r in ROWS if r.variant != "off"]) == []  # needs both static modes


def test_a_level_whose_client_ran_above_its_calibrated_limit_is_not_reported(tmp_path: Path) -> None:
    rows = [replace(r, client_load=0.9 if r.concurrency == 8 else 0.3) for r in ROWS]
    got = {r.concurrency: r for r in ratios(rows, max_client_load=0.7)}
    assert not got[1].client_bound and got[1].dynamic_ratio == pytest.approx(0.99)
    assert got[8].client_bound and got[8].dynamic_ratio is None and got[8].adaptive_ratio is None
    res = results()
    res.rows[:] = rows
    res.settings["max_client_load"] = 0.7
    write_outputs(res, tmp_path, plots=False)
    report = (tmp_path / "report.md").read_text()
    assert "| 8 | off | 200.0 | client-bound |" in report
    assert "more than 70% of its calibrated ceiling" in report
    assert ratios(rows) == ratios(ROWS)  # without a limit nothing is held back


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path]]:
    out = tmp_path_factory.mktemp("report")
    return out, write_outputs(results(), out)


def test_outputs_content(written: tuple[Path, list[Path]]) -> None:
    tmp_path, files = written
    names = {f.name for f in files}
    assert names == {
        "results.csv",
        "results.json",
        "transition.csv",
        "throughput.png",
        "latency.png",
        "goodput.png",
        "transition.png",
        "report.md",
    }

    back = read_results_csv(tmp_path / "results.csv")
    assert back == ROWS  # every column survives the CSV, None included

    tcsv = (tmp_path / "transition.csv").read_text().splitlines()
    assert tcsv[0] == "variant,t_s,phase,replica_id,mode,desired_mode,running,waiting,accept_length,override"
    assert len(tcsv) == 1 + 36
    assert "dynamic,3.000,high,r0,off,off,4,0,2.5,auto" in tcsv
    assert "dynamic,6.000,low2,r1,on,on,1,0,2.5,auto" in tcsv

    md = (tmp_path / "report.md").read_text()
    lines = md.splitlines()
    assert (
        "| on | 1 | 100.0 | 1.00 | 0.50 | 10.0 | 15.0 | 6.00 | 8.00 | 5.50 | 2.50 | 100% | 10 | 0 |" in lines
    )
    assert (
        "| off | 8 | 200.0 | 2.00 | 1.00 | 80.0 | 120.0 | 13.00 | 15.00 | 5.50 | - | 0% | 80 | 0 |" in lines
    )
    assert (
        "| adaptive | 8 | 150.0 | 1.50 | 0.75 | 80.0 | 120.0 | 13.00 | 15.00 | 5.50 | 2.50 | - | 80 | 0 |"
        in lines
    )
    assert "| 1 | on | 100.0 | 0.990 | yes | 0.900 |" in lines
    assert "| 8 | off | 200.0 | 0.950 | NO | 0.750 |" in lines
    table_rows = [ln for ln in lines if ln.startswith("| ") and ln.split("|")[1].strip() in TOK_S_VARIANTS]
    assert [ln.split("|")[1].strip() for ln in table_rows[:8]] == [
        "on",
        "on",
        "off",
        "off",
        "dynamic",
        "dynamic",
        "adaptive",
        "adaptive",
    ]
    assert "| dynamic | high | 3-6 | 8 | 4.0 |" in md  # 3 requests x 4 tokens in 3 s
    assert "- dynamic: mode changes seen per replica: r0: 2, r1: 2" in lines
    for png in ("throughput.png", "latency.png", "goodput.png", "transition.png"):
        assert f"![{png}]({png})" in md
    assert "- hand-made numbers" in lines


TOK_S_VARIANTS = {"on", "off", "dynamic", "adaptive"}


@pytest.mark.parametrize("png", ["throughput.png", "latency.png", "goodput.png", "transition.png"])
def test_pngs_decode_with_plausible_size(written: tuple[Path, list[Path]], png: str) -> None:
    img = mpimg.imread(written[0] / png)
    h, w = img.shape[:2]
    assert 300 <= h <= 1200 and 500 <= w <= 1500
    assert img.shape[2] in (3, 4)
    assert img[..., :3].std() > 0.05  # not a blank canvas


def test_chunk_counted_rows_get_a_note(tmp_path: Path) -> None:
    res = results()
    res.rows[0] = replace(res.rows[0], chunk_counted=7)
    write_outputs(res, tmp_path)
    assert "7 requests had neither usage nor finish_reason=length" in (tmp_path / "report.md").read_text()


def test_json_round_trip_and_rebuild_from_json(written: tuple[Path, list[Path]]) -> None:
    tmp_path, res = written[0], results()
    back = SweepResults.from_json((tmp_path / "results.json").read_text())
    assert back.rows == res.rows and back.settings == res.settings
    assert back.transitions[0].samples == res.transitions[0].samples
    assert back.transitions[0].phases == res.transitions[0].phases
    before = (tmp_path / "report.md").read_text()
    (tmp_path / "report.md").unlink()
    assert report_main([str(tmp_path)]) == 0
    assert (tmp_path / "report.md").read_text() == before
    assert report_main([str(tmp_path / "missing")]) == 2


def test_rows_and_points_are_window_summaries_and_older_files_still_load(tmp_path: Path) -> None:
    from dataclasses import asdict, fields

    from loadtests.metrics import Summary
    from loadtests.rawvsapp.run import Point

    recs = [
        RequestRecord(start=t, end=t + 0.5, ok=True, status=200, output_tokens=4, ttft=0.1, tpot=0.1,
                      itl=(0.1, 0.1, 0.1), token_source="usage")
        for t in range(9)
    ]  # fmt: skip
    s = summarize(recs, 0.0, 9.0, Slo())
    row = ResultRow.from_summary("dynamic", 8, s, 2.5, 0.5)
    point = Point(**asdict(s), target="raw", replicas=1, speculation="off", stream=True, concurrency=8,
                  client_load=None, repeat=1, engine_tok_s=4.0, window_start=9.0)  # fmt: skip
    summary_fields = {f.name for f in fields(Summary)}
    for record in (row, point):  # every field of the window's summary, not a hand-picked subset
        assert {k: v for k, v in asdict(record).items() if k in summary_fields} == asdict(s)
    assert Point.from_dict(asdict(point)) == point and ResultRow.from_dict(asdict(row)) == row
    # written before rows carried output_tokens (and points their p90s): absent fields read as None
    old = {k: v for k, v in asdict(point).items() if k not in ("output_tokens", "ttft_p90_ms", "ok")}
    back = Point.from_dict(old)
    assert (back.output_tokens, back.ttft_p90_ms, back.ok) == (None, None, None)
    assert (back.target, back.output_tok_s, back.repeat) == ("raw", point.output_tok_s, 1)
    csv_path = tmp_path / "results.csv"
    write_results_csv([row], csv_path)
    header, line = csv_path.read_text().splitlines()
    assert header.startswith("variant,concurrency,")  # the row's keys first, as before
    kept = [i for i, name in enumerate(header.split(",")) if name != "output_tokens"]
    csv_path.write_text(
        ",".join(header.split(",")[i] for i in kept)
        + "\n"
        + ",".join(line.split(",")[i] for i in kept)
        + "\n"
    )
    (old_row,) = read_results_csv(csv_path)
    assert old_row.output_tokens is None and old_row.variant == "dynamic" and old_row.concurrency == 8
