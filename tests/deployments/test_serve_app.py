"""The real app end to end: Ray Serve, HAProxy and Ray's ingress request router, 2 CPU replicas of the real patched engine
with the tiny trained EAGLE-3 pair, the policy actor (the package's shared app, conftest.py)."""

from __future__ import annotations

import concurrent.futures
import json
import re
import threading
import time
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from deployments.local import LocalApp, wait_until
from tests.deployments.conftest import MODEL
from tests.prom import total
from tests.ray_metrics import RAY_REPORT_S, export_text, wait_for_export

pytestmark = pytest.mark.serve
PROMPTS = [
    "def add(a, b):",
    "class Stack:",
    "import os\n\ndef",
    "for i in range(",
    "    def __init__(self",
    "return self.",
    "if __name__ ==",
    "def parse_args(",
]


def _complete(app: LocalApp, prompt: str, max_tokens: int = 24, **extra: Any) -> dict[str, Any]:
    body = {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, **extra}
    return app.client.completion(body)


def _modes(app: LocalApp) -> dict[str, str]:
    return {r["replica_id"]: r["mode"] for r in app.client.replicas()}


# -- the OpenAI surface ---------------------------------------------------------------------------
def test_official_openai_client_lists_models_and_completes_chat_and_text(app: LocalApp) -> None:
    from openai import OpenAI

    client = OpenAI(base_url=f"{app.base}/v1", api_key="unused", max_retries=0, timeout=300)
    assert [m.id for m in client.models.list().data] == [MODEL]
    chat = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "def add(a, b):"}], max_tokens=16, temperature=0
    )
    assert chat.choices[0].message.role == "assistant"
    assert chat.choices[0].finish_reason in ("stop", "length")
    assert chat.usage is not None and 1 <= chat.usage.completion_tokens <= 16
    text = client.completions.create(model=MODEL, prompt="class Stack:", max_tokens=16, temperature=0)
    assert text.usage is not None and 1 <= text.usage.completion_tokens <= 16
    assert text.choices[0].text.strip(), "the tiny model writes code, not only whitespace"


