"""The whole sweep end to end with real Locust: four variants launched by command (the stand-in
app plays the app; test_sweep_real_app.py runs the sweep against the real app), CSV, plots, report."""

from __future__ import annotations

import csv
import re
import shlex
import sys
from pathlib import Path

import matplotlib.image as mpimg
import pytest

from loadtests.sweep.results import read_results_csv
from loadtests.sweep.run import concurrency_levels, main
from tests.loadtests.conftest import TOKEN

STANDIN = Path(__file__).resolve().parents[1] / "openai_standin.py"
OUTPUT_LEN, DURATION = 16, 2.0


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("sweep")
    cmd = f"{shlex.quote(sys.executable)} {shlex.quote(str(STANDIN))} --port {{port}} --mode {{config}} --token {TOKEN}"
    argv = [
        "--launch-cmd", cmd, "--token", TOKEN, "--variants", "on,off,dynamic,adaptive",
        "--variant-config", "on=dynamic", "--variant-config", "off=dynamic", "--variant-config", "dynamic=dynamic",
        "--variant-config", "adaptive=adaptive", "--concurrency", "1,4", "--duration", str(DURATION),
        "--warmup", "0.5", "--transition", "low=1,high=8,low_s=2,high_s=3,tail_s=2",
        "--transition-variants", "dynamic,off", "--input-len", "16", "--output-len", str(OUTPUT_LEN),
        "--out", str(out), "--title", "e2e", "--progress-every", "1",
    ]  # fmt: skip
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(argv)
    assert rc == 0, buf.getvalue()[-3000:]
    return out, buf.getvalue()


@pytest.mark.slow
def test_progress_lines(sweep: tuple[Path, str]) -> None:
    _, log = sweep
    for v in ("on", "off", "dynamic", "adaptive"):
        for c in (1, 4):
            assert re.search(
                rf"^\[sweep\] variant={v} c={c} \d+/\d+s ok=\d+ err=0 tok/s=[\d.]+", log, re.M
            ), (
                v,
                c,
            )
            assert re.search(rf"^\[sweep\] variant={v} c={c} done: ok=\d+ err=0 tok/s=", log, re.M)
    assert re.search(
        r"^\[sweep\] variant=dynamic transition \d+/7s phase=high users=8 ok=\d+ err=0 tok/s=[\d.]+ modes=r0:\w+ r1:\w+",
        log,
        re.M,
    )
    launches = re.findall(r"^\[launch\] variant=(\w+) \$ ", log, re.M)
    assert launches == ["on", "adaptive"]  # on/off/dynamic share one app (override), adaptive has its own
    assert "[launch] variant=off override=off for all replicas" in log


@pytest.mark.slow
def test_results_csv_content(sweep: tuple[Path, str]) -> None:
    out, _ = sweep
    rows = {(r.variant, r.concurrency): r for r in read_results_csv(out / "results.csv")}
    assert set(rows) == {(v, c) for v in ("on", "off", "dynamic", "adaptive") for c in (1, 4)}
    for (_, c), r in rows.items():
        assert r.ok > 0 and r.errors == 0 and r.duration_s == DURATION and r.chunk_counted == 0
        # every request returns OUTPUT_LEN tokens (usage chunk); tokens count by arrival, so the
        # rate is the completed requests' tokens up to the parts of the c in flight at each edge
        edge = c * OUTPUT_LEN / DURATION
        assert r.output_tok_s == pytest.approx(r.ok * OUTPUT_LEN / DURATION, abs=edge)
        assert r.req_s == pytest.approx(r.ok / DURATION, rel=1e-4)
        assert r.goodput_req_s == pytest.approx(r.req_s, rel=1e-4)  # default SLOs are loose for the stand-in
        assert 0 < r.ttft_p50_ms <= r.ttft_p90_ms <= r.ttft_p99_ms  # type: ignore[operator]
        assert 0 < r.tpot_p50_ms <= r.tpot_p90_ms <= r.tpot_p99_ms  # type: ignore[operator]
    # the measurement separates the modes: ON emits 3 tokens per step, so lower TPOT at c=1
    assert rows[("on", 1)].tpot_p50_ms < 0.8 * rows[("off", 1)].tpot_p50_ms  # type: ignore[operator]
    assert (rows[("on", 1)].mean_accept_length, rows[("on", 1)].spec_on_fraction) == (3.0, 1.0)
    assert (rows[("off", 4)].mean_accept_length, rows[("off", 4)].spec_on_fraction) == (None, 0.0)
    assert (rows[("adaptive", 4)].mean_accept_length, rows[("adaptive", 4)].spec_on_fraction) == (None, None)
    with (out / "runs" / "on" / "c1" / "locust_stats.csv").open() as fh:
        kinds = {row["Type"] for row in csv.DictReader(fh)}
    assert {"POST", "TTFT", "TPOT", "ITL", "E2E"} <= kinds


