"""The direct data path (`serve.data_path: direct`) on the real app: HAProxy -> one CPU replica
serving SGLang's own OpenAI app on the patched engine, with specflip's routes. Structured output is
honoured or refused as docs/structured_output.md says for this path (tools are refused without a
tool-call parser), greedy output is the same with speculation OFF, ON and toggled, and the
replica's engine state reaches `/specflip/status` and `/metrics` here too.

The app runs in its own process and Ray instance (`specflip serve`), so it never meets the
package's ingress app (conftest.py) in one Ray: Serve's direct streaming is switched on by
environment variables read when Serve starts."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from deployments.defaults import cpu_demo_config
from deployments.local import LocalApp, wait_until
from tests.deployments.test_serve_structured import (
    BIASED_TOKEN,
    CASES,
    CHAT,
    MODEL,
    REFUSED,
    _msg,
    check_off_on_toggled,
)

pytestmark = pytest.mark.serve
ROOT = Path(__file__).resolve().parents[2]
TOKEN = "test-control-token"
# what the direct path answers differently from the ingress (the rest of REFUSED is the same)
DIRECT_WORDS: dict[str, str] = {}  # every refusal is the body guard's, worded as on the ingress path


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def direct_app(model_pair: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalApp]:
    config = cpu_demo_config(
        (model_pair.target, model_pair.draft),
        policy={"high": 4, "low": 1, "dwell_s": 1.0, "tick_s": 0.25},
        replicas={"count": 1, "tick_s": 0.25},
        serve={"control_token": TOKEN, "data_path": "direct"},
    )
    folder = tmp_path_factory.mktemp("direct")
    path = folder / "direct.yaml"
    path.write_text(yaml.safe_dump(config.model_dump(mode="json")))
    port = _free_port()
    # run_local gives Serve's HAProxy a folder and ports of that process (Ray's defaults are fixed)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
    }
    log = open(folder / "serve.log", "w")  # noqa: SIM115 - closed at teardown
    cmd = [sys.executable, "-m", "deployments", "serve", "--config", str(path), "--host", "127.0.0.1"]
    proc = subprocess.Popen(
        [*cmd, "--port", str(port)], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    app = LocalApp(f"http://127.0.0.1:{port}", config)
    try:

        def up() -> bool:
            assert proc.poll() is None, (folder / "serve.log").read_text()[-3000:]
            try:
                replicas = app.client.replicas()
            except Exception:
                return False
            return len(replicas) == 1 and not replicas[0]["stale"]

        wait_until(up, 420, every_s=2.0, why="the direct app's replica reporting")
        yield app
    finally:
        app.client.close()
        _stop(proc)
        log.close()


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM (the CLI shuts Serve, Ray and its HAProxy down), then the process group."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(90)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def _biased_text(model_pair: Any) -> str:
    from transformers import AutoTokenizer

    return str(AutoTokenizer.from_pretrained(model_pair.target).decode([BIASED_TOKEN])).strip()


def test_engine_state_and_policy_source_reach_status_and_metrics_on_the_direct_path(
    direct_app: LocalApp,
) -> None:
    wait_until(
        lambda: all(r["policy_source"] == "actor" for r in direct_app.client.replicas()),
        15,
        why="source reported",
    )
    (r,) = direct_app.client.replicas()
    engine = r["engine"]
    assert r["patched"] is True and engine["strategy"] == engine["strategy_configured"] == "warm_kv"
    assert engine["off_cuda_graphs"] is False and engine["off_cuda_graphs_reason"]  # cpu: eager, says why
    assert engine["toggles"] >= 2 and engine["resyncs"] >= 1  # the warm-up flipped both ways
    rid = r["replica_id"]
    text = direct_app.client.metrics()
    assert f'specflip_policy_source{{replica="{rid}",source="actor"}} 1.0' in text
    for series in ("toggles_total", "resyncs_total", "resync_seconds_total", "control_timeouts_total"):
        assert f'specflip_engine_{series}{{replica="{rid}"}}' in text, series
    for mode in ("on", "off"):
        assert f'specflip_engine_decode_steps_total{{mode="{mode}",replica="{rid}"}}' in text
    assert re.search(rf'specflip_engine_off_cuda_graphs{{reason="[^"]+",replica="{rid}"}} 0.0', text)


def test_structured_output_on_the_direct_path_obeys_its_field_off_on_and_toggled(
    direct_app: LocalApp, model_pair: Any
) -> None:
    labels = [label for label, case in CASES.items() if "tools" not in case[2]]  # tools: refused here
    check_off_on_toggled(direct_app, labels, _biased_text(model_pair))


@pytest.mark.parametrize(("case", "path", "body", "word"), REFUSED, ids=[c[0] for c in REFUSED])
def test_structured_fields_that_cannot_be_honoured_get_a_4xx_naming_the_field_on_the_direct_path(
    direct_app: LocalApp, case: str, path: str, body: dict[str, Any], word: str
) -> None:
    full = {"model": MODEL, "max_tokens": 8, **({"messages": _msg("hi")} if path == CHAT else {}), **body}
    r = direct_app.client.post(path, full, timeout=120)
    assert 400 <= r.status_code < 500, f"{case}: {r.status_code} {r.text[:300]}"
    message = str(r.json())
    assert DIRECT_WORDS.get(case, word) in message and "Traceback" not in message, (case, message)


def test_tool_calls_are_refused_without_a_parser_and_plain_text_with_tool_choice_none(
    direct_app: LocalApp,
) -> None:
    tools = CASES["chat tools required"][1]["tools"]
    body = {"model": MODEL, "messages": _msg("Weather in Paris?"), "max_tokens": 8, "temperature": 0}
    r = direct_app.client.post(CHAT, {**body, "tools": tools, "tool_choice": "required"}, timeout=120)
    assert r.status_code == 400 and "engine.extra.tool_call_parser" in r.json()["error"]["message"]
    r = direct_app.client.post(CHAT, {**body, "tools": tools, "tool_choice": "none"}, timeout=120)
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"]
