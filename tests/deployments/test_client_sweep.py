"""`loadtests.bench.client_sweep` and `client_transition` on CPU, the GPU chain's sweep step in small: SGLang's own benchmark
client, imported once, against the shared app's variants by override (`--target`) and against SGLang's
own plain server with the same engine arguments. Asserts what the chain's results say (the issue's
sweep.csv columns, every run complete and refereed, chunk ITL alike for every variant, flips only for
the app, the status trace of the app and of SGLang's servers, the mode plot) and that the app's
overrides are put back; not speed."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from loadtests.bench.client_sweep import CSV_FIRST
from loadtests.bench.client_transition import TRANSITION_FIRST, goodput_count

from .conftest import ROOT, TOKEN

pytestmark = [pytest.mark.serve, pytest.mark.engine]


def _config(tmp: Path, model_pair: Any) -> Path:
    """The one-replica CPU example with the tiny pair: the model id and the raw server's engine."""
    cfg = yaml.safe_load((ROOT / "deployments" / "examples" / "cpu-tiny-1replica.yaml").read_text())
    cfg["model"].update(path=model_pair.target, draft_path=model_pair.draft)
    path = tmp / "cpu.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_client_sweep_runs_the_app_variants_and_sglangs_servers(
    app: Any, model_pair: Any, tmp_path: Path
) -> None:
    config = _config(tmp_path, model_pair)
    out = tmp_path / "sweep"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SPECFLIP_CONTROL_TOKEN": TOKEN}
    cmd = [
        sys.executable, "-m", "loadtests.bench.client_sweep", "--config", str(config), "--target", app.base,
        "--shape", "chain", "--variants", "off,dynamic,raw_plain,sglang_adaptive", "--concurrency", "2,1", "--prompts", "2=8,1=2",
        "--levels-of", "sglang_adaptive=2", "--input-len", "12", "--output-len", "24", "--profile-at", "2", "--profile-window", "0,1", "--out", str(out),
    ]  # fmt: skip
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    # --profile-at 2: each run at c=2 sampled (py-spy, CPU per process): the app's replica and its
    # engine's scheduler, each raw server's own processes, and the client; the runs at c=1 not
    sections = (out / "profiles.md").read_text().split("### ")[1:]
    assert [s.split(":")[0] for s in sections] == [
        f"{v}-c2-r0" for v in ("off", "dynamic", "raw_plain", "sglang_adaptive")
    ]
    for section in sections:
        ours = section.startswith(("off", "dynamic"))
        for name in ("replica", "scheduler", "client") if ours else ("http+tokenizer", "scheduler", "client"):
            assert f"| {name} |" in section, section
    assert {p.name for p in (out / "profiles").iterdir()} == {s.split(":")[0] for s in sections}

    with (out / "sweep.csv").open() as fh:
        reader = csv.DictReader(fh)
        assert tuple(reader.fieldnames or ())[: len(CSV_FIRST)] == CSV_FIRST
        every = list(reader)
    # the app's variants level by level (both at c=2, then both at c=1), then the raw server's levels
    order = [(r["variant"], r["concurrency"]) for r in sorted(every, key=lambda r: float(r["started"]))]
    assert order == [
        ("off", "2"),
        ("dynamic", "2"),
        ("off", "1"),
        ("dynamic", "1"),
        ("raw_plain", "2"),
        ("raw_plain", "1"),
        ("sglang_adaptive", "2"),  # SGLang's own --speculative-adaptive server, only at c=2 (--levels-of)
    ]
    # the app idles after its warm-up until the policy can have decided for the first level's load
    assert "app settles" in done.stdout + done.stderr
    # the unmeasured runs at the highest level before the app's first and each raw server's first
    assert {p.name for p in out.glob("warmup-*.jsonl")} == {
        "warmup-app.jsonl",
        "warmup-raw_plain.jsonl",
        "warmup-sglang_adaptive.jsonl",
    }
    rows = {r["variant"]: r for r in every if r["concurrency"] == "2"}
    for variant, r in rows.items():
        assert (r["shape"], r["concurrency"], r["repeat"]) == ("chain", "2", "0"), r
        assert int(r["completed"]) == int(r["prompts"]) == 8, r
        assert float(r["output_tok_s"]) > 0 and float(r["tpot_p50_ms"]) > 0, r
        assert (r["flips"] == "") is (variant in ("raw_plain", "sglang_adaptive")), r  # flips are the app's
        # and so are the flips its engine applied (its own count, beside the policy's desired flips)
        assert (r["engine_flips"] == "") is (r["flips"] == "") and int(r["engine_flips"] or 0) >= 0, r
        # the CPU the process in front of the engine (the app's replica, SGLang's HTTP + tokenizer
        # process) and the scheduler used over the run, read from the kernel's counters
        assert float(r["front_cpu_us_per_token"]) > 0 and float(r["front_cpu_cores"]) > 0, r
        assert float(r["scheduler_cpu_cores"]) > 0, r
        # and the client's (this test's sweep process): what says whether the client bounds a run
        assert float(r["client_cpu_cores"]) > 0, r
        # and the app's way to its replica: Ray's ingress request router and Serve's HAProxy, found
        # among the app's processes (a raw server has neither)
        ours = variant not in ("raw_plain", "sglang_adaptive")
        assert (r["router_cpu_cores"] != "") is ours and (r["haproxy_cpu_cores"] != "") is ours, r
        # the gaps between streamed chunks, measured alike for every variant
        assert 0 < float(r["chunk_itl_p50_ms"]) <= float(r["chunk_itl_p99_ms"]), r
        if variant != "sglang_adaptive":
            # no accept length on /server_info: SGLang's ITL is the gap between chunks too (its EAGLE
            # server's, which reports one, divides each gap by the chunk's tokens)
            assert float(r["chunk_itl_p50_ms"]) == pytest.approx(float(r["itl_p50_ms"]), abs=0.011), r
            assert float(r["chunk_itl_p99_ms"]) == pytest.approx(float(r["itl_p99_ms"]), abs=0.011), r
    for r in every:  # the 0.5-s samples inside the client's window (a run this short may hold none)
        assert {"sampled_running", "full_fraction", "idle_fraction", "refill_s"} <= set(r), r
        if r["sampled_running"] != "":
            assert float(r["sampled_running"]) >= 0, r
            assert 0 <= float(r["full_fraction"]) <= 1 and 0 <= float(r["idle_fraction"]) <= 1, r
        assert r["refill_s"] == "" or 0 < float(r["refill_s"]) < float(r["duration_s"]), r
    # the app's replicas count the tokens they generated: the referee saw the app's runs (runs of
    # 8 x 24 tokens: the replicas report every second and the referee stamps a report when it
    # arrives, so a sub-second run on a busy host could fall between two reports with equal counts)
    assert float(rows["off"]["engine_tok_s"]) > 0 and float(rows["dynamic"]["engine_tok_s"]) > 0
    assert float(rows["off"]["on_fraction"]) == 0.0  # held OFF by override throughout
    with (out / "status.csv").open() as fh:
        status = list(csv.DictReader(fh))
    assert {r["variant"] for r in status} == {"off", "dynamic", "raw_plain", "sglang_adaptive"}
    # SGLang's servers sampled from their /v1/loads (rank 0 of each): mode "raw", no flips, every run
    raw = [r for r in status if r["variant"] in ("raw_plain", "sglang_adaptive")]
    assert {r["mode"] for r in raw} == {"raw"} and {r["flips"] for r in raw} == {"0"}
    assert {r["replica_id"] for r in raw} == {"raw_plain/0", "sglang_adaptive/0"}
    assert {(r["variant"], r["concurrency"]) for r in raw} == {
        ("raw_plain", "2"),
        ("raw_plain", "1"),
        ("sglang_adaptive", "2"),
    }
    assert (out / "modes.png").stat().st_size > 0
    assert json.loads((out / "results.json").read_text())["settings"]["levels_of"] == {"sglang_adaptive": [2]}
    assert {r["override"] for r in app.client.replicas()} == {"auto"}  # put back as found


