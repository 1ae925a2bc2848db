"""OpenAI conformance against the real app: requests generated from OpenAI's chat/completions and
completions request schemas (tests/deployments/openai_gen.py, seeded: the same bodies every run).

- OpenAI-valid requests within what the app serves: >= 95% answered 200 (the rest a 4xx naming
  the field), none a 5xx. Issue 20 found 393 of 500 schema-valid requests refused (nulls,
  integral floats, top_p 0, no prompt, function and assistant messages without content, refusal
  parts).
- OpenAI-valid requests with one value the app refuses by design (docs/structured_output.md,
  "Refused by design"): every one a 400 naming that field.
- Invalid requests (a wrong JSON type, an unknown field): every one a 400 naming the field, as
  OpenAI answers them.

The generator's own consistency with the body guard (every valid body passes it, every other is
refused by it) is checked without the app first, so a failure here is the app's."""

from __future__ import annotations

import concurrent.futures
import json
import random
from collections import Counter
from typing import Any

import pytest

from deployments.http.body import Problem
from deployments.http.limits import read_limits
from deployments.local import LocalApp
from tests.deployments.bodies import check_body
from tests.deployments.conftest import MODEL
from tests.deployments.openai_gen import Case, invalid, unserved, valid
from tests.reporting import report

VALID_PER_ENDPOINT = 120
SEED = 20


def _cases() -> tuple[list[Case], list[Case], list[Case]]:
    rng = random.Random(SEED)
    valid_cases = [
        valid(rng, chat=chat, model=MODEL) for chat in (True, False) for _ in range(VALID_PER_ENDPOINT)
    ]
    unserved_cases = [c for chat in (True, False) for c in unserved(rng, chat=chat, model=MODEL)]
    invalid_cases = [c for chat in (True, False) for c in invalid(rng, chat=chat, model=MODEL)]
    return valid_cases, unserved_cases, invalid_cases


VALID, UNSERVED, INVALID = _cases()


def _endpoint(case: Case) -> Any:
    return "chat" if case.path.endswith("/chat/completions") else "completions"


def test_the_generator_agrees_with_the_body_guard(model_pair: Any) -> None:
    """Without the app: valid bodies pass the guard's checks, the others are refused by name."""
    limits = read_limits(model_pair.target)
    for case in VALID:
        result = check_body(_endpoint(case), json.loads(json.dumps(case.body)), limits, model_id=MODEL)
        assert not isinstance(result, Problem), (case.body, result)
    for case in UNSERVED + INVALID:
        result = check_body(_endpoint(case), json.loads(json.dumps(case.body)), limits, model_id=MODEL)
        assert isinstance(result, Problem) and (result.param or "").startswith(case.field or "?"), (
            case,
            result,
        )
    # every Served field of both endpoints got its case
    assert len({(c.path, c.field) for c in UNSERVED}) == len(UNSERVED) >= 18


# OpenAI's response schemas (CreateChatCompletionResponse, CreateCompletionResponse, their stream
# chunks), as far as a body's shape goes: the properties they make nullable; every other null is a
# deviation (the reliability report: `message.tool_calls: null`, `usage.prompt_tokens_details: null`)
_NULLABLE = {
    "chat.completion": {"content", "refusal", "logprobs", "service_tier", "system_fingerprint", "audio"},
    "text_completion": {"logprobs", "service_tier", "system_fingerprint"},
    "chat.completion.chunk": {"content", "refusal", "logprobs", "finish_reason", "usage", "service_tier",
                              "system_fingerprint"},
}  # fmt: skip
_NULLABLE["text_completion.chunk"] = _NULLABLE["text_completion"] | {"finish_reason", "usage"}


def _nulls(value: Any, nullable: set[str], path: str = "") -> list[str]:
    if isinstance(value, dict):
        out = [f"{path}{k}" for k, v in value.items() if v is None and k not in nullable]
        for k, v in value.items():
            if path == "usage." and k == "specflip":
                continue  # specflip's own extension: OpenAI's schema says nothing of its content
            out += _nulls(v, nullable, f"{path}{k}.")
        return out
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _nulls(v, nullable, f"{path}{i}.")]
    return []


def response_problems(body: dict[str, Any], *, streamed: bool) -> list[str]:
    """How a 200 body (or one stream chunk) deviates from OpenAI's response schema; [] if it does not."""
    kind = str(body.get("object"))
    key = f"{kind}.chunk" if streamed and kind == "text_completion" else kind
    if key not in _NULLABLE:
        return [f"object {kind!r}"]
    problems = _nulls(body, _NULLABLE[key])
    for i, choice in enumerate(body.get("choices") or []):
        if "logprobs" not in choice and not kind.endswith("chunk"):
            problems.append(f"choices.{i}.logprobs missing")
        message = choice.get("message")
        if kind == "chat.completion":
            if not isinstance(message, dict) or message.get("role") != "assistant":
                problems.append(f"choices.{i}.message.role")
            else:
                problems += [
                    f"choices.{i}.message.{k} missing" for k in ("content", "refusal") if k not in message
                ]
                if "tool_calls" in message and not message["tool_calls"]:
                    problems.append(f"choices.{i}.message.tool_calls empty")
    if not streamed or body.get("usage") is not None:
        usage = body.get("usage") or {}
        problems += [f"usage.{k}" for k in ("prompt_tokens", "completion_tokens", "total_tokens")
                     if not isinstance(usage.get(k), int)]  # fmt: skip
    return problems


