"""The short CPU sweep against the REAL app: real Locust, real Ray Serve, 2 CPU replicas of the
tiny trained pair on the real engine, all four variants (always ON, always OFF, dynamic, SGLang's
own speculative_adaptive) launched by command, plus the low->high->low transition.

The configs are deployments/examples/cpu-tiny{,-adaptive}.yaml pointed at the session's model
pair. SPECFLIP_E2E_TARGET=http://host:port instead sweeps an app that is already running
(on/off/dynamic through overrides; SPECFLIP_E2E_TOKEN is its control token).
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
import sys
from pathlib import Path

import matplotlib.image as mpimg
import pytest
import yaml

from loadtests.sweep.results import SweepResults, read_results_csv
from loadtests.sweep.run import main

EXAMPLES = Path(__file__).resolve().parents[3] / "deployments" / "examples"
TARGET = os.environ.get("SPECFLIP_E2E_TARGET", "")
LEVELS = [int(c) for c in os.environ.get("SPECFLIP_E2E_CONCURRENCY", "1,4").split(",")]
TOKEN = os.environ.get("SPECFLIP_E2E_TOKEN", "sweep-test-token")

pytestmark = [pytest.mark.serve, pytest.mark.slow]


def _config_for(pair, example: str, out: Path) -> str:
    """The example config with the session's model pair and a control token."""
    data = yaml.safe_load((EXAMPLES / example).read_text())
    data["model"].update(path=pair.target, draft_path=pair.draft)
    data.setdefault("serve", {})["control_token"] = TOKEN
    extra = data.get("engine", {}).get("extra", {})
    if "speculative_adaptive_config" in extra:
        extra["speculative_adaptive_config"] = str(EXAMPLES / extra["speculative_adaptive_config"])
    path = out / example
    path.write_text(yaml.safe_dump(data))
    return str(path)


@pytest.fixture(scope="module")
def sweep(model_pair, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str], str]:
    out = tmp_path_factory.mktemp("real_sweep")
    variants = ["on", "off", "dynamic"]
    argv = ["--token", TOKEN, "--out", str(out), "--progress-every", "5",
            "--concurrency", ",".join(map(str, LEVELS)), "--duration", os.environ.get("SPECFLIP_E2E_DURATION", "15"),
            "--warmup", "5", "--input-len", "32", "--output-len", "32", "--title", "CPU tiny pair, 2 replicas",
            "--transition", os.environ.get("SPECFLIP_E2E_TRANSITION", "low=1,high=8,low_s=10,high_s=20,tail_s=10"),
            "--transition-variants", "dynamic", "--slo-ttft-ms", "none", "--slo-tpot-ms", "none"]  # fmt: skip
    if TARGET:
        argv += ["--target", TARGET]
    else:
        config = _config_for(model_pair, "cpu-tiny.yaml", out)
        argv += ["--launch-cmd", f"{sys.executable} -m deployments serve --config {{config}} --port {{port}}"]
        argv += [f"--variant-config={v}={config}" for v in variants]
        variants.append("adaptive")
        argv += [f"--variant-config=adaptive={_config_for(model_pair, 'cpu-tiny-adaptive.yaml', out)}"]
    argv += ["--variants", ",".join(variants)]
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(argv)
    log = buf.getvalue()
    print(log[-3000:])
    # a failed variant's reason (with its app log's tail) sits mid-log: show it before the tail
    failed = [i for i, line in enumerate(log.splitlines()) if "failed" in line]
    lines = log.splitlines()
    why = "\n".join("\n".join(lines[i : i + 25]) for i in failed[:2])
    assert rc == 0, f"{why}\n...\n{log[-2000:]}"
    return out, variants, log


def test_every_point_measured_with_exact_token_counts(sweep: tuple[Path, list[str], str]) -> None:
    out, variants, log = sweep
    rows = {(r.variant, r.concurrency): r for r in read_results_csv(out / "results.csv")}
    assert set(rows) == {(v, c) for v in variants for c in LEVELS}
    for key, r in rows.items():
        assert r.ok > 0 and r.errors == 0, key
        assert r.chunk_counted == 0, f"{key}: the server sent no usage chunk (see loadtests/README.md)"
        # tokens are counted by arrival inside the window (loadtests.metrics): the requests that
        # completed in it (32 tokens each, ignore_eos) give or take those running across its edges
        edges = 2 * key[1] * 32
        assert abs(r.output_tok_s * r.duration_s - r.ok * 32) <= edges, (key, r.output_tok_s, r.ok)
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
    # the rows at full precision (results.json): the CSV's 6 significant digits round a second time
    # (460.9500 -> "460.95" -> 460.9 where the report, from the same row, says 461.0)
    rows = SweepResults.from_json((out / "results.json").read_text()).rows
    assert [(r.variant, r.concurrency) for r in rows] == [
        (r.variant, r.concurrency) for r in read_results_csv(out / "results.csv")
    ]
    for r in rows:
        assert f"| {r.variant} | {r.concurrency} | {r.output_tok_s:.1f} |" in md
    assert "## Ratios" in md and all(f"| {c} | o" in md for c in LEVELS)
    for png in ("throughput.png", "latency.png", "goodput.png", "transition.png"):
        img = mpimg.imread(out / png)
        assert img.shape[0] >= 300 and img[..., :3].std() > 0.05, png
