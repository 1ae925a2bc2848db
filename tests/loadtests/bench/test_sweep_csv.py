"""The sweep.csv reader the result scripts share (loadtests.bench.sweep_csv): files or folders, rows in
order, missing paths named, rows split by their host."""

from __future__ import annotations

from pathlib import Path

from loadtests.bench import sweep_csv


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_files_and_folders_read_in_order_and_missing_ones_named(tmp_path: Path) -> None:
    a = _write(tmp_path / "run" / "sweep.csv", "variant,concurrency\non,2\noff,2\n")
    b = _write(tmp_path / "b.csv", "variant,concurrency,host\non,8,h1\n")
    rows = sweep_csv.read([a.parent, b])
    assert [(r["variant"], r["concurrency"]) for r in rows] == [("on", "2"), ("off", "2"), ("on", "8")]
    assert sweep_csv.missing([a.parent, b, tmp_path / "nowhere", tmp_path]) == [
        str(tmp_path / "nowhere"),
        str(tmp_path),  # a folder without a sweep.csv
    ]


def test_rows_split_by_host_in_first_seen_order() -> None:
    rows = [{"host": "h2", "v": "1"}, {"v": "2"}, {"host": "h1", "v": "3"}, {"host": "h2", "v": "4"}]
    split = sweep_csv.by_host(rows)
    assert list(split) == ["h2", "", "h1"]
    assert [r["v"] for r in split["h2"]] == ["1", "4"] and [r["v"] for r in split[""]] == ["2"]