@pytest.mark.parametrize(
    ("workload", "phases"), [("closed", "low:1x2,high:6x12,low:1x2"), ("open", "low:2r@2,high:30r@12")]
)
def test_client_transition_runs_the_same_phases_for_each_variant(
    app: Any, model_pair: Any, tmp_path: Path, workload: str, phases: str
) -> None:
    out = tmp_path / workload
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SPECFLIP_CONTROL_TOKEN": TOKEN}
    cmd = [
        sys.executable, "-m", "loadtests.bench.client_transition", "--config", str(_config(tmp_path, model_pair)),
        "--target", app.base, "--workload", workload, "--phases", phases, "--variants", "dynamic,off",
        "--slo-ttft-ms", "60000", "--slo-tpot-ms", "60000", "--input-len", "12", "--output-len", "6",
        "--warmup", "3", "--out", str(out),
    ]  # fmt: skip
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "warm-up: 6 requests at c=3" in done.stdout and (out / "warmup.jsonl").is_file(), done.stdout[
        -3000:
    ]

    with (out / "transition.csv").open() as fh:
        reader = csv.DictReader(fh)
        assert tuple(reader.fieldnames or ())[: len(TRANSITION_FIRST)] == TRANSITION_FIRST
        rows = list(reader)
    loads = [p.split(":")[0] for p in phases.split(",")]
    assert [(r["variant"], r["phase"], r["load"]) for r in rows] == [
        (v, str(i), load) for v in ("dynamic", "off") for i, load in enumerate(loads)
    ]
    for r in rows:
        assert r["workload"] == workload and int(r["completed"]) == int(r["prompts"]), r
        assert int(r["output_tokens"]) == 6 * int(r["prompts"]), r  # fixed lengths: the same work
        # generous SLOs: every request is good, and goodput is their rate over the phase
        assert int(r["good_requests"]) == int(r["prompts"]), r
        assert float(r["goodput_rps"]) == pytest.approx(int(r["prompts"]) / float(r["duration_s"]), rel=0.1)
        # the engine's own flips: none while held OFF, the first phase too (the switch from dynamic
        # lands, and is reported, before the first phase starts)
        assert int(r["engine_flips"]) >= 0, r
        if r["variant"] == "off":
            assert r["engine_flips"] == "0", r
    doc = json.loads((out / "results.json").read_text())
    for v in ("dynamic", "off"):
        total = sum(float(r["duration_s"]) for r in rows if r["variant"] == v)
        assert doc["total_duration_s"][v] == pytest.approx(total, abs=0.05)
    assert (out / "modes.png").stat().st_size > 0
    assert {r["override"] for r in app.client.replicas()} == {"auto"}


def test_goodput_counts_requests_meeting_both_slos() -> None:
    result = {
        "ttfts": [0.1, 0.5, 0.1, 0.1],
        "itls": [[0.01] * 9, [0.01] * 9, [0.05] * 9, [0.01] * 9],
        "output_lens": [10, 10, 10, 10],
        "errors": ["", "", "", "boom"],
    }
    # TTFT <= 200 ms and TPOT <= 20 ms: the first only (the second is late, the third slow, the last failed)
    assert goodput_count(result, slo_ttft_ms=200, slo_tpot_ms=20) == 1
    assert goodput_count(result, slo_ttft_ms=600, slo_tpot_ms=60) == 3
