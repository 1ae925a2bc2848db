"""The null OpenAI server speaks the wire format the load generator reads, chunk for chunk."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from loadtests.locust.sse import SseDecoder, parse_chunk
from loadtests.servers import ServerProcess
from loadtests.sweep.launcher import free_port


@pytest.fixture(scope="module")
def null_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    log = tmp_path_factory.mktemp("null") / "null.log"
    cmd = [
        sys.executable,
        "-m",
        "loadtests.calibrate.nullserver",
        "--port",
        str(port),
        "--processes",
        "2",
        "--step-ms",
        "2",
    ]
    server = ServerProcess(cmd, Path(log), log=lambda line: None)
    try:
        url = f"http://127.0.0.1:{port}"
        server.wait_ready(url + "/health", 60)
        yield url
    finally:
        server.stop()


def _events(body: bytes) -> list[bytes]:
    d = SseDecoder()
    return d.feed(body) + d.close()


@pytest.mark.parametrize(
    ("path", "kind"), [("/v1/chat/completions", "chat"), ("/v1/completions", "completions")]
)
def test_a_stream_has_one_token_chunk_per_step_then_finish_usage_and_done(
    null_url: str, path: str, kind: str
) -> None:
    body = {"model": "m", "max_tokens": 5, "stream": True, "stream_options": {"include_usage": True}}
    body.update(
        {"messages": [{"role": "user", "content": "a b c"}]} if kind == "chat" else {"prompt": "a b c"}
    )
    r = httpx.post(null_url + path, json=body, timeout=10)
    assert r.status_code == 200 and r.headers["content-type"] == "text/event-stream"
    chunks = [parse_chunk(e) for e in _events(r.content)]
    assert sum(c.is_token for c in chunks) == 5
    assert chunks[-1].done and [c.finish_reason for c in chunks if c.finish_reason] == ["length"]
    usage = [c for c in chunks if c.completion_tokens is not None]
    assert len(usage) == 1 and usage[0].completion_tokens == 5 and usage[0].prompt_tokens == 3
    first = json.loads(_events(r.content)[0])
    assert first["object"] == ("chat.completion.chunk" if kind == "chat" else "text_completion")


def test_plain_requests_keep_alive_and_errors(null_url: str) -> None:
    with httpx.Client(base_url=null_url, timeout=10) as client:
        for _ in range(3):  # one connection, several requests
            r = client.post("/v1/completions", json={"max_tokens": 4, "prompt": "x"})
            assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 4
            assert r.json()["choices"][0]["text"] == " tok" * 4
        assert client.get("/v1/models").json()["data"][0]["id"] == "null"
        assert client.post("/v1/completions", content=b"[1, 2]").status_code == 400
        assert client.post("/v1/completions", json={"max_tokens": 0}).status_code == 400
        assert client.get("/nothing").status_code == 404
        assert client.get("/v1/completions").status_code == 405


def test_tokens_per_chunk_packs_several_tokens_into_one_chunk(tmp_path: Path) -> None:
    port = free_port()
    cmd = [sys.executable, "-m", "loadtests.calibrate.nullserver", "--port", str(port), "--processes", "1",
           "--tokens-per-chunk", "3"]  # fmt: skip
    server = ServerProcess(cmd, tmp_path / "null.log", log=lambda line: None)
    try:
        server.wait_ready(f"http://127.0.0.1:{port}/health", 60)
        body = {"max_tokens": 7, "stream": True, "prompt": "x", "stream_options": {"include_usage": True}}
        r = httpx.post(f"http://127.0.0.1:{port}/v1/completions", json=body, timeout=10)
        chunks = [parse_chunk(e) for e in _events(r.content)]
        assert sum(c.is_token for c in chunks) == 3  # 3 + 3 + 1 tokens
        assert [c.completion_tokens for c in chunks if c.completion_tokens is not None] == [7]
    finally:
        server.stop()


def test_locust_workers_wait_for_their_context_when_model_discovery_is_slow(tmp_path: Path) -> None:
    """`--processes` workers start users as soon as the master says so; a worker whose init is
    still discovering the model (a loaded server answers /v1/models slowly) must not fail them."""
    from loadtests.locust.config import LoadConfig
    from loadtests.locust.run import run_locust
    from loadtests.metrics import CANCELLED

    port = free_port()
    cmd = [sys.executable, "-m", "loadtests.calibrate.nullserver", "--port", str(port), "--processes", "1",
           "--models-delay-ms", "1500"]  # fmt: skip
    server = ServerProcess(cmd, tmp_path / "null.log", log=lambda line: None)
    try:
        server.wait_ready(f"http://127.0.0.1:{port}/health", 60)
        cfg = LoadConfig(shape="fixed:users=6,duration=4", output_len=8, input_len=8, model="")
        run = run_locust(f"http://127.0.0.1:{port}", cfg, tmp_path / "run", processes=3)
        log = (tmp_path / "run" / "locust.log").read_text()
        assert "context not initialised" not in log
        assert run.returncode == 0 and run.records
        # requests cut by the end of the run are recorded as cancelled; every other one succeeded
        failed = [r for r in run.records if not r.ok and r.error != CANCELLED]
        assert not failed, failed[:3]
        # every worker process sent requests (one JSONL file each)
        assert len(list((tmp_path / "run").glob("requests-*.jsonl"))) == 3
    finally:
        server.stop()
