"""Issue 20's report items: one id per stream, usage summed over a stream's prompts, and
`usage.specflip` (modes, accept length, flipped) on responses, with its opt-out and metrics.

The unit tests drive `SpecFlipServer._with_usage` on a bare server (no engine: the generator it
wraps is a stand-in for deployments.replica.generate's, named as such); the real-app tests use the
package's shared app."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncGenerator
from types import SimpleNamespace
from typing import Any

import pytest

from deployments.config import SpecFlipConfig
from deployments.http.metrics import http_metrics
from deployments.http.request_report import Tally
from deployments.local import LocalApp, wait_until
from deployments.replica.generate import sse
from deployments.replica.server import SpecFlipServer
from tests.deployments.conftest import MODEL
from tests.prom import total
from tests.ray_metrics import RAY_REPORT_S, export_text

MIN = {"model": {"path": "/m", "draft_path": "/d"}, "engine": {"device": "cpu"}}


# -- the report itself ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("seen", "flipped", "modes", "label"),
    [
        (["on", "on"], False, ["on"], "on"),
        (["off"], False, ["off"], "off"),
        (["on", "off"], False, ["off", "on"], "both"),
        (["on"], True, ["off", "on"], "both"),  # the flip counter moved between two state reads
        (["unknown", "on"], False, ["on"], "on"),  # the first state read came while it ran
        (["unknown"], False, ["unknown"], "unknown"),
    ],
)
def test_modes_are_the_sampled_ones_and_a_flip_means_both(
    seen: list[str], flipped: bool, modes: list[str], label: str
) -> None:
    tally = Tally(seen[0], flips=3)
    for mode in seen[1:]:
        tally.see(mode, 3)
    tally.see(seen[-1], 4 if flipped else 3)
    report = tally.report()
    assert (list(report.modes), report.flipped, report.modes_label) == (modes, flipped, label)


def test_accept_length_is_decode_tokens_per_decode_step_summed_over_prompts() -> None:
    tally = Tally("on", 0)
    assert tally.report().accept_length is None  # no decode step ran
    # what the patched engine reports (probed on the tiny pair): 24 tokens ON in 8 verify steps,
    # 24 tokens OFF in 23 plain decode steps (each counted as a verify that accepted one token)
    tally.add_output({"prompt_tokens": 7, "completion_tokens": 24, "spec_verify_ct": 8})
    assert tally.report().accept_length == round(23 / 8, 3)
    off = Tally("off", 0)
    off.add_output({"prompt_tokens": 7, "completion_tokens": 24, "spec_verify_ct": 23})
    assert off.report().accept_length == 1.0
    tally.add_output({"prompt_tokens": 5, "completion_tokens": 1})  # prefill only: no decode step
    assert (tally.prompt_tokens, tally.completion_tokens) == (12, 25)
    assert tally.report().accept_length == round(23 / 8, 3)


# -- _with_usage on a bare server: one id, the opt-out ---------------------------------------------
def _bare_server(request_report: bool) -> SpecFlipServer:
    server = SpecFlipServer.__new__(SpecFlipServer)  # no engine: only _with_usage's state
    server.config = SpecFlipConfig.model_validate({**MIN, "serve": {"request_report": request_report}})
    server.loop = SimpleNamespace(last_state=SimpleNamespace(patched=True, requested=True), applied_flips=0)  # type: ignore[assignment]
    return server


def _request(stream: bool) -> Any:
    options = SimpleNamespace(include_usage=True) if stream else None
    return SimpleNamespace(stream=stream, stream_options=options, model=MODEL)


async def _fake_stream(tally: Tally) -> AsyncGenerator[Any, None]:
    """Stand-in for the replica's completions stream: two prompts' chunks under one id, their counts."""
    for i, meta in enumerate(
        (
            {"prompt_tokens": 3, "completion_tokens": 5, "spec_verify_ct": 2},
            {"prompt_tokens": 4, "completion_tokens": 3, "spec_verify_ct": 1},
        )
    ):
        chunk = {"id": "sglang-gen-stream", "object": "text_completion", "created": 1, "model": MODEL}
        yield sse({**chunk, "choices": [{"index": i, "text": "x"}]})
        tally.add_output(meta)


def _collect(
    server: SpecFlipServer, request: Any, inner: AsyncGenerator[Any, None], tally: Tally
) -> list[Any]:
    async def run() -> list[Any]:
        return [item async for item in server._with_usage(request, inner, "text_completion", tally)]

    return asyncio.run(run())


@pytest.mark.parametrize("request_report", [True, False])
def test_the_usage_chunk_has_the_streams_id_and_the_report_unless_opted_out(request_report: bool) -> None:
    server, request = _bare_server(request_report), _request(stream=True)
    tally = server.new_tally()
    items = _collect(server, request, _fake_stream(tally), tally)
    chunks = [json.loads(item.removeprefix("data: ")) for item in items]
    assert {c["id"] for c in chunks} == {"sglang-gen-stream"}
    usage = chunks[-1]["usage"]
    assert (usage["prompt_tokens"], usage["completion_tokens"], usage["total_tokens"]) == (7, 8, 15)
    if request_report:
        assert usage["specflip"] == {"modes": ["on"], "accept_length": round(6 / 3, 3), "flipped": False}
    else:
        assert "specflip" not in usage


@pytest.mark.parametrize("request_report", [True, False])
def test_a_non_streamed_response_carries_the_report_unless_opted_out(
    request_report: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    counted: list[str] = []  # what the replica records (Ray's export is read by the real-app test below)
    metrics = http_metrics()
    monkeypatch.setattr(metrics, "observe_report", lambda report: counted.append(report.modes_label))
    server, request = _bare_server(request_report), _request(stream=False)
    usage = {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}
    answer = {"id": "cmpl-1", "object": "text_completion", "created": 1, "model": MODEL, "choices": []}
    tally = server.new_tally()

    async def fake_answer() -> AsyncGenerator[Any, None]:
        """Stand-in for the replica's non-streamed answer (deployments.replica.generate)."""
        tally.add_output({"completion_tokens": 5, "spec_verify_ct": 2})
        server.loop.applied_flips = 1  # type: ignore[attr-defined]  # the loop flipped meanwhile
        yield {**answer, "usage": dict(usage)}

    (dumped,) = _collect(server, request, fake_answer(), tally)  # the dict the API sends as JSON
    assert dumped["id"] == "cmpl-1"
    assert {k: dumped["usage"][k] for k in usage} == usage
    if request_report:
        assert dumped["usage"]["specflip"] == {"modes": ["off", "on"], "accept_length": 2.0, "flipped": True}
    else:
        assert "specflip" not in dumped["usage"]
    assert counted == ["both"]  # counted either way


