"""The steady-load goals from client_sweep results (loadtests.bench.sweep_goals): ratios of medians per
shape and level, each goal judged only where its variants ran (app vs SGLang's servers from c=16), and
flips per minute only in dynamic runs of at least a minute."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from loadtests.bench.sweep_goals import goals, main, render

COLUMNS = ["shape", "variant", "concurrency", "repeat", "output_tok_s", "flips", "duration_s"]


def _sweep(path: Path, rows: list[tuple]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(COLUMNS)
        w.writerows(rows)
    return path


ROWS = [
    # c=16: ON wins; dynamic's median 2,300 over ON's 2,400 = 0.958 (short); the app vs SGLang's servers
    *(("tree", "on", 16, k, v, "", 30) for k, v in enumerate([2400, 2380, 2420])),
    *(("tree", "off", 16, k, v, "", 30) for k, v in enumerate([1850, 1840, 1860])),
    *(("tree", "dynamic", 16, k, v, f, 30) for k, (v, f) in enumerate([(2300, 1), (2290, 3), (2310, 0)])),
    ("tree", "raw_eagle", 16, 0, 2500, "", 30),
    ("tree", "raw_plain", 16, 0, 2000, "", 30),
    # c=4: app vs raw not judged below 16; one dynamic run of two minutes with 4 flips: 3 after the first
    ("tree", "on", 4, 0, 900, "", 30),
    ("tree", "off", 4, 0, 700, "", 30),
    ("tree", "dynamic", 4, 0, 890, 4, 120),
    ("tree", "raw_eagle", 4, 0, 1000, "", 30),
]


def test_ratios_of_medians_judged_where_the_variants_ran(tmp_path: Path) -> None:
    result = goals(list(csv.DictReader(_sweep(tmp_path / "sweep.csv", ROWS).open())))
    c16, c4 = result[("tree", 16)], result[("tree", 4)]
    assert c16["ratios"]["dynamic / better static"] == pytest.approx(2300 / 2400)
    assert c16["ratios"]["app ON / raw_eagle"] == pytest.approx(2400 / 2500)
    assert c16["ratios"]["app OFF / raw_plain"] == pytest.approx(1850 / 2000)
    assert c16["ratios"]["dynamic / sglang_adaptive"] is None  # not run
    assert c4["ratios"]["dynamic / better static"] == pytest.approx(890 / 900)
    assert c4["ratios"]["app ON / raw_eagle"] is None  # below c=16: not a goal there
    assert c16["flips_per_min"] is None  # no dynamic run of a minute
    assert c4["flips_per_min"] == pytest.approx(3 / 2)
    text = render(result)
    assert "- dynamic / better static >= 0.97: met at tree c=4; short at tree c=16 (0.958)" in text
    assert "- app OFF / raw_plain >= 0.95: met at none; short at tree c=16 (0.925)" in text
    assert "- dynamic / sglang_adaptive >= 1.0: not measured" in text
    assert "over it at tree c=4 (1.50)" in text
    assert "| tree | 16 | 2,400 [2,380-2,420] (n=3) |" in text


def test_files_pool_and_a_missing_one_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = _sweep(tmp_path / "a" / "sweep.csv", ROWS[:3])
    b = _sweep(tmp_path / "b.csv", ROWS[3:])
    assert main([str(a.parent), str(b)]) == 0  # a folder holding a sweep.csv, and a file
    assert "| tree | 16 | 2,400 [2,380-2,420] (n=3) | 1,850 [1,840-1,860] (n=3) |" in capsys.readouterr().out
    assert main([str(tmp_path / "nowhere")]) == 2
    assert "no sweep.csv at" in capsys.readouterr().err


def test_rows_of_two_hosts_are_judged_apart_unless_pooled(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A sweep.csv merged from two hosts (a `host` column): one table per host, the ratios never across
    them; `--pool-hosts` pools them into one table."""
    path = tmp_path / "sweep.csv"
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow([*COLUMNS, "host"])
        w.writerows([*(r + ("host1",) for r in ROWS[:6]), ("tree", "off", 16, 0, 2500, "", 30, "host2")])
    assert main([str(path)]) == 0
    out = capsys.readouterr().out
    first, second = out.split("### host host2")
    assert (
        first.startswith("### host host1")
        and "| tree | 16 | 2,400 [2,380-2,420] (n=3) | 1,850 [1,840-1,860] (n=3) |" in first
    )
    assert "| tree | 16 | - | 2,500 | - |" in second  # host2's OFF alone: no ratio against host1's ON
    assert "dynamic / better static >= 0.97: not measured" in second
    assert main([str(path), "--pool-hosts"]) == 0
    out = capsys.readouterr().out
    assert "### host" not in out and "| 1,855 [1,840-2,500] (n=4) |" in out
