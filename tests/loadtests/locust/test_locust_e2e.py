"""Real Locust (subprocess, headless) against the stand-in: records, CSV, shapes, host-only."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from deployments.client import SpecflipClient
from loadtests.locust.config import LoadConfig
from loadtests.locust.run import run_locust


def _standin(url: str, path: str) -> Any:
    with SpecflipClient(url, timeout=5) as client:
        return client.get(path).json()


def hits(url: str) -> dict[str, int]:
    result: dict[str, int] = _standin(url, "/standin/hits")
    return result


@pytest.mark.slow
def test_poisson_completions_without_usage(standin: Callable[..., str], tmp_path: Path) -> None:
    url = standin(usage=False, mode="on")  # always ON: 3 tokens per chunk
    cfg = LoadConfig(
        api="completions",
        prompt_set="corpus",
        input_len=24,
        output_len=12,
        shape="poisson:rate=6,users=8,duration=3",
    )  # model "": discovered from /v1/models
    seen: list[int] = []
    run = run_locust(
        url, cfg, tmp_path, on_progress=lambda now, recs: seen.append(len(recs)), progress_every=1.0
    )
    done = [r for r in run.records if r.error != "cancelled"]
    assert done and all(r.ok for r in done)
    # no usage chunk: exact count from finish_reason=length and max_tokens
    assert {(r.token_source, r.output_tokens) for r in done} == {("length", 12)}
    assert all(r.api == "completions" and r.prompt_tokens is None for r in done)
    # ON mode sends 3 tokens per chunk: 12 tokens in 4 chunks, so TPOT = (last - first) / 11 over 3 gaps
    assert {r.chunks for r in done} == {4}
    for r in done:
        assert r.tpot == pytest.approx(sum(r.itl) / 11, rel=1e-4, abs=1e-6)  # ITL stored to the µs
    # open loop: ~6 req/s for 3 s; back to back, 8 users would send well over 100
    assert 5 <= len(run.records) <= 45
    assert seen, "progress callback never ran"
    # everything the load generator sent arrived at the configured host, and nothing else was asked
    got = hits(url)
    assert set(got) == {"GET /v1/models", "POST /v1/completions"} and got["GET /v1/models"] == 1
    # a user stopped at the end may be cancelled before its request left the process
    reached = [r for r in run.records if r.error != "cancelled" or r.chunks > 0]
    assert len(reached) <= got["POST /v1/completions"] <= len(run.records)
    assert {r.status for r in run.records if r.error == "cancelled"} <= {0, 200}  # 0: no response yet
    meta = json.loads((tmp_path / "run_meta.json").read_text())
    assert meta["model"] == "standin-tiny" and meta["host"] == url


@pytest.mark.slow
def test_steps_chat_with_usage_and_locust_csv(standin: Callable[..., str], tmp_path: Path) -> None:
    url = standin()
    cfg = LoadConfig(
        model="standin-tiny", input_len=16, output_len=10, shape="steps:users=1/3,step=2", itl_events=True
    )
    run = run_locust(url, cfg, tmp_path)
    done = [r for r in run.records if r.error != "cancelled"]
    assert done and all(r.ok and r.token_source == "usage" and r.output_tokens == 10 for r in done)
    assert all(r.prompt_tokens and r.prompt_tokens >= 16 for r in done)  # the stand-in counts words
    early = {r.users for r in done if r.start - run.t0 < 1.5}
    late = {r.users for r in done if r.start - run.t0 > 2.5}
    assert early == {1} and late == {3}
    assert [p.users for p in run.phases] == [1, 3]
    # streams are read to the end, so each user keeps one keep-alive connection (+1: this query)
    conns = _standin(url, "/standin/connections")["connections"]
    assert conns <= 3 + 1 < len(done)

    with (tmp_path / "locust_stats.csv").open() as fh:
        stats = {(row["Type"], row["Name"]): row for row in csv.DictReader(fh)}
    # Locust writes its CSV when the shape ends; requests finishing while it stops miss it
    n_posts = int(stats[("POST", "chat")]["Request Count"])
    assert sum(1 for r in done if r.end <= run.t0 + 4.0) <= n_posts <= len(done)
    for kind in ("TTFT", "TPOT", "E2E"):
        assert int(stats[(kind, "chat")]["Request Count"]) == n_posts
    counted = sorted(done, key=lambda r: r.end)[:n_posts]
    assert int(stats[("ITL", "chat")]["Request Count"]) == sum(len(r.itl) for r in counted)
    ttft_med = float(stats[("TTFT", "chat")]["Median Response Time"])
    ours = sorted(r.ttft * 1000 for r in done if r.ttft is not None)[len(done) // 2]
    assert ttft_med == pytest.approx(ours, rel=0.5, abs=10)  # Locust rounds its histogram buckets
    summary = json.loads((tmp_path / "summary.json").read_text())["summary"]
    # tokens by arrival over the whole run: the finished requests' and what the cancelled ones got
    cancelled = sum(r.output_tokens for r in run.records if r.error == "cancelled")
    assert summary["ok"] == len(done) and summary["output_tokens"] == 10 * len(done) + cancelled


@pytest.mark.slow
def test_two_worker_processes_share_the_load(standin: Callable[..., str], tmp_path: Path) -> None:
    url = standin()
    cfg = LoadConfig(model="standin-tiny", input_len=8, output_len=8, shape="fixed:users=4,duration=3")
    run = run_locust(url, cfg, tmp_path, processes=2)
    files = sorted(tmp_path.glob("requests-*.jsonl"))
    assert len(files) == 2 and all(f.stat().st_size > 0 for f in files)  # one JSONL per worker
    done = [r for r in run.records if r.error != "cancelled"]
    assert len(done) > 10 and all(r.ok and r.output_tokens == 8 for r in done)
    # workers get their users from the master a little after the shape's t0 (~1 s, more on a
    # loaded machine) and stop about as late: load_start, not t0, is where the load begins
    assert run.t0 <= run.load_start
    assert max(r.start for r in done) < run.load_start + 3.0 + 3.0
    assert not (tmp_path / "summary.json").exists()  # per-process summaries would be partial
    assert len(run.records) >= hits(url)["POST /v1/chat/completions"] >= len(done)
