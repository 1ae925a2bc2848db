"""docs/gpu/serving_chain.sh end to end on CPU, the way it runs on a bare GPU host (the project on
PYTHONPATH, nothing installed from it): `loadtests.rawvsapp` with SGLang's own server (plain and
EAGLE-3, started beside the app) and the app on its default data path, one replica of the tiny pair
each, the same Locust client, token-window accounting with repeated windows, the engine's own count
as referee for every window, SGLang's benchmark client against the raw server, profiles and the
report, before it the engines alone under arrivals (`loadtests.bench.engine_arrivals`), the GPU
tests' step (every test skips on CPU) and the first flips of a fresh engine (`loadtests.bench.first_flips`). Then the chain's guards: a second start while one holds the
lock refuses, a finished chain started again skips its finished steps. Asserts what the results and
the report say, not speed."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = [pytest.mark.serve, pytest.mark.engine, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
CHAIN = ROOT / "docs" / "gpu" / "serving_chain.sh"
EXAMPLE = ROOT / "deployments" / "examples" / "cpu-tiny-1replica.yaml"
ARGS = (
    "--speculation off,on --concurrency 1,2 --repeat 2=2 --window 3 --settle 1 --stream both "
    "--plain-concurrency 2 --plain-speculation off --sglang-client 2 --output-len 24 --profile-at 1,2 "
    "--start-raw-early"
)


def _run_chain(tmp: Path, config: Path, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # as on a bare host: the chain sets it
    env.update(
        CHAIN_RESULTS=str(tmp / "results"),
        CHAIN_CONFIG=str(config),
        CHAIN_RAWVSAPP=ARGS,
        CHAIN_ARRIVALS="--concurrency 2 --requests-per-user 2 --input-len 12 --output-len 10 --settle 0 "
        "--variants plain,off_warm_kv,off_draft_prefill",
        # the GPU correctness tests' step: on CPU every test skips, so the step runs pytest and passes
        CHAIN_GPU_TESTS="tests/patched_worker/test_gpu_production.py",
        CHAIN_FIRST_FLIPS="--warm-up none --batches 2 --repeat 1",
        CHAIN_ENV_SH=str(tmp / "no-bundle-here"),
        CHAIN_JIT=str(tmp / "no-jit-here"),  # a checkout's .gpu-jit holds GPU kernels: not for this host
        PATH=f"{Path(sys.executable).parent}:{env['PATH']}",  # python3 = this interpreter
    )
    return subprocess.run(
        ["bash", str(CHAIN), str(ROOT)], env=env, capture_output=True, text=True, timeout=timeout
    )


def _failed_step_logs(results: Path) -> str:
    """The end of each chain step's log whose step did not finish: the reason a step failed."""
    out = []
    for log in sorted(results.glob("*.log")):
        if log.stem != "progress" and not (results / f"{log.stem}.done").exists():
            out.append(
                f"\n--- {log.name} (last 4000 characters) ---\n{log.read_text(errors='replace')[-4000:]}"
            )
    return "".join(out)