def test_streaming_matches_the_non_streamed_answer_and_reports_usage_when_asked(app: LocalApp) -> None:
    from openai import OpenAI

    client = OpenAI(base_url=f"{app.base}/v1", api_key="unused", max_retries=0, timeout=300)
    messages = [{"role": "user", "content": "import os\n\ndef"}]
    plain = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=20, temperature=0)  # type: ignore[arg-type]
    chunks = list(
        client.chat.completions.create(
            model=MODEL,
            messages=messages,
            max_tokens=20,
            temperature=0,  # type: ignore[arg-type]
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    with_choices = [c for c in chunks if c.choices]
    streamed = "".join(c.choices[0].delta.content or "" for c in with_choices)
    assert len(with_choices) >= 2 and with_choices[-1].choices[0].finish_reason in ("stop", "length")
    assert streamed == plain.choices[0].message.content  # whole texts, whitespace included (not stripped)
    assert chunks[-1].usage is not None and plain.usage is not None
    assert chunks[-1].usage.completion_tokens == plain.usage.completion_tokens
    # without include_usage the client sees no usage chunk
    bare = list(
        client.completions.create(
            model=MODEL, prompt="for i in range(", max_tokens=12, temperature=0, stream=True
        )
    )
    assert bare and all(c.choices for c in bare)


# -- status, control, metrics ---------------------------------------------------------------------
def test_status_lists_every_replica_with_the_documented_fields(app: LocalApp) -> None:
    # a replica's first report goes out before any answer: policy_source is reported from the second
    wait_until(
        lambda: all(r["policy_source"] == "actor" for r in app.client.replicas()), 15, why="sources reported"
    )
    status = app.client.status()
    assert len(status["replicas"]) == 2 and status["policy"]["enabled"] is True
    for r in status["replicas"]:
        assert {
            "replica_id",
            "mode",
            "desired_mode",
            "running",
            "waiting",
            "accept_length",
            "flips",
            "patched",
            "override",
            "policy_source",
        } <= set(r)
        assert r["mode"] in ("on", "off") and r["patched"] is True and r["policy_source"] == "actor"
        engine = r["engine"]  # the engine's switch state as the replica reported it
        assert engine["strategy"] == engine["strategy_configured"] == "warm_kv"
        assert engine["strategy_fallback"] == "" and engine["sglang_version"] == "0.5.17"
        assert engine["off_cuda_graphs"] is False and engine["off_cuda_graphs_reason"]  # cpu: eager, says why
        assert set(engine["decode_steps"]) == {"on", "off"} and engine["control_timeouts"] == 0


def test_override_needs_the_bearer_token_and_is_honoured_with_it(app: LocalApp) -> None:
    rid = sorted(_modes(app))[0]
    assert app.client.post("/specflip/override", {"replica_id": rid, "mode": "off"}).status_code == 401
    wrong = app.client.send_override("off", rid, token="nope")
    assert wrong.status_code == 401 and "token" in wrong.json()["error"]["message"]
    assert app.client.send_override("off", "no-such-replica").status_code == 404
    assert app.client.send_override("sideways", rid).status_code == 422
    assert _modes(app)[rid] == "on"

    assert app.client.send_override("off", rid).json() == {"replica_ids": [rid], "mode": "off"}
    wait_until(lambda: _modes(app)[rid] == "off", 15, why="forced replica OFF")
    mine = lambda: next(r for r in app.client.replicas() if r["replica_id"] == rid)  # noqa: E731
    assert mine()["override"] == "off" and mine()["desired_mode"] == "off"
    # the replica reports that it follows an operator override (not inferred by the actor)
    wait_until(lambda: mine()["policy_source"] == "override", 15, why="override reported as the source")
    assert f'specflip_policy_source{{replica="{rid}",source="override"}} 1.0' in app.client.metrics()
    assert f'specflip_policy_overridden{{replica="{rid}"}} 1.0' in app.client.metrics()
    _complete(app, "def add(a, b):")  # the forced replica still serves
    assert app.client.send_override("auto", rid).status_code == 200
    wait_until(lambda: _modes(app)[rid] == "on", 15, why="replica back ON under auto")


# -- bad input ------------------------------------------------------------------------------------
_CHAT = "/v1/chat/completions"
_TEXT = "/v1/completions"
_MSG = [{"role": "user", "content": "hi"}]
BAD_INPUT = [
    ("malformed JSON", _CHAT, '{"model": "specflip-tiny", "messages": [', 400),
    ("body is a list", _CHAT, "[1, 2]", 400),
    ("empty body", _CHAT, "", 400),
    ("body is null", _TEXT, "null", 400),
    ("model is a number", _CHAT, {"model": 5, "messages": _MSG}, 400),
    ("model missing", _CHAT, {"messages": _MSG}, 400),
    ("stream 'yes'", _CHAT, {"model": MODEL, "messages": _MSG, "stream": "yes"}, 400),
    ("an unknown field", _TEXT, {"model": MODEL, "prompt": "x", "best_effort": True}, 400),
    ("unknown model", _CHAT, {"model": "gpt-17", "messages": _MSG}, 404),
    ("max_tokens -1", _CHAT, {"model": MODEL, "messages": _MSG, "max_tokens": -1}, 400),
    ("max_tokens 0", _TEXT, {"model": MODEL, "prompt": "x", "max_tokens": 0}, 400),
    ("max_tokens 10**9", _CHAT, {"model": MODEL, "messages": _MSG, "max_tokens": 10**9}, 400),
    ("max_tokens 'ten'", _CHAT, {"model": MODEL, "messages": _MSG, "max_tokens": "ten"}, 400),
    ("max_tokens true", _TEXT, {"model": MODEL, "prompt": "x", "max_tokens": True}, 400),
    ("max_tokens '5'", _TEXT, {"model": MODEL, "prompt": "x", "max_tokens": "5"}, 400),
    ("max_tokens 2.5", _TEXT, {"model": MODEL, "prompt": "x", "max_tokens": 2.5}, 400),
    ("temperature 'hot'", _CHAT, {"model": MODEL, "messages": _MSG, "temperature": "hot"}, 400),
    ("temperature -1", _TEXT, {"model": MODEL, "prompt": "x", "temperature": -1}, 400),
    ("messages []", _CHAT, {"model": MODEL, "messages": []}, 400),
    ("messages missing", _CHAT, {"model": MODEL}, 400),
    ("messages a string", _CHAT, {"model": MODEL, "messages": "hi"}, 400),
    ("message without content", _CHAT, {"model": MODEL, "messages": [{"role": "user"}]}, 400),
    ("message content a number", _CHAT, {"model": MODEL, "messages": [{"role": "user", "content": 5}]}, 400),
    ("unknown role", _CHAT, {"model": MODEL, "messages": [{"role": "wizard", "content": "hi"}]}, 400),
    ("prompt a number", _TEXT, {"model": MODEL, "prompt": 5}, 400),
    ("prompt [[]]", _TEXT, {"model": MODEL, "prompt": [[]]}, 400),
    ("n 0", _CHAT, {"model": MODEL, "messages": _MSG, "n": 0}, 400),
    ("n 2", _TEXT, {"model": MODEL, "prompt": "x", "n": 2}, 400),
    ("stream_options without stream", _TEXT, {"model": MODEL, "prompt": "x", "stream_options": {}}, 400),
    ("prompt beyond the context", _TEXT, {"model": MODEL, "prompt": "def foo(" * 3000, "max_tokens": 4}, 400),
    (
        "streamed prompt beyond the context",
        _TEXT,
        {"model": MODEL, "prompt": "def foo(" * 3000, "max_tokens": 4, "stream": True},
        400,
    ),
]


def _post_raw(app: LocalApp, path: str, body: Any) -> httpx.Response:
    content = body if isinstance(body, str) else json.dumps(body)
    return app.client.post(path, content=content, headers={"Content-Type": "application/json"}, timeout=120)


@pytest.mark.parametrize(("case", "path", "body", "code"), BAD_INPUT, ids=[c[0] for c in BAD_INPUT])
def test_bad_input_gets_a_4xx_with_a_reason(
    app: LocalApp, case: str, path: str, body: Any, code: int
) -> None:
    r = _post_raw(app, path, body)
    assert r.status_code == code, f"{case}: {r.status_code} {r.text[:300]}"
    message = r.json()["error"]["message"]
    assert isinstance(message, str) and message and "Traceback" not in message


def test_bad_input_spares_concurrent_good_requests_and_the_engine(app: LocalApp) -> None:
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        good = [pool.submit(_complete, app, p, 16) for p in PROMPTS[:3]]
        codes = list(pool.map(lambda c: _post_raw(app, c[1], c[2]).status_code, BAD_INPUT))
        answers = [f.result(timeout=300) for f in good]
    assert all(400 <= c < 500 for c in codes), codes
    assert all(a["usage"]["completion_tokens"] >= 1 for a in answers)
    assert all(r["patched"] and not r["stale"] for r in app.client.replicas())  # engines still report


# -- the point of it all ----------------------------------------------------------------------------
def _greedy(app: LocalApp, prompt: str) -> tuple[str, int]:
    out = _complete(app, prompt, 32, ignore_eos=True)
    return out["choices"][0]["text"], out["usage"]["completion_tokens"]


def _greedy_all(app: LocalApp) -> dict[str, tuple[str, int]]:
    with concurrent.futures.ThreadPoolExecutor(len(PROMPTS)) as pool:
        return dict(zip(PROMPTS, pool.map(lambda p: _greedy(app, p), PROMPTS), strict=True))


def _all_modes(app: LocalApp, mode: str) -> bool:
    return set(_modes(app).values()) == {mode}


def test_policy_flips_a_replica_off_under_load_and_on_again_with_greedy_outputs_unchanged(
    app: LocalApp,
) -> None:
    # plain greedy reference: every replica forced OFF (target-only decode); ON must agree too
    assert app.client.send_override("off", "*").status_code == 200
    wait_until(lambda: _all_modes(app, "off"), 20, why="all replicas OFF")
    plain = _greedy_all(app)
    assert app.client.send_override("on", "*").status_code == 200
    wait_until(lambda: _all_modes(app, "on"), 20, why="all replicas ON")
    assert _greedy_all(app) == plain
    assert app.client.send_override("auto", "*").status_code == 200
    flips_before = {r["replica_id"]: r["flips"] for r in app.client.replicas()}

    # high load: 12 clients (~6 in flight per replica, high=4) until a replica turned OFF, then a bit more
    seen_off: set[str] = set()
    results: list[tuple[str, tuple[str, int]]] = []
    stop = threading.Event()

    def client(i: int) -> None:
        while not stop.is_set():
            prompt = PROMPTS[i % len(PROMPTS)]
            results.append((prompt, _greedy(app, prompt)))
            i += 1

    with concurrent.futures.ThreadPoolExecutor(12) as pool:
        workers = [pool.submit(client, i) for i in range(12)]
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not seen_off:
            seen_off |= {rid for rid, m in _modes(app).items() if m == "off"}
            time.sleep(0.2)
        time.sleep(2.0 if seen_off else 0)  # keep serving across the OFF period
        stop.set()
        for w in workers:
            w.result(timeout=300)
    assert seen_off, f"no replica turned OFF under load; status: {app.client.status()}"

    # load gone: the policy turns them back ON
    wait_until(lambda: _all_modes(app, "on"), 30, why="replicas back ON after the load")
    status = {r["replica_id"]: r for r in app.client.replicas()}
    for rid in seen_off:
        assert status[rid]["flips"] - flips_before[rid] >= 2, status[rid]  # OFF and back ON
    metrics = app.client.metrics()
    for rid in seen_off:
        flips = re.search(rf'specflip_policy_flips_total{{replica="{rid}"}} ([0-9.]+)', metrics)
        assert flips is not None and float(flips.group(1)) >= flips_before[rid] + 2
    # greedy outputs served before, during and after the flips equal the plain ones
    assert len(results) >= 12
    mismatched = [(p, got, plain[p]) for p, got in results if got != plain[p]]
    assert not mismatched, mismatched[:3]


def test_http_metrics_are_in_rays_export_per_replica_and_metrics_serves_the_policys(app: LocalApp) -> None:
    """The replicas' HTTP-edge families reach Ray's metrics export (each replica's series with its
    id), never the policy actor: the app's /metrics has the policy's own families only."""
    r = app.client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain; version=0.0.4")
    text = r.text
    assert "specflip_requests" not in text and "specflip_ttft" not in text and "specflip_served" not in text
    names = (
        "ray_specflip_requests_total",
        "ray_specflip_request_duration_seconds_bucket",
        "ray_specflip_output_tokens_total",
        "ray_specflip_http_policy_reachable",
        "ray_specflip_served_requests_total",
    )
    replicas, answered = set(_modes(app)), set()
    body = {"model": MODEL, "prompt": "x", "max_tokens": 1}
    for _ in range(40):  # until every replica answered a completion (Ray's router picks)
        answered.add(app.client.post("/v1/completions", body).headers.get("x-specflip-replica"))
        if answered >= replicas:
            break
    assert answered >= replicas, answered
    bad = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": -1}
    assert app.client.post("/v1/chat/completions", bad).status_code == 400

    def served_by(export: str) -> set[str]:
        return {
            s.labels["replica"]
            for f in text_string_to_metric_families(export)
            for s in f.samples
            if s.name == "ray_specflip_requests_total" and s.labels.get("endpoint") == "/v1/completions"
        }

    export = wait_for_export(
        lambda t: (
            all(n in t for n in names)
            and served_by(t) == replicas
            and total(t, "ray_specflip_requests_total", endpoint="/v1/chat/completions", status="400") >= 1
        ),
        why="the HTTP-edge families of every replica, the bad chat request counted",
    )
    assert total(export, "ray_specflip_requests_total", endpoint="/v1/completions", status="200") >= len(
        replicas
    )
    for s in (s for f in text_string_to_metric_families(export) for s in f.samples):
        if s.name == "ray_specflip_requests_total":  # Ray Serve's tags on every series
            assert s.labels["replica"] in replicas and s.labels["deployment"] and s.labels["application"], s
    for rid in _modes(app):
        for series in ("actual_mode", "desired_mode", "running", "waiting", "accept_length", "flips_total"):
            assert f'specflip_policy_{series}{{replica="{rid}"}}' in text, (series, rid)
        for series in ("toggles_total", "resyncs_total", "resync_seconds_total", "control_timeouts_total"):
            assert f'specflip_engine_{series}{{replica="{rid}"}}' in text, (series, rid)
        for mode in ("on", "off"):
            assert f'specflip_engine_decode_steps_total{{mode="{mode}",replica="{rid}"}}' in text, rid
        assert re.search(rf'specflip_engine_off_cuda_graphs{{reason="[^"]+",replica="{rid}"}} 0.0', text)


def test_a_stream_counts_its_tokens_from_the_servers_tally_without_asking_for_usage(app: LocalApp) -> None:
    """TTFT, TPOT and output tokens of a stream whose client asked for no usage: the API edge reads
    the count from the server's tally (no usage chunk is made, so none can leak to the client)."""

    def counts() -> tuple[float, float]:
        text = export_text()
        return (
            total(text, "ray_specflip_output_tokens_total", endpoint="/v1/completions"),
            total(text, "ray_specflip_tpot_seconds_count", endpoint="/v1/completions"),
        )

    time.sleep(RAY_REPORT_S + 1)  # what earlier tests' requests recorded has reached Ray's export
    tokens_before, tpot_before = counts()
    body = {"model": MODEL, "prompt": "Count", "max_tokens": 7, "ignore_eos": True, "stream": True}
    r = app.client.post("/v1/completions", body)
    assert r.status_code == 200 and r.text.endswith("data: [DONE]\n\n")
    assert '"usage": {' not in r.text and '"usage":{' not in r.text  # not asked for: not sent
    # Ray hands the replica's values to its metrics agent every RAY_REPORT_S
    wait_until(
        lambda: counts()[0] >= tokens_before + 7, 3 * RAY_REPORT_S, why="the stream's 7 tokens counted"
    )
    assert counts() == (tokens_before + 7, tpot_before + 1)


def test_every_response_names_the_replica_and_its_mode_with_class_routing_off(app: LocalApp) -> None:
    assert not app.config.class_routing  # this package's app: the headers come anyway
    ids = {r["replica_id"] for r in app.client.replicas()}
    responses = {
        "chat": app.client.post("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}),
        "stream": app.client.post("/v1/completions", {"model": MODEL, "prompt": "x", "max_tokens": 2, "stream": True}),
        "400": app.client.post("/v1/completions", {"model": MODEL, "prompt": "x", "max_tokens": -1}),
        "404": app.client.get("/v1/nope"),
        "models": app.client.get("/v1/models"),
        "status": app.client.get("/specflip/status"),
        "metrics": app.client.get("/metrics"),
    }  # fmt: skip
    assert responses["chat"].status_code == responses["stream"].status_code == 200
    assert responses["400"].status_code == 400 and responses["404"].status_code == 404
    for name, r in responses.items():
        assert r.headers.get("x-specflip-replica") in ids, (name, dict(r.headers))
        assert r.headers.get("x-specflip-mode") in ("on", "off"), (name, dict(r.headers))
    assert responses["chat"].headers["x-specflip-class"] in ("interactive", "batch")
