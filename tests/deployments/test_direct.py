"""The direct data path's replica app (`serve.data_path: direct`): SGLang's real OpenAI server app,
cut down to the routes the app serves and guarded as the ingress is. No engine is started: every
answer asserted here is given before a route handler runs (the guard, CORS, the router), so
SGLang's module-level app is used as it is, with deployments.direct applied to it.

The generated answers themselves (the engine behind the kept routes) are the direct path's
end-to-end runs in loadtests.rawvsapp."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from deployments.defaults import cpu_demo_config
from deployments.direct import DIRECT_ROUTES, restrict_and_guard, structured_check

pytestmark = pytest.mark.engine  # imports SGLang's HTTP server (half a minute on a loaded host)
MODEL = "specflip-tiny"
CHAT, TEXT = "/v1/chat/completions", "/v1/completions"


@pytest.fixture(scope="module")
def client(model_pair: Any) -> Iterator[TestClient]:
    from sglang.srt.entrypoints.http_server import app  # one per process: SGLang's own global

    config = cpu_demo_config(
        (model_pair.target, model_pair.draft),
        serve={"data_path": "direct", "cors_allow_origins": ["https://app.example"]},
    )
    restrict_and_guard(app, config, structured_check(config))  # as direct_app does
    # not entered: SGLang's lifespan needs the engine (patched_worker.http_app sets it up there)
    yield TestClient(app, raise_server_exceptions=False)


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/update_weights_from_disk"),
        ("POST", "/release_memory_occupation"),
        ("POST", "/pause_generation"),
        ("POST", "/abort_request"),
        ("POST", "/configure_logging"),
        ("GET", "/start_profile"),
        ("POST", "/generate"),
        ("GET", "/get_server_info"),
        ("POST", "/v1/embeddings"),
    ],
)
def test_sglangs_unauthenticated_admin_routes_are_not_served(
    client: TestClient, method: str, path: str
) -> None:
    assert client.request(method, path, json={}).status_code in (404, 405)


def test_only_the_served_routes_are_left_and_in_the_schema(client: TestClient) -> None:
    paths = set(client.get("/openapi.json").json()["paths"])
    assert paths <= {p.replace(":path", "") for p in DIRECT_ROUTES} and {CHAT, TEXT, "/v1/models"} <= paths


@pytest.mark.parametrize(
    ("path", "raw", "status", "param"),
    [
        (CHAT, '{"model": "specflip-tiny", "messages": NaN}', 400, None),
        (TEXT, '{"model": "specflip-tiny", "prompt": "a\\ud800b"}', 400, "prompt"),
        (CHAT, '{"model": "specflip-tiny", "messages": [{"role": "user", "content": {"x": 1}}]}', 400, None),
        (
            CHAT,
            '{"model": "specflip-tiny", "messages": [{"role": "user", "content": "x"}], '
            '"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]}',
            400,
            None,  # structured_check: no tool-call parser configured, named in the message
        ),
    ],
)
def test_the_ingress_body_checks_apply(
    client: TestClient, path: str, raw: str, status: int, param: str | None
) -> None:
    r = client.post(path, content=raw, headers={"Content-Type": "application/json"})
    assert r.status_code == status, r.text[:300]
    error = r.json()["error"]
    assert error["code"] == status and "Traceback" not in r.text
    if param is not None:
        assert error["param"] == param


def test_an_oversized_prompt_is_refused_by_size_before_sglang_tokenizes_it(client: TestClient) -> None:
    huge = "x" * 10_000_000  # SGLang's tokenizer would spend many seconds on the event loop
    r = client.post(TEXT, json={"model": MODEL, "prompt": huge, "max_tokens": 4})
    assert r.status_code == 413 and "at least" in r.json()["error"]["message"]


def test_cors_answers_only_configured_origins_and_never_with_credentials(client: TestClient) -> None:
    def preflight(origin: str) -> Any:
        return client.options(
            CHAT, headers={"Origin": origin, "Access-Control-Request-Method": "POST"}
        ).headers

    evil = preflight("https://evil.example")
    assert "access-control-allow-origin" not in evil and "access-control-allow-credentials" not in evil
    ok = preflight("https://app.example")
    assert ok["access-control-allow-origin"] == "https://app.example"
    assert "access-control-allow-credentials" not in ok
