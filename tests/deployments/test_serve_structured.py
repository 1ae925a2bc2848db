"""Structured output over HTTP on the real app (shared `app` fixture, conftest.py): every field of the
table in docs/structured_output.md reaches SGLang, the output obeys it, and greedy output is the
same with speculation forced OFF (target-only decode: the plain reference), forced ON, and toggled
while the requests run; what cannot be honoured gets a 400 naming the field."""

from __future__ import annotations

import concurrent.futures
import json
import re
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import jsonschema
import pytest

from deployments.local import LocalApp, wait_until
from tests.structured_cases import EBNF, EBNF_AS_REGEX, REGEX, SCHEMA

pytestmark = pytest.mark.serve
MODEL = "specflip-tiny"
CHAT, TEXT = "/v1/chat/completions", "/v1/completions"

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather forecast for a city",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "enum": ["Paris", "Rome", "Oslo"]},
                    "days": {"type": "integer", "minimum": 1, "maximum": 7},
                },
                "required": ["city", "days"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "add",
            "parameters": {
                "type": "object",
                "properties": {
                    "a": {"type": "integer", "minimum": 0, "maximum": 99},
                    "b": {"type": "integer", "minimum": 0, "maximum": 99},
                },
                "required": ["a", "b"],
                "additionalProperties": False,
            },
        },
    },
]
STOP_REGEX = r"list of th[a-z]"  # the unconstrained greedy output of its prompt contains it
BIASED_TOKEN = 1500  # logit_bias +100 on it: greedy output is that token, every time ("ipe")