@pytest.mark.slow
def test_transition_timeline(sweep: tuple[Path, str]) -> None:
    out, _ = sweep
    with (out / "transition.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    dyn = [r for r in rows if r["variant"] == "dynamic"]
    assert {r["replica_id"] for r in dyn} == {"r0", "r1"}
    assert {r["phase"] for r in dyn} >= {"low", "high", "low2"}
    # 8 users over 2 replicas is above the stand-in policy's threshold: the policy turns speculation off
    assert any(r["mode"] == "off" for r in dyn if r["phase"] == "high")
    assert all(r["mode"] == "on" for r in dyn if r["phase"] == "low" and float(r["t_s"]) < 1.5)
    assert {r["mode"] for r in rows if r["variant"] == "off"} == {"off"}
    times = [float(r["t_s"]) for r in dyn if r["replica_id"] == "r0"]
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert len(times) >= 8 and max(gaps) < 3.0  # polled every ~0.5 s (slower on a loaded host)


@pytest.mark.slow
def test_report_and_plots(sweep: tuple[Path, str]) -> None:
    out, _ = sweep
    md = (out / "report.md").read_text()
    lines = md.splitlines()
    rows = {(r.variant, r.concurrency): r for r in read_results_csv(out / "results.csv")}
    on1 = rows[("on", 1)]
    assert f"| on | 1 | {on1.output_tok_s:.1f} | {on1.req_s:.2f} | {on1.goodput_req_s:.2f} |" in md
    for c in (1, 4):
        best = max(rows[("on", c)].output_tok_s, rows[("off", c)].output_tok_s)
        ratio_line = next(ln for ln in lines if ln.startswith(f"| {c} | o"))
        cells = [x.strip() for x in ratio_line.strip("|").split("|")]
        assert float(cells[2]) == pytest.approx(best, abs=0.05)
        assert float(cells[3]) == pytest.approx(rows[("dynamic", c)].output_tok_s / best, abs=5e-4)
        assert float(cells[5]) == pytest.approx(rows[("adaptive", c)].output_tok_s / best, abs=5e-4)
    assert "| dynamic | high | 2-5 | 8 |" in md and "| off | low2 | 5-7 | 1 |" in md
    for png in ("throughput.png", "latency.png", "goodput.png", "transition.png"):
        assert f"![{png}]({png})" in md
        img = mpimg.imread(out / png)
        assert img.shape[0] >= 300 and img.shape[1] >= 500 and img[..., :3].std() > 0.05


def test_concurrency_levels() -> None:
    assert concurrency_levels(None, 20) == [1, 2, 4, 8, 16, 20]
    assert concurrency_levels(None, 8) == [1, 2, 4, 8]
    assert concurrency_levels("4,1,2,2", None) == [1, 2, 4]
    with pytest.raises(ValueError):
        concurrency_levels(None, None)
    with pytest.raises(ValueError):
        concurrency_levels("0,1", None)


def test_cli_refuses_what_it_cannot_do(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--concurrency", "1"]) == 2  # neither --target nor --launch-cmd
    assert (
        main(
            [
                "--target",
                "http://127.0.0.1:9",
                "--variants",
                "on,adaptive",
                "--concurrency",
                "1",
                "--token",
                "t",
            ]
        )
        == 2
    )
    assert "need their own app" in capsys.readouterr().err
    assert main(["--target", "http://127.0.0.1:9", "--variants", "fast", "--concurrency", "1"]) == 2
    assert main(["--target", "http://127.0.0.1:9", "--concurrency", "1", "--transition", "low=1"]) == 2
    assert "needs high=" in capsys.readouterr().err
    assert main(["--target", "http://127.0.0.1:9", "--concurrency", "1", "--token", ""]) == 2
    assert "pass --token" in capsys.readouterr().err


@pytest.mark.slow
def test_a_variant_that_cannot_start_does_not_lose_the_others(tmp_path: Path) -> None:
    cmd = f"{shlex.quote(sys.executable)} {shlex.quote(str(STANDIN))} --port {{port}} --mode {{config}} --token {TOKEN}"
    argv = [
        "--launch-cmd", cmd, "--token", TOKEN, "--variants", "adaptive,on", "--variant-config", "on=dynamic",
        "--variant-config", "adaptive=broken", "--concurrency", "1", "--duration", "1", "--warmup", "0.5",
        "--transition", "none", "--out", str(tmp_path), "--output-len", "8",
    ]  # fmt: skip
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(argv)
    assert rc == 1  # the failure is reported...
    assert [(r.variant, r.concurrency) for r in read_results_csv(tmp_path / "results.csv")] == [("on", 1)]
    md = (tmp_path / "report.md").read_text()
    assert "- variant adaptive failed: the app exited with code 2" in md  # ...and recorded
    assert "invalid choice: 'broken'" in (tmp_path / "launch" / "launch-adaptive.log").read_text()