def test_serving_chain_end_to_end_on_cpu(tmp_path: Path, model_pair) -> None:  # noqa: ANN001
    cfg = yaml.safe_load(EXAMPLE.read_text())
    cfg["model"].update(path=model_pair.target, draft_path=model_pair.draft)
    cfg["engine"]["extra"]["log_level"] = "info"  # as the GPU config: the app's engine logs its batches
    config = tmp_path / "cpu.yaml"
    config.write_text(yaml.safe_dump(cfg))

    done = _run_chain(tmp_path, config)
    assert done.returncode == 0, (
        done.stdout[-2000:] + done.stderr[-2000:] + _failed_step_logs(tmp_path / "results")
    )
    results = tmp_path / "results"
    data = json.loads((results / "rawvsapp" / "results.json").read_text())
    points = data["points"]
    streamed = {(p["target"], p["speculation"], p["concurrency"], p["repeat"]) for p in points if p["stream"]}
    assert streamed == {
        (t, s, c, k)
        for t in ("raw", "app")
        for s in ("off", "on")
        for c, n in ((1, 1), (2, 2))
        for k in range(n)
    }
    plain = {(p["target"], p["speculation"], p["concurrency"]) for p in points if not p["stream"]}
    assert plain == {("raw", "off", 2), ("app", "off", 2)}
    for p in points:
        assert p["errors"] == 0 and p["output_tok_s"] > 0, p
        assert p["engine_tok_s"] is not None and p["engine_tok_s"] > 0, p  # the referee saw every window
        assert p["engine_running"] is not None and p["engine_running"] > 0, p  # and the batch it was fed
        # the engine's own log lines, the app's read from its replica's Ray worker log
        assert p["engine_queued"] is not None and p["engine_log_tok_s"] is not None, p
    (client,) = data["client_runs"]
    assert client["concurrency"] == 2 and client["output_tok_s"] > 0 and client["engine_tok_s"] > 0
    assert client["engine_tokens"] > 0
    # SGLang's client sends token ids, prompt lengths drawn from [64, 192] (128 x [0.5, 1.5]): the engine
    # sees those lengths, not text re-tokenized to other lengths
    assert 64 <= client["engine_prompt_tokens"] <= 192, client
    assert all(p["engine_prompt_tokens"] > 0 for p in points if p["target"] == "raw"), points

    report = (results / "rawvsapp" / "report.md").read_text()
    for line in (
        "- app, speculation off, streaming: >= 0.95x raw tok/s (median) at every c in",
        "- app, speculation on, streaming: >= 0.95x raw tok/s (median) at every c in",
        "- app, speculation off, not streamed: >= 0.95x raw tok/s (median) at every c in",
        "- app, speculation off: TTFT p50 overhead at c=1 <= 5 ms:",
        "- app: OFF/ON at c=2 within 5% of raw's:",
        "- app: ON/OFF at c=1 within 5% of raw's:",
        "## Clients against the engine's own count (raw server, speculation off)",
        "| sglang.benchmark.serving | 2 |",
        "prompt tokens/request (engine) |",
        "| Locust (loadtests.locust.users) | 2 |",
        ", 2 windows)",  # the repeated level shows its spread
        "the raw servers were started with the app and idled beside it",
        "### raw, speculation off, c=2 (streaming)",
        "### raw, speculation off, c=1 (streaming)",
        "### app, speculation on, c=2 (streaming)",
        "| http+tokenizer |",
        "| replica |",
        "| haproxy |",
        "| raw engine batch | app engine batch | raw engine queue | app engine queue |",
    ):
        assert line in report, line
    assert (results / "rawvsapp.done").exists()
    arrivals = json.loads((results / "arrivals" / "results.json").read_text())["runs"]  # the engines alone
    assert set(arrivals) == {"plain", "off_warm_kv", "off_draft_prefill"}
    for variant in ("off_warm_kv", "off_draft_prefill"):
        assert arrivals[variant]["2"]["identical"] == 4, (variant, arrivals[variant])
    # OFF prefills skip the draft forward under warm_kv; the comparison variant keeps it
    assert (
        arrivals["off_warm_kv"]["2"]["off_prefills"] > 0
        and arrivals["off_draft_prefill"]["2"]["off_prefills"] == 0
    )
    assert (results / "arrivals.done").exists()
    # a fresh engine flipped ON at a batch size it had not run (the resync among the round's flips)
    (first_flips,) = json.loads((results / "first_flips" / "results.json").read_text())["runs"]
    assert [(r["round"], r["resyncs"] >= 1) for r in first_flips["rounds"]] == [("batch 2 round 1", True)]
    assert (results / "first_flips.done").exists()
    assert "rawvsapp: rc=0" in (results / "progress.log").read_text()
    # the host's busiest processes, sampled every 2 s while the chain ran (the engines among them)
    top = (results / "top.log").read_text()
    assert top.count("== ") >= 10 and "python" in top, top[-2000:]
    gpu_tests = (results / "gpu_tests.log").read_text()
    assert "3 skipped" in gpu_tests and (results / "gpu_tests.done").exists(), gpu_tests[-2000:]
    # the steps ran from the copy of the code the chain took at its start (a device command copies the
    # working tree onto the host again, mid-chain), not from the checkout
    src = tmp_path / "results.src"
    assert f"rootdir: {src}" in gpu_tests, gpu_tests[:1500]
    assert (src / "deployments" / "app.py").is_file() and not (src / ".git").exists()

    # a second chain while one holds the lock: refused, nothing run
    with (results / "chain.lock").open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        second = _run_chain(tmp_path, config, timeout=60)
    assert second.returncode == 1 and "another chain holds" in second.stderr
    # started again after it finished: the finished step is skipped, the chain ends at once
    again = _run_chain(tmp_path, config, timeout=120)
    assert again.returncode == 0 and "rawvsapp: done already" in again.stdout
    assert "arrivals: done already" in again.stdout


