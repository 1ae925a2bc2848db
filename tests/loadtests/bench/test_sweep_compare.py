"""`loadtests.bench.sweep_compare` on a committed before/after (the H100 run of 2026-12-06): the medians,
spreads and ratios docs/benchmarks.md quotes for it, a metric an older sweep did not write, and the
command line's refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadtests.bench.sweep_compare import compare, main, render

RUN = Path(__file__).resolve().parents[3] / "docs" / "gpu" / "h100-2026-12-06"


def test_medians_spreads_and_ratios_of_a_before_after() -> None:
    result = compare([RUN / "before-sweep.csv", RUN / "sweep.csv"], ("output_tok_s", "refill_s"))
    assert list(result) == [("on", 256), ("off", 256)]  # the first file's variants and levels, in order
    before, head = result[("off", 256)]
    assert before["output_tok_s"] == {"median": 5869.7, "min": 5642.5, "max": 6065.4, "n": 3}
    assert head["output_tok_s"] == {"median": 5637.7, "min": 5224.7, "max": 5683.6, "n": 3}
    assert before["refill_s"] is None and head["refill_s"] is None  # not a column of that sweep yet
    text = render(result, ["before", "HEAD"])
    assert "### off, c=256 (up to 3 runs each)" in text
    assert "| output_tok_s | 5,870 [5,642-6,065] | 5,638 [5,225-5,684] | 0.96 |" in text
    assert "| refill_s | - | - | - |" in text
    on = render({("on", 256): result[("on", 256)]}, ["before", "HEAD"])
    assert "| output_tok_s | 3,290 [3,273-3,371] | 3,245 [3,209-3,272] | 0.99 |" in on


def test_the_command_prints_the_tables_and_writes_the_numbers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cmp.json"
    argv = [
        str(RUN / "before-sweep.csv"),
        str(RUN / "sweep.csv"),
        "--names",
        "before,HEAD",
        "--json",
        str(out),
    ]
    assert main([*argv, "--metrics", "output_tok_s,tpot_p50_ms"]) == 0
    printed = capsys.readouterr().out
    assert "| metric | before | HEAD | HEAD / before |" in printed and "| tpot_p50_ms |" in printed
    doc = json.loads(out.read_text())
    assert [(d["variant"], d["concurrency"]) for d in doc] == [("on", 256), ("off", 256)]
    assert doc[1]["results"]["HEAD"]["output_tok_s"]["median"] == 5637.7


def test_a_name_missing_or_a_file_missing_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([str(RUN / "sweep.csv"), str(RUN / "before-sweep.csv"), "--names", "HEAD"]) == 2
    assert "1 names for 2 results" in capsys.readouterr().err
    assert main([str(tmp_path)]) == 2  # a folder without a sweep.csv
    assert "no sweep.csv at" in capsys.readouterr().err