def _msg(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def _json(text: str | None) -> Any:
    try:
        return json.loads(text or "")
    except ValueError:
        return None


def _ends_at_first_match(pattern: str, text: str) -> bool:
    """Stopped by stop_regex: the text ends within a token of the first match (SGLang keeps a regex
    match in the text; it trims only literal stop strings)."""
    m = re.search(pattern, text)
    return m is not None and len(text) - m.end() <= 8


def _valid_schema(text: str) -> bool:
    try:
        jsonschema.validate(json.loads(text), SCHEMA)
    except (ValueError, jsonschema.ValidationError):
        return False
    return True


def _valid_calls(calls: Any, names: set[str]) -> bool:
    if not calls:
        return False
    params = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    for call in calls:
        fn = call["function"]
        if call["type"] != "function" or fn["name"] not in names or not call["id"].startswith("call_"):
            return False
        try:
            jsonschema.validate(json.loads(fn["arguments"]), params[fn["name"]])
        except (ValueError, jsonschema.ValidationError):
            return False
    return True


# label -> (path, body without model/temperature, the constrained fields, check of the answer)
Check = Callable[[dict[str, Any]], bool]
CASES: dict[str, tuple[str, dict[str, Any], tuple[str, ...], Check]] = {
    "chat response_format json_schema": (
        CHAT,
        {
            "messages": _msg("x = {"),
            "max_tokens": 48,
            "response_format": {"type": "json_schema", "json_schema": {"name": "thing", "schema": SCHEMA}},
        },
        ("response_format",),
        lambda a: _valid_schema(a["content"]),
    ),
    "chat response_format json_object": (
        CHAT,
        {"messages": _msg("data = "), "max_tokens": 64, "response_format": {"type": "json_object"}},
        ("response_format",),
        lambda a: a["finish_reason"] == "stop" and isinstance(_json(a["content"]), dict),
    ),
    "completions json_schema": (
        TEXT,
        {"prompt": "class Stack:", "max_tokens": 48, "json_schema": json.dumps(SCHEMA)},
        ("json_schema",),
        lambda a: _valid_schema(a["content"]),
    ),
    "completions regex": (
        TEXT,
        {"prompt": "import os\n\n", "max_tokens": 32, "regex": REGEX},
        ("regex",),
        lambda a: re.fullmatch(REGEX, a["content"]) is not None,
    ),
    "chat regex": (
        CHAT,
        {"messages": _msg("def add(a, b):"), "max_tokens": 32, "regex": REGEX},
        ("regex",),
        lambda a: re.fullmatch(REGEX, a["content"]) is not None,
    ),
    "completions ebnf": (
        TEXT,
        {"prompt": "x = {", "max_tokens": 32, "ebnf": EBNF},
        ("ebnf",),
        lambda a: re.fullmatch(EBNF_AS_REGEX, a["content"]) is not None,
    ),
    "chat tools required": (
        CHAT,
        {
            "messages": _msg("Weather in Paris for 3 days?"),
            "max_tokens": 96,
            "tools": TOOLS,
            "tool_choice": "required",
            "parallel_tool_calls": False,
        },
        ("tools", "tool_choice"),
        lambda a: (
            a["finish_reason"] == "tool_calls" and _valid_calls(a["tool_calls"], {"get_weather", "add"})
        ),
    ),
    "chat tools named, streamed": (
        CHAT,
        {
            "messages": _msg("def add(a, b):"),
            "max_tokens": 96,
            "tools": TOOLS,
            "tool_choice": {"type": "function", "function": {"name": "add"}},
            "stream": True,
        },
        ("tools", "tool_choice"),
        lambda a: a["finish_reason"] == "tool_calls" and _valid_calls(a["tool_calls"], {"add"}),
    ),
    "completions stop_regex": (
        TEXT,
        {"prompt": "def add(a, b):", "max_tokens": 24, "stop_regex": STOP_REGEX},
        ("stop_regex",),
        lambda a: a["finish_reason"] == "stop" and _ends_at_first_match(STOP_REGEX, a["content"]),
    ),
    "completions logit_bias": (
        TEXT,
        {"prompt": "def add(a, b):", "max_tokens": 8, "logit_bias": {str(BIASED_TOKEN): 100}},
        ("logit_bias",),
        lambda a: a["content"] == a["biased"] * 8,
    ),
}


def _answer(app: LocalApp, label: str, constrained: bool = True) -> dict[str, Any]:
    """What a case's response says, ids left out: content, tool calls, finish reason, token count."""
    path, body, fields, _ = CASES[label]
    body = {"model": MODEL, "temperature": 0, **body}
    if not constrained:
        body = {k: v for k, v in body.items() if k not in fields}
    if body.get("stream"):
        return _streamed_answer(app, path, body)
    r = app.client.post(path, body, timeout=300)
    assert r.status_code == 200, (label, r.status_code, r.text[:300])
    out = r.json()
    choice, tokens = out["choices"][0], out["usage"]["completion_tokens"]
    if path == TEXT:
        return {
            "content": choice["text"],
            "tool_calls": None,
            "finish_reason": choice["finish_reason"],
            "n": tokens,
        }
    message = choice["message"]
    return {
        "content": message["content"],
        "tool_calls": message.get("tool_calls"),
        "finish_reason": choice["finish_reason"],
        "n": tokens,
    }


def _streamed_answer(app: LocalApp, path: str, body: dict[str, Any]) -> dict[str, Any]:
    body = {**body, "stream_options": {"include_usage": True}}
    chunks = []
    with httpx.stream("POST", app.client.url(path), json=body, timeout=300) as r:
        assert r.status_code == 200, r.read()[:300]
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunks.append(json.loads(line[len("data: ") :]))
    content, calls, finish = "", [], None
    for c in chunks:
        for choice in c["choices"]:
            delta = choice["delta"]
            content += delta.get("content") or ""
            for call in delta.get("tool_calls") or []:
                assert call.pop("index") == len(calls)  # streamed calls carry their position
                calls.append(call)
            finish = choice["finish_reason"] or finish
    return {
        "content": content or None,
        "tool_calls": calls or None,
        "finish_reason": finish,
        "n": chunks[-1]["usage"]["completion_tokens"],
    }


def _comparable(answer: dict[str, Any]) -> dict[str, Any]:
    calls = [c["function"] for c in answer["tool_calls"] or []]  # call ids are random
    return {**answer, "tool_calls": calls}


def _run_all(app: LocalApp, labels: list[str]) -> dict[str, dict[str, Any]]:
    with concurrent.futures.ThreadPoolExecutor(len(labels)) as pool:
        return dict(zip(labels, pool.map(lambda label: _answer(app, label), labels), strict=True))


def _force(app: LocalApp, mode: str) -> None:
    assert app.client.send_override(mode, "*").status_code == 200
    wait_until(lambda: {r["mode"] for r in app.client.replicas()} == {mode}, 20, why=f"all replicas {mode}")


def _biased_text(model_pair: Any) -> str:
    from transformers import AutoTokenizer  # the app serves no /detokenize

    return str(AutoTokenizer.from_pretrained(model_pair.target).decode([BIASED_TOKEN]))


def _engines(app: LocalApp) -> dict[str, dict[str, Any]]:
    return {r["replica_id"]: r["engine"] for r in app.client.replicas()}


def _flipped_twice(app: LocalApp, before: dict[str, dict[str, Any]]) -> bool:
    now = _engines(app)
    return all(now[rid]["toggles"] >= e["toggles"] + 2 for rid, e in before.items())


def _check(answers: dict[str, dict[str, Any]], biased: str, when: str) -> None:
    for label, answer in answers.items():
        ok = CASES[label][3]({**answer, "biased": biased})
        assert ok, f"{when}: {label}: output does not obey the constraint: {answer}"


def test_structured_output_obeys_its_field_and_is_the_same_with_speculation_off_on_and_toggled(
    app: LocalApp, model_pair: Any
) -> None:
    check_off_on_toggled(app, list(CASES), _biased_text(model_pair).strip())


def check_off_on_toggled(app: LocalApp, labels: list[str], biased: str) -> None:
    """The cases' outputs obey their constraint and are the same forced OFF (the plain reference),
    forced ON, and while every replica flips; the engines report the flips (shared with the direct
    data path's test). `biased`: the text of BIASED_TOKEN."""
    try:
        _force(app, "off")  # the plain reference: target-only decode
        plain = _run_all(app, labels)
        _check(plain, biased, "off")
        # an ignored field would be caught: without it, the same request gives output that fails the check
        for label in labels:
            free = _answer(app, label, constrained=False)
            assert not CASES[label][3]({**free, "biased": biased}), (
                f"{label}: unconstrained output passes too"
            )

        _force(app, "on")
        on = _run_all(app, labels)
        _check(on, biased, "on")
        assert {k: _comparable(v) for k, v in on.items()} == {k: _comparable(v) for k, v in plain.items()}

        # toggled: flip every replica on/off while the requests run
        before = _engines(app)
        stop = threading.Event()

        def toggle() -> None:
            while not stop.is_set():
                for mode in ("off", "on"):
                    app.client.send_override(mode, "*")
                    time.sleep(0.3)

        toggler = threading.Thread(target=toggle, daemon=True)
        toggler.start()
        try:
            # a flip takes effect at the replica's next engine step: a replica that the round balancer
            # gave few requests may not have stepped through two flips yet, so serve more rounds
            # (every one checked below) until each has, six at most
            rounds: list[dict[str, dict[str, Any]]] = []
            while len(rounds) < 2 or (len(rounds) < 6 and not _flipped_twice(app, before)):
                rounds.append(_run_all(app, labels))
        finally:
            stop.set()
            toggler.join(timeout=10)
        after = _engines(app)
        for answers in rounds:
            _check(answers, biased, "toggled")
            assert {k: _comparable(v) for k, v in answers.items()} == {
                k: _comparable(v) for k, v in plain.items()
            }
        # the engines did flip while serving them, ran decode steps in both modes and resynced the
        # draft at each re-enable, timed (the engine state each replica reports)
        for rid, e in after.items():
            assert e["toggles"] >= before[rid]["toggles"] + 2, (rid, before[rid], e)
            assert e["resyncs"] > before[rid]["resyncs"], (rid, before[rid], e)
            assert e["resync_ms_total"] > before[rid]["resync_ms_total"], (rid, before[rid], e)
            for mode in ("on", "off"):
                assert e["decode_steps"][mode] > before[rid]["decode_steps"][mode], (rid, mode)
    finally:
        assert app.client.send_override("auto", "*").status_code == 200


_TOOL_REQUIRED = {"tools": TOOLS, "tool_choice": "required"}
REFUSED = [  # (case, path, body, a word the message must contain)
    ("two constraints", TEXT, {"prompt": "x", "regex": "a+", "json_schema": "{}"}, "regex and json_schema"),
    (
        "response_format with tools",
        CHAT,
        {"response_format": {"type": "json_object"}, **_TOOL_REQUIRED},
        "tools",
    ),
    ("tools, tool_choice auto (default)", CHAT, {"tools": TOOLS}, "tool_choice"),
    ("tool_choice required without tools", CHAT, {"tool_choice": "required"}, "tool_choice"),
    (
        "named tool not in tools",
        CHAT,
        {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "rm"}}},
        "tool_choice",
    ),
    (
        "tool type not function",
        CHAT,
        {"tools": [{**TOOLS[0], "type": "code"}], "tool_choice": "required"},
        "tools[0].type",
    ),
    ("tools on completions", TEXT, {"prompt": "x", **_TOOL_REQUIRED}, "tools"),
    ("json_schema on chat", CHAT, {"json_schema": json.dumps(SCHEMA)}, "json_schema"),
    ("json_schema not JSON", TEXT, {"prompt": "x", "json_schema": "{"}, "json_schema"),
    (
        "logit_bias token outside the vocabulary",
        TEXT,
        {"prompt": "x", "logit_bias": {"99999": 1}},
        "logit_bias",
    ),
    ("logit_bias key not a token id", CHAT, {"logit_bias": {"hello": 1}}, "logit_bias"),
    ("logit_bias value 1000", TEXT, {"prompt": "x", "logit_bias": {"5": 1000}}, "logit_bias"),
    ("stop_regex invalid", TEXT, {"prompt": "x", "stop_regex": "("}, "stop_regex"),
    ("regex the grammar compiler rejects", TEXT, {"prompt": "x", "regex": "(a"}, "regex"),
    ("same, streamed", TEXT, {"prompt": "x", "regex": "(a", "stream": True}, "regex"),
    ("ebnf the grammar compiler rejects", TEXT, {"prompt": "x", "ebnf": "root ::= ("}, "ebnf"),
    (
        "schema the grammar compiler rejects",
        CHAT,
        {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "x", "schema": {"type": "nonsense"}},
            }
        },
        "response_format",
    ),
    ("response_format type unknown", CHAT, {"response_format": {"type": "xml"}}, "response_format"),
]


@pytest.mark.parametrize(("case", "path", "body", "word"), REFUSED, ids=[c[0] for c in REFUSED])
def test_structured_fields_that_cannot_be_honoured_get_a_400_naming_the_field(
    app: LocalApp, case: str, path: str, body: dict[str, Any], word: str
) -> None:
    full = {"model": MODEL, "max_tokens": 8, **({"messages": _msg("hi")} if path == CHAT else {}), **body}
    r = app.client.post(path, full, timeout=120)
    assert r.status_code == 400, f"{case}: {r.status_code} {r.text[:300]}"
    message = r.json()["error"]["message"]
    assert word in message and "Traceback" not in message, (case, message)
    if "compiler rejects" in case or case.startswith("same"):  # refused by SGLang, named by the replica
        assert r.json()["error"]["param"] == word, (case, r.json())
