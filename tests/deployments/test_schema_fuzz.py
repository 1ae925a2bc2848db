"""Schemathesis against the real app: requests generated from the app's own OpenAPI document for
every route it serves (/v1 and /specflip), with the served model id filled in and the override
token supplied. No answer may be a 5xx; every answer must have a documented status, content
type and body schema; the app must be healthy afterwards. Bounded to ~220 cases
(max_tokens clamped so each generation is short on CPU). Schemathesis's own pytest plugin does
not run under pytest 9 (it sets `Function._nodeid`), so each operation's strategy runs under
Hypothesis's `@given` directly.

Cases that failed once are kept as explicit examples (`FOUND`), so they run every time."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from deployments.local import LocalApp, wait_until
from tests.deployments.conftest import MODEL, ROOT
from tests.deployments.schemathesis_hooks import bounded
from tests.reporting import report

pytestmark = pytest.mark.serve
TRIED: Counter[tuple[str, int]] = Counter()
POSITIVE_BY_ROUTE: Counter[tuple[str, int]] = Counter()  # schema-valid chat/completions bodies by status
GENERATIVE = ("/v1/chat/completions", "/v1/completions")
POSITIVE, NEGATIVE = 40, 20  # cases per operation
PARAMETERLESS = {"GET /v1/models", "GET /specflip/status", "GET /metrics"}

# bodies that once got a 5xx (now 4xx): replayed on every run
FOUND: list[tuple[str, dict[str, Any]]] = [
    ("/v1/completions", {"model": MODEL, "prompt": "a", "min_tokens": 2, "stop_token_ids": [99999]}),
    ("/v1/completions", {"model": MODEL, "prompt": [0], "max_tokens": 1}),
    (
        "/v1/chat/completions",
        {"model": MODEL, "messages": [{"role": "user", "content": ""}], "response_format": ""},
    ),
    (
        "/v1/chat/completions",
        {"model": MODEL, "messages": [{"role": "tool", "content": []}], "max_tokens": 1},
    ),
    # Schemathesis's CLI (its coverage phase): an object or a list for a tag
    (
        "/v1/chat/completions",
        {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "tool_choice": {"type": {}}},
    ),
    ("/v1/completions", {"model": MODEL, "prompt": "a", "response_format": {"type": []}}),
    # the CLI's fuzzing phase: a top_k beyond int32 killed the replica's scheduler (500, then a
    # restart); min_tokens beyond int32 without max_tokens is the same tensor's kind
    ("/v1/completions", {"model": MODEL, "prompt": "a", "max_tokens": 2, "top_k": 28688198248}),
    ("/v1/completions", {"model": MODEL, "prompt": "a", "min_tokens": 2**31}),
]


@pytest.mark.parametrize(
    ("mode", "examples"), [(GenerationMode.POSITIVE, POSITIVE), (GenerationMode.NEGATIVE, NEGATIVE)]
)
def test_generated_requests_get_documented_answers_and_never_a_5xx(
    app: LocalApp, mode: GenerationMode, examples: int
) -> None:
    """Per served operation, `examples` generated cases (valid ones, then schema-violating ones)."""
    schema = schemathesis.openapi.from_url(f"{app.base}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) == 7, [op.path for op in operations]
    for operation in operations:

        @settings(
            max_examples=examples,
            deadline=None,
            derandomize=True,  # the same cases every run (CI reproducible)
            database=None,
            phases=[Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @given(case=operation.as_strategy(generation_mode=mode))
        def check(case: Any) -> None:
            bounded(case)
            response = case.call(base_url=app.base, timeout=300)
            TRIED[(f"{case.method} {case.path}", response.status_code)] += 1
            if mode is GenerationMode.POSITIVE and case.path in GENERATIVE:
                POSITIVE_BY_ROUTE[(case.path, response.status_code)] += 1
            assert response.status_code < 500, (
                f"{case.method} {case.path} {case.body!r:.300} -> {response.text[:300]}"
            )
            case.validate_response(
                response,
                checks=[status_code_conformance, content_type_conformance, response_schema_conformance],
            )

        try:
            check()
        except Unsatisfiable:  # negative mode, an operation without parameters: nothing to violate
            assert mode is GenerationMode.NEGATIVE, operation.path


@pytest.mark.parametrize(("path", "body"), FOUND)
def test_requests_the_fuzzer_found_stay_client_errors(app: LocalApp, path: str, body: dict[str, Any]) -> None:
    r = app.client.post(path, body, timeout=300)
    assert r.status_code < 500, r.text[:300]


def test_schemathesis_cli_finds_no_server_error(app: LocalApp, tmp_path: Path) -> None:
    """Schemathesis's own CLI on the app's schema, as a user would run it (its coverage phase
    tries each field's edge and wrong-typed values deterministically, which the Hypothesis run
    above does not): not one 5xx. Requests bounded by the same hook."""
    cli = Path(sys.executable).with_name("st")
    command = [str(cli), "run", f"{app.base}/openapi.json", "--checks", "not_a_server_error"]
    # one worker: in CPython 3.11 ast.parse keeps its recursion counter per interpreter, and
    # Hypothesis parses lambda sources from each worker thread (two threads failed one run with
    # "SystemError: AST constructor recursion depth mismatch", with every request answered)
    command += ["--phases", "examples,coverage,fuzzing", "--max-examples", "10", "--workers", "1"]
    command += ["--request-timeout", "300"]
    env = {
        **os.environ,
        "SCHEMATHESIS_HOOKS": "tests.deployments.schemathesis_hooks",
        "PYTHONPATH": str(ROOT),
    }
    started = time.monotonic()
    run = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1500)
    took = time.monotonic() - started
    out = run.stdout.splitlines()
    cases = next(
        (out[i + 1].strip() for i, line in enumerate(out[:-1]) if line.strip() == "Test cases:"), "?"
    )
    report(f"schemathesis CLI: exit {run.returncode} in {took:.0f} s; test cases: {cases}")
    assert run.returncode == 0, run.stdout[-4000:]


def test_the_fuzzing_covered_every_operation_and_left_the_app_healthy(app: LocalApp) -> None:
    total = sum(TRIED.values())
    by_route: Counter[str] = Counter()
    for (route, _), n in TRIED.items():
        by_route[route] += n
    report(f"schemathesis: {total} cases; by route {dict(by_route)}; by status {_statuses()}")
    for route in GENERATIVE:
        answered = {s: n for (r, s), n in POSITIVE_BY_ROUTE.items() if r == route}
        report(
            f"schemathesis: {route} bodies valid against /openapi.json, by status {dict(sorted(answered.items()))}"
        )
        # the document describes what the app accepts (the reliability report: 56-57 of 60 schema-valid bodies
        # were refused); what it cannot say (a cross-field rule, a token id beyond the vocabulary,
        # a grammar that does not compile) is still a named 400
        assert answered.get(200, 0) >= 0.5 * sum(answered.values()), answered
    # every operation that takes input got at least its positive cases; parameterless GETs have
    # one possible case, which Hypothesis generates once
    takes_input = {r: n for r, n in by_route.items() if r not in PARAMETERLESS}
    assert len(by_route) == 7 and all(by_route[r] >= 1 for r in PARAMETERLESS), by_route
    assert takes_input and all(n >= POSITIVE for n in takes_input.values()), by_route
    # the three bodies also got negative cases (a path-only string parameter has none)
    assert total >= 3 * (POSITIVE + NEGATIVE) + POSITIVE + len(PARAMETERLESS), TRIED
    assert not [k for k in TRIED if k[1] >= 500]
    # whatever the generated overrides did: back to the policy's own decisions, every replica ON
    # the fuzzer's own override calls may have used up the control rate limit (429) a moment ago
    wait_until(
        lambda: app.client.send_override("auto", "*").status_code == 200,
        15,
        every_s=0.5,
        why="override accepted",
    )
    wait_until(lambda: {r["mode"] for r in app.client.replicas()} == {"on"}, 60, why="replicas back ON")
    replicas = app.client.replicas()
    assert len(replicas) == 2 and not any(r["stale"] for r in replicas)
    ok = app.client.post("/v1/completions", {"model": MODEL, "prompt": "def", "max_tokens": 4}, timeout=300)
    assert ok.status_code == 200


def _statuses() -> dict[int, int]:
    out: Counter[int] = Counter()
    for (_, status), n in TRIED.items():
        out[status] += n
    return dict(sorted(out.items()))