# -- the real app ---------------------------------------------------------------------------------
def _events(app: LocalApp, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    r = app.client.post(
        path, {**body, "stream": True, "stream_options": {"include_usage": True}}, timeout=300
    )
    assert r.status_code == 200, r.text[:300]
    lines = [line.removeprefix("data: ") for line in r.text.splitlines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(line) for line in lines[:-1]]


_TEXT = {"model": MODEL, "max_tokens": 12, "temperature": 0, "ignore_eos": True}
_CHAT = {**_TEXT, "messages": [{"role": "user", "content": "def add(a, b):"}]}


@pytest.mark.serve
def test_every_chunk_of_a_stream_the_usage_chunk_included_carries_one_id(app: LocalApp) -> None:
    for path, body in (
        ("/v1/chat/completions", _CHAT),
        ("/v1/completions", {**_TEXT, "prompt": "class Stack:"}),
    ):
        events = _events(app, path, body)
        assert events[-1]["usage"] and not events[-1]["choices"]
        assert len({e["id"] for e in events}) == 1, (path, [e["id"] for e in events])


@pytest.mark.serve
def test_a_streamed_multi_prompt_completion_reports_the_usage_of_all_its_prompts(app: LocalApp) -> None:
    body = {**_TEXT, "prompt": ["def add(a, b):", "class Stack:", "for i in range("]}
    whole = app.client.completion(body)["usage"]
    streamed = _events(app, "/v1/completions", body)[-1]["usage"]
    keys = ("prompt_tokens", "completion_tokens", "total_tokens")
    assert {k: streamed[k] for k in keys} == {k: whole[k] for k in keys}
    assert whole["completion_tokens"] == 3 * 12  # ignore_eos: every prompt its max_tokens


def _all_modes(app: LocalApp, mode: str) -> bool:
    return {r["mode"] for r in app.client.replicas()} == {mode}


@pytest.mark.serve
def test_responses_say_the_mode_they_ran_under_and_their_accept_length(app: LocalApp) -> None:
    time.sleep(RAY_REPORT_S + 1)  # earlier requests' counts have reached Ray's export
    before = export_text()
    seen: dict[str, list[dict[str, Any]]] = {}
    try:
        for mode in ("on", "off"):
            assert app.client.send_override(mode, "*").status_code == 200
            wait_until(lambda: _all_modes(app, mode), 20, why=f"all replicas {mode.upper()}")  # noqa: B023
            whole = app.client.completion({**_TEXT, "prompt": "def add(a, b):"})
            streamed = _events(app, "/v1/chat/completions", _CHAT)[-1]
            seen[mode] = [whole["usage"]["specflip"], streamed["usage"]["specflip"]]
    finally:
        assert app.client.send_override("auto", "*").status_code == 200
    for report in seen["on"]:
        assert report["modes"] == ["on"] and report["flipped"] is False
        assert report["accept_length"] > 1, report  # the tiny pair is trained: drafts get accepted
    for report in seen["off"]:
        assert report == {"modes": ["off"], "accept_length": 1.0, "flipped": False}

    def counted() -> bool:
        after = export_text()
        grew = lambda name, **labels: total(after, name, **labels) - total(before, name, **labels)  # noqa: E731
        return (
            grew("ray_specflip_request_modes_total", modes="on") >= 2
            and grew("ray_specflip_request_modes_total", modes="off") >= 2
            and grew("ray_specflip_request_accept_length_count") >= 2
        )

    wait_until(counted, 15 + 2 * RAY_REPORT_S, why="requests counted by mode in Ray's metrics export")