def _send(app: LocalApp, case: Case) -> tuple[Case, int, dict[str, Any]]:
    r = app.client.post(case.path, case.body, timeout=300)
    if r.status_code == 200 and case.body.get("stream"):
        lines = [line for line in r.text.splitlines() if line.startswith("data: ")]
        assert lines and lines[-1] == "data: [DONE]", r.text[-300:]
        chunks = [json.loads(line[6:]) for line in lines[:-1]]
        errors = [c for c in chunks if "error" in c]
        if errors:
            return case, 500, errors[0]
        problems = [p for c in chunks for p in response_problems(c, streamed=True)]
        return case, 200, {"shape": problems} if problems else {}
    try:
        body = r.json()
    except ValueError:
        body = {"raw": r.text[:300]}
    if r.status_code == 200:
        problems = response_problems(body, streamed=False)
        return case, 200, {"shape": problems, "body": body} if problems else body
    return case, r.status_code, body


def _send_all(app: LocalApp, cases: list[Case]) -> list[tuple[Case, int, dict[str, Any]]]:
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        return list(pool.map(lambda c: _send(app, c), cases))


def _names_a_field(body: dict[str, Any]) -> bool:
    error = body.get("error") or {}
    message = str(error.get("message", ""))
    return bool(error.get("param")) or message.split(" ", 1)[0] in (
        "prompt",
        "messages",
        "response_format",
        "tools",
    )


@pytest.mark.serve
def test_openai_valid_requests_are_served(app: LocalApp) -> None:
    results = _send_all(app, VALID)
    statuses = Counter(status for _, status, _ in results)
    by_endpoint = Counter((_endpoint(c), s) for c, s, _ in results)
    refused = [(c.body, b) for c, s, b in results if s != 200]
    report(
        f"openai conformance, valid requests: {len(results)}, by status {dict(sorted(statuses.items()))}, "
        f"by endpoint {dict(sorted(by_endpoint.items()))}"
    )
    assert not [r for _, s, r in results if s >= 500], refused[:3]
    assert statuses[200] >= 0.95 * len(results), refused[:5]
    # every answer in OpenAI's response schema (no null where it has none, `refusal` present)
    off_schema = [(b["shape"], c.body) for c, s, b in results if s == 200 and b.get("shape")]
    assert not off_schema, off_schema[:3]
    assert all(_names_a_field(b) for _, b in refused), refused[:5]


@pytest.mark.serve
@pytest.mark.parametrize("kind", ["unserved", "invalid"])
def test_refused_requests_get_a_400_naming_the_field(app: LocalApp, kind: str) -> None:
    cases = UNSERVED if kind == "unserved" else INVALID
    results = _send_all(app, cases)
    wrong = [
        (c.field, s, b)
        for c, s, b in results
        if s != 400 or not str((b.get("error") or {}).get("param") or "").startswith(c.field or "?")
    ]
    report(
        f"openai conformance, {kind} requests: {len(results)}, 400 naming the field: {len(results) - len(wrong)}"
    )
    assert not wrong, wrong[:5]


@pytest.mark.serve
def test_the_app_is_healthy_after_the_conformance_run(app: LocalApp) -> None:
    replicas = app.client.replicas()
    assert len(replicas) == 2 and not any(r["stale"] for r in replicas)
    r = app.client.post("/v1/completions", {"model": MODEL, "prompt": "def", "max_tokens": 4}, timeout=300)
    assert r.status_code == 200


def test_the_response_check_finds_what_ray_dumps_and_passes_the_shaped_body() -> None:
    from deployments.http.openai_shape import shape_chat_response

    dumped = {  # a chat answer as Ray's ChatCompletionResponse.model_dump() has it (the reliability report)
        "id": "x", "object": "chat.completion", "created": 1, "model": MODEL,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi", "tool_calls": None},
                     "finish_reason": "stop", "logprobs": None}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2, "prompt_tokens_details": None},
    }  # fmt: skip
    assert set(response_problems(dumped, streamed=False)) == {
        "choices.0.message.tool_calls",
        "choices.0.message.tool_calls empty",
        "choices.0.message.refusal missing",
        "usage.prompt_tokens_details",
    }
    assert response_problems(shape_chat_response(dumped), streamed=False) == []
