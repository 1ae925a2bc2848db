"""The short CPU sweep against the REAL app (tiny pair, 2 replicas), for the integration.

Runs only when the app is wired in; until then it is skipped with the recipe:

    SPECFLIP_E2E_LAUNCH_CMD='specflip serve --config {config} --port {port}' \\
    SPECFLIP_E2E_CONFIG=configs/cpu-tiny.yaml \\
    SPECFLIP_E2E_ADAPTIVE_CONFIG=configs/cpu-tiny-adaptive.yaml \\
    SPECFLIP_E2E_TOKEN=... python -m pytest tests/loadtests/test_sweep_real_app.py -q

(or SPECFLIP_E2E_TARGET=http://127.0.0.1:8000 for an app that is already running;
adaptive then needs its own launch and is left out). The assertions hold for any
real app: no stand-in numbers are assumed.
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
from pathlib import Path

import matplotlib.image as mpimg
import pytest

from loadtests.results import read_results_csv
from loadtests.sweep import main

LAUNCH = os.environ.get("SPECFLIP_E2E_LAUNCH_CMD", "")
TARGET = os.environ.get("SPECFLIP_E2E_TARGET", "")
LEVELS = [int(c) for c in os.environ.get("SPECFLIP_E2E_CONCURRENCY", "1,2").split(",")]

pytestmark = [
    pytest.mark.serve,
    pytest.mark.slow,
    pytest.mark.skipif(not (LAUNCH or TARGET), reason="real app not wired: set SPECFLIP_E2E_LAUNCH_CMD or "
                       "SPECFLIP_E2E_TARGET (see this file's docstring)"),
]  # fmt: skip


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str], str]:
    out = tmp_path_factory.mktemp("real_sweep")
    variants = ["on", "off", "dynamic"]
    argv = ["--token", os.environ.get("SPECFLIP_E2E_TOKEN", ""), "--out", str(out), "--progress-every", "5",
            "--concurrency", ",".join(map(str, LEVELS)), "--duration", os.environ.get("SPECFLIP_E2E_DURATION", "15"),
            "--warmup", "5", "--input-len", "32", "--output-len", "32", "--title", "CPU tiny pair, 2 replicas",
            "--transition", os.environ.get("SPECFLIP_E2E_TRANSITION", "low=1,high=8,low_s=10,high_s=20,tail_s=10"),
            "--transition-variants", "dynamic", "--slo-ttft-ms", "none", "--slo-tpot-ms", "none"]  # fmt: skip
    if LAUNCH:
        argv += ["--launch-cmd", LAUNCH]
        config = os.environ.get("SPECFLIP_E2E_CONFIG", "")
        for v in variants if config else []:
            argv += ["--variant-config", f"{v}={config}"]
        if os.environ.get("SPECFLIP_E2E_ADAPTIVE_CONFIG"):
            variants.append("adaptive")
            argv += ["--variant-config", f"adaptive={os.environ['SPECFLIP_E2E_ADAPTIVE_CONFIG']}"]
    else:
        argv += ["--target", TARGET]
    argv += ["--variants", ",".join(variants)]
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(argv)
    assert rc == 0, buf.getvalue()[-4000:]
    return out, variants, buf.getvalue()


def test_every_point_measured_with_exact_token_counts(sweep: tuple[Path, list[str], str]) -> None:
    out, variants, log = sweep
    rows = {(r.variant, r.concurrency): r for r in read_results_csv(out / "results.csv")}
    assert set(rows) == {(v, c) for v in variants for c in LEVELS}
    for key, r in rows.items():
        assert r.ok > 0 and r.errors == 0, key
        assert r.chunk_counted == 0, f"{key}: the server sent no usage chunk (see loadtests/README.md)"
        assert r.output_tok_s == pytest.approx(r.ok * 32 / r.duration_s, rel=1e-3), key  # ignore_eos honoured
        assert r.ttft_p50_ms and r.tpot_p50_ms and r.ttft_p50_ms > 0 and r.tpot_p50_ms > 0
    for c in LEVELS:
        assert rows[("on", c)].spec_on_fraction == 1.0 and rows[("off", c)].spec_on_fraction == 0.0
        accept = rows[("on", c)].mean_accept_length
        assert accept is not None and accept > 1.0, "a trained draft accepts more than one token per step"
    assert "[sweep] variant=on c=1" in log


def test_transition_timeline_has_every_replica(sweep: tuple[Path, list[str], str]) -> None:
    out, _, _ = sweep
    with (out / "transition.csv").open() as fh:
        dyn = [r for r in csv.DictReader(fh) if r["variant"] == "dynamic"]
    assert len({r["replica_id"] for r in dyn}) == 2
    assert {r["phase"] for r in dyn} >= {"low", "high", "low2"}
    assert {r["mode"] for r in dyn} <= {"on", "off"}


def test_report_and_plots(sweep: tuple[Path, list[str], str]) -> None:
    out, variants, _ = sweep
    md = (out / "report.md").read_text()
    rows = read_results_csv(out / "results.csv")
    for r in rows:
        assert f"| {r.variant} | {r.concurrency} | {r.output_tok_s:.1f} |" in md
    assert "## Ratios" in md and all(f"| {c} | o" in md for c in LEVELS)
    for png in ("throughput.png", "latency.png", "goodput.png", "transition.png"):
        img = mpimg.imread(out / png)
        assert img.shape[0] >= 300 and img[..., :3].std() > 0.05, png