def test_the_closed_transition_gets_the_phases_planned_from_the_chains_sweep(tmp_path: Path) -> None:
    """CHAIN_CLOSED_PLAN: the plan step reads the chain's own sweep (here one left by an earlier chain, its
    step done) and the closed transition runs with the planned phases after CHAIN_CLOSED's own. The app it
    points at is not there, so the transition stops after printing its phases: the wiring, not a run."""
    results = tmp_path / "results"
    (results / "sweep").mkdir(parents=True)
    rows = [("on", 2, 507.0), ("off", 2, 364.0), ("on", 256, 3134.0), ("off", 256, 5804.0)]
    (results / "sweep" / "sweep.csv").write_text(
        "shape,variant,concurrency,repeat,output_tok_s\n"
        + "".join(f"tree,{v},{c},0,{r}\n" for v, c, r in rows)
    )
    (results / "sweep.done").touch()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(
        CHAIN_RESULTS=str(results),
        CHAIN_CONFIG=str(ROOT / "deployments" / "examples" / "h200-dummy8b-tree.yaml"),
        CHAIN_RAWVSAPP="skip",
        CHAIN_SWEEP="--shape tree",  # done already: skipped
        CHAIN_CLOSED_PLAN="--low 2 --high 256",
        CHAIN_CLOSED="--phases low:1x1 --target http://127.0.0.1:9 --variants off --slo-ttft-ms 1000 --slo-tpot-ms 20",
        CHAIN_ENV_SH=str(tmp_path / "no-bundle-here"),
        CHAIN_JIT=str(tmp_path / "no-jit-here"),
        CHAIN_TOKENIZER=str(tmp_path / "no-tokenizer-here"),
        PATH=f"{Path(sys.executable).parent}:{env['PATH']}",
    )
    model_dir = tmp_path / "model"  # the 8B config's model folder exists: no shapes step
    model_dir.mkdir()
    (model_dir / "config.json").write_text("{}")
    cfg = yaml.safe_load((ROOT / "deployments" / "examples" / "h200-dummy8b-tree.yaml").read_text())
    cfg["model"]["path"] = str(model_dir)
    cfg["model"]["draft_path"] = str(model_dir)
    (tmp_path / "tree.yaml").write_text(yaml.safe_dump(cfg))
    env["CHAIN_CONFIG"] = str(tmp_path / "tree.yaml")
    done = subprocess.run(
        ["bash", str(CHAIN), str(ROOT)], env=env, capture_output=True, text=True, timeout=300
    )
    plan = json.loads((results / "closed_plan.json").read_text())
    assert plan["phases"].startswith("low:2x") and plan["balanced"] is True
    progress = (results / "progress.log").read_text()
    assert f"closed transition: phases {plan['phases']}, planned from the sweeps" in progress, progress
    assert plan["sweeps"] == [str(results / "sweep" / "sweep.csv")]
    transition = (results / "transition_closed.log").read_text()
    assert f"closed-loop transition, phases {plan['phases']}:" in transition, transition[-2000:]
    assert "client_transition: no specflip app answers at http://127.0.0.1:9" in transition, transition[
        -2000:
    ]
    assert done.returncode == 1 and "transition_closed: rc=1" in progress  # no app at the target
