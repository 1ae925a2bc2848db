"""Inputs an outside tester sent to the real app (curl, the openai client, a fuzzer), each with the
answer the OpenAI API (or SGLang's documented extras) defines: it works, or a 4xx that names the
field and the reason, never a 500 or a traceback. Same inputs as the reliability report."""

from __future__ import annotations

import concurrent.futures
import json
import threading
import time
from typing import Any

import httpx
import pytest

from deployments.local import LocalApp, wait_until
from tests.deployments.conftest import MODEL, TOKEN
from tests.reporting import report

pytestmark = pytest.mark.serve
CHAT, TEXT = "/v1/chat/completions", "/v1/completions"
USER = [{"role": "user", "content": "def add(a, b):"}]
LEAKS = ("Traceback", "ray::", "pid=", "actor_id", 'File "', "OOM")


def _raw(
    app: LocalApp, path: str, content: str | bytes, content_type: str = "application/json"
) -> httpx.Response:
    return app.client.post(path, content=content, headers={"Content-Type": content_type}, timeout=300)


def _post(app: LocalApp, path: str, body: dict[str, Any]) -> httpx.Response:
    return app.client.post(path, body, timeout=300)


def _error(r: httpx.Response, status: int) -> dict[str, Any]:
    assert r.status_code == status, f"{r.status_code} {r.text[:300]}"
    error = r.json()["error"]
    assert error["code"] == status and isinstance(error["message"], str) and error["message"]
    assert not any(leak in r.text for leak in LEAKS), r.text[:300]
    return dict(error)


def _text(r: httpx.Response) -> str:
    assert r.status_code == 200, r.text[:300]
    choice = r.json()["choices"][0]
    return str(choice["text"] if "text" in choice else choice["message"]["content"])


# -- the table: each row's request and the answer expected --------------------------------------
def test_json_sent_as_text_plain_or_without_a_content_type_is_served(app: LocalApp) -> None:
    body = json.dumps({"model": MODEL, "messages": USER, "max_tokens": 4, "temperature": 0})
    for content_type in ("text/plain", "application/x-www-form-urlencoded"):
        r = _raw(app, CHAT, body, content_type)
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 4


@pytest.mark.parametrize(
    ("path", "raw", "param"),
    [
        (TEXT, '{"model": "specflip-tiny", "prompt": "a\\ud800b"}', "prompt"),
        (
            CHAT,
            '{"model": "specflip-tiny", "messages": [{"role": "user", "content": "\\udc00"}]}',
            "messages[0].content",
        ),
        (TEXT, '{"model": "spec\\ud800", "prompt": "ab"}', "model"),
        (
            CHAT,
            '{"model": "specflip-tiny", "messages": [{"role": "user", "content": "x"}], "user": "\\ud800"}',
            "user",
        ),
    ],
)
def test_a_lone_surrogate_anywhere_is_a_400_naming_the_field(
    app: LocalApp, path: str, raw: str, param: str
) -> None:
    error = _error(_raw(app, path, raw), 400)
    assert error["param"] == param and "surrogate" in error["message"]


@pytest.mark.parametrize(
    "raw",
    [
        '{"model": "specflip-tiny", "prompt": "ab", "temperature": NaN}',
        '{"model": "specflip-tiny", "messages": NaN}',
        '{"model": "specflip-tiny", "prompt": "ab", "stop": Infinity}',
        '{"model": "specflip-tiny", "prompt": "ab", "max_tokens": -Infinity}',
    ],
)
def test_nan_and_infinity_are_a_400_whose_body_serializes(app: LocalApp, raw: str) -> None:
    path = CHAT if "messages" in raw else TEXT
    assert "not valid JSON" in _error(_raw(app, path, raw), 400)["message"]


def test_min_tokens_is_applied_and_min_tokens_above_max_tokens_is_a_400(app: LocalApp) -> None:
    # the token greedy decoding writes first, made a stop token: the answer ends at once ...
    stream = app.client.post(
        TEXT, {"model": MODEL, "prompt": "def add(a, b):", "max_tokens": 1, "temperature": 0, "stream": True}
    ).text
    first = "".join(
        json.loads(line[6:])["choices"][0]["text"]
        for line in stream.splitlines()
        if line.startswith("data: {") and '"choices": [{' in line
    )
    from transformers import AutoTokenizer

    from tests.conftest import MODELS_DIR

    tok = AutoTokenizer.from_pretrained(f"{MODELS_DIR}/target")
    stop_ids = [i for t, i in tok.get_vocab().items() if tok.convert_tokens_to_string([t]) == first]
    body = {
        "model": MODEL,
        "prompt": "def add(a, b):",
        "max_tokens": 8,
        "temperature": 0,
        "stop_token_ids": stop_ids,
    }
    plain = _post(app, TEXT, body).json()
    assert plain["usage"]["completion_tokens"] == 1 and plain["choices"][0]["finish_reason"] == "stop"
    # ... unless min_tokens holds it back
    held = _post(app, TEXT, {**body, "min_tokens": 6}).json()
    assert held["usage"]["completion_tokens"] >= 6
    error = _error(_post(app, TEXT, {**body, "max_tokens": 2, "min_tokens": 4}), 400)
    assert error["param"] == "min_tokens" and "max_tokens 2" in error["message"]


def test_token_id_prompts_are_served_like_the_text_they_encode(app: LocalApp) -> None:
    from transformers import AutoTokenizer

    from tests.conftest import MODELS_DIR

    tok = AutoTokenizer.from_pretrained(f"{MODELS_DIR}/target")
    texts = ["def add(a, b):", "class Stack:"]
    ids = [tok(t)["input_ids"] for t in texts]
    common = {"model": MODEL, "max_tokens": 12, "temperature": 0, "ignore_eos": True}
    by_text = _text(_post(app, TEXT, {**common, "prompt": texts[0]}))
    assert _text(_post(app, TEXT, {**common, "prompt": ids[0]})) == by_text
    both = _post(app, TEXT, {**common, "prompt": ids}).json()
    assert [c["index"] for c in both["choices"]] == [0, 1] and both["choices"][0]["text"] == by_text
    assert _error(_post(app, TEXT, {**common, "prompt": [1, 2, 10**6]}), 400)["param"] == "prompt"


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"response_format": 5}, "response_format"),
        ({"response_format": "json"}, "response_format"),
        ({"response_format": []}, "response_format"),
        # an object or a list where a tag belongs was a 500 ("unhashable type")
        ({"tool_choice": {"type": {}}}, "tool_choice.type"),
        ({"response_format": {"type": []}}, "response_format.type"),
        (
            {"messages": [{"role": "user", "content": [{"type": {}, "text": "x"}]}]},
            "messages[0].content[0].type",
        ),
        ({"tools": [{"type": [], "function": {"name": "f"}}]}, "tools[0].type"),
        ({"chat_template_kwargs": {"tokenize": True}}, "chat_template_kwargs.tokenize"),
        (
            {"chat_template_kwargs": {"add_generation_prompt": False}},
            "chat_template_kwargs.add_generation_prompt",
        ),
    ],
)
def test_wrongly_typed_fields_are_a_400_naming_them(app: LocalApp, extra: dict[str, Any], param: str) -> None:
    assert _error(_post(app, CHAT, {"model": MODEL, "messages": USER, **extra}), 400)["param"] == param


def test_openais_newer_cache_hints_are_served_and_moderation_is_a_400_naming_it(app: LocalApp) -> None:
    """OpenAI's spec of 2026-08-21: cache hints change no answer, so they are served;
    moderation would, and none runs here."""
    part = {"type": "text", "text": "def add(a, b):", "prompt_cache_breakpoint": {"mode": "explicit"}}
    hints = {
        "prompt_cache_key": None,
        "safety_identifier": None,
        "prompt_cache_retention": "in_memory",
        "prompt_cache_options": {"mode": "explicit", "ttl": "30m"},
    }
    plain = {"model": MODEL, "messages": USER, "max_tokens": 4, "temperature": 0}
    hinted = {**plain, "messages": [{"role": "user", "content": [part]}], **hints}
    assert _text(_post(app, CHAT, hinted)) == _text(_post(app, CHAT, plain))
    moderated = {**plain, "moderation": {"model": "omni-moderation-latest"}}
    error = _error(_post(app, CHAT, moderated), 400)
    assert error["param"] == "moderation" and "no moderation model" in error["message"]


@pytest.mark.parametrize(
    "path", ["/v1/embeddings", "/v1/audio/transcriptions", "/v1/score", "/tokenize", "/detokenize"]
)
def test_routes_the_app_does_not_serve_are_a_404_with_the_reason_and_not_in_the_schema(
    app: LocalApp, path: str
) -> None:
    error = _error(app.client.post(path, {"model": MODEL, "input": "hi"}), 404)
    assert "not served" in error["message"]
    assert path not in app.client.get("/openapi.json").json()["paths"]


def test_the_schema_lists_the_served_routes_and_the_statuses_they_answer(app: LocalApp) -> None:
    paths = app.client.get("/openapi.json").json()["paths"]
    assert set(paths) == {
        "/v1/models",
        "/v1/models/{model}",
        "/v1/chat/completions",
        "/v1/completions",
        "/specflip/status",
        "/specflip/override",
        "/metrics",
    }
    chat = paths["/v1/chat/completions"]["post"]["responses"]
    assert {"200", "400", "404", "413", "500", "503"} <= set(chat) and "422" not in chat
    assert "text/event-stream" in chat["200"]["content"]
    assert {"401", "403", "404", "422", "429"} <= set(paths["/specflip/override"]["post"]["responses"])


def test_the_openai_clients_default_tool_calling_is_a_400_naming_tool_choice(app: LocalApp) -> None:
    """The client sends tools with tool_choice left to "auto": free-text calls need a model-specific
    parser the app does not have, so it is refused by name (tool_choice "required" or a named
    function is served as tool_calls: test_serve_structured.py)."""
    import openai

    client = openai.OpenAI(base_url=app.client.url("/v1"), api_key="none", max_retries=0)
    tool = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model=MODEL, messages=USER, tools=[tool], max_tokens=4)  # type: ignore[arg-type, list-item]
    assert refused.value.status_code == 400 and "tool_choice 'auto'" in refused.value.message
    assert "Traceback" not in refused.value.message


# -- the other findings -------------------------------------------------------------------------
def test_seed_makes_sampling_reproducible_in_chat_and_completions(app: LocalApp) -> None:
    def sample(path: str, seed: int | None) -> str:
        body: dict[str, Any] = {"model": MODEL, "max_tokens": 12, "temperature": 1.0, "ignore_eos": True}
        body.update({"prompt": "def"} if path == TEXT else {"messages": [{"role": "user", "content": "def"}]})
        if seed is not None:
            body["seed"] = seed
        return _text(_post(app, path, body))

    # seed is reproducible on replicas running the same speculation mode (README, Limits): an
    # earlier test's load may have left a replica OFF for a moment
    wait_until(lambda: {r["mode"] for r in app.client.replicas()} == {"on"}, 60, why="replicas back ON")
    for path in (TEXT, CHAT):
        with concurrent.futures.ThreadPoolExecutor(3) as pool:  # concurrent: batched together
            same = list(pool.map(sample, [path] * 6, [7] * 6))
        assert len(set(same)) == 1, same
        others = {sample(path, s) for s in (1, 2, 3, 4)}
        assert len(others | set(same)) >= 3, others  # other seeds, other samples
        assert len({sample(path, None) for _ in range(4)}) >= 2  # no seed: random


def test_cors_answers_only_configured_origins_and_never_with_credentials(app: LocalApp) -> None:
    def preflight(origin: str) -> httpx.Headers:
        headers = {"Origin": origin, "Access-Control-Request-Method": "POST"}
        return app.client._http.options(app.client.url(CHAT), headers=headers).headers

    evil = preflight("https://evil.example")
    assert "access-control-allow-origin" not in evil and "access-control-allow-credentials" not in evil
    ok = preflight("https://app.example")
    assert ok["access-control-allow-origin"] == "https://app.example"
    assert "access-control-allow-credentials" not in ok


def test_bad_content_is_blamed_on_content_and_user_is_an_allowed_role(app: LocalApp) -> None:
    bad = _error(_post(app, CHAT, {"model": MODEL, "messages": [{"role": "user", "content": {"x": 1}}]}), 400)
    assert bad["param"] == "messages[0].content"
    role = _error(_post(app, CHAT, {"model": MODEL, "messages": [{"role": "wizard", "content": "x"}]}), 400)
    assert role["param"] == "messages[0].role" and "user" in role["message"]


def test_each_replica_reports_its_own_policy_source(app: LocalApp) -> None:
    """The replica's own view through a deployment handle (what the status cannot know of a replica
    that stopped reporting); the status shows fresh replicas as following the actor."""
    from ray import serve

    handle = serve.get_deployment_handle(f"SpecFlipServer:{MODEL}", app_name="specflip")
    ids = {r["replica_id"] for r in app.client.replicas() if not r["stale"]}
    seen = {}
    for _ in range(20):  # requests land on either replica
        view = handle.describe.remote().result(timeout_s=60)
        seen[view["replica_id"]] = view["policy_source"]
    assert set(seen) <= ids and set(seen.values()) == {"actor"}, seen
    assert {r["policy_source"] for r in app.client.replicas() if not r["stale"]} == {"actor"}


def test_a_missing_model_is_a_400_saying_which_model_is_served(app: LocalApp) -> None:
    """OpenAI answers a request without `model` with a 400 (the app used to serve it)."""
    for path, body in ((CHAT, {"messages": USER}), (TEXT, {"prompt": "def"})):
        error = _error(_post(app, path, {**body, "max_tokens": 4}), 400)
        assert error["param"] == "model" and repr(MODEL) in error["message"]


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        (TEXT, {"prompt": "def foo(" * 300, "max_tokens": 900}, "prompt"),
        (CHAT, {"messages": [{"role": "user", "content": "def foo(" * 300}], "max_tokens": 900}, "messages"),
    ],
)
def test_the_context_error_counts_the_prompt_as_sent_and_names_the_field(
    app: LocalApp, path: str, body: dict[str, Any], field: str
) -> None:
    """SGLang's message counted the 4 tokens speculative decoding reserves as input and said
    "input messages" on /v1/completions (the reliability report)."""
    tokens = 300 * 4 if path == TEXT else None  # "def foo(" is 4 tokens of the tiny tokenizer (no BOS added)
    error = _error(_post(app, path, {"model": MODEL, **body}), 400)
    message = error["message"]
    assert message.startswith(f"{field} is ") and "input messages" not in message, message
    assert "+ 900 + 4 reserved by speculative decoding" in message and "context of 2048" in message, message
    assert error["param"] == field, error
    if tokens is not None:
        assert message.startswith(f"prompt is {tokens} tokens"), message


def test_override_ids_are_bounded_and_not_echoed(app: LocalApp) -> None:
    assert app.client.send_override("on", "x" * 100_000).status_code == 422
    unknown = _error(app.client.send_override("on", "y" * 150), 404)
    assert len(unknown["message"]) <= 400


def test_a_flood_of_wrong_tokens_never_locks_the_operator_out(app: LocalApp) -> None:
    """Issue 20, item 3: wrong-token overrides at full speed from one client (127.0.0.2) made the
    operator get 429 on 8 of 10 calls. Now the token is checked first: the operator's calls all
    pass, the right token passes even from the flooding client, and only that client's failures
    are limited (401, then 429 with Retry-After); another client's wrong token is still a 401."""
    path, body = "/specflip/override", {"replica_id": "*", "mode": "auto"}
    right, wrong = {"Authorization": f"Bearer {TOKEN}"}, {"Authorization": "Bearer wrong"}

    def client(address: str) -> httpx.Client:
        transport = httpx.HTTPTransport(local_address=address)
        return httpx.Client(base_url=app.base, transport=transport, timeout=60)

    flood: list[int] = []
    stop = threading.Event()
    with client("127.0.0.2") as attacker, client("127.0.0.1") as operator, client("127.0.0.3") as other:

        def flooding() -> None:
            while not stop.is_set():
                flood.append(attacker.post(path, json=body, headers=wrong).status_code)

        threads = [threading.Thread(target=flooding) for _ in range(2)]
        started = time.monotonic()
        for t in threads:
            t.start()
        try:
            wait_until(lambda: 429 in flood, 30, every_s=0.05, why="the flooding client limited")
            operator_codes = [operator.post(path, json=body, headers=right).status_code for _ in range(10)]
            from_the_flooder = attacker.post(path, json=body, headers=right).status_code
            limited = attacker.post(path, json=body, headers=wrong)
            elsewhere = other.post(path, json=body, headers=wrong).status_code
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=60)
        seconds = time.monotonic() - started
    report(
        f"control lock-out: {len(flood)} wrong-token overrides from one client in {seconds:.1f} s "
        f"({flood.count(401)} answered 401, {flood.count(429)} 429); operator {operator_codes.count(200)}/10 ok"
    )
    assert operator_codes == [200] * 10
    assert from_the_flooder == 200  # auth first: the right token passes whatever the client did before
    assert limited.status_code == 429 and int(limited.headers["Retry-After"]) >= 1
    # the limit is per source address as a replica sees it: behind Serve's HAProxy (which adds no
    # X-Forwarded-For) every client comes from HAProxy's, so another client's wrong token shares the
    # flooder's budget; it is refused either way, and the right token was never limited (above)
    assert elsewhere in (401, 429)
    replicas = len(app.client.replicas())  # each replica keeps its own budget: a burst of 10, then 1/s
    assert set(flood) == {401, 429} and flood.count(401) <= replicas * (10 + seconds + 1)


def test_an_oversized_prompt_is_refused_by_size_and_the_replicas_stay_up(app: LocalApp) -> None:
    before = {r["replica_id"] for r in app.client.replicas()}
    huge = "x" * 10_000_000  # under the 16 MiB body limit, ~200k tokens at least
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        refused = [
            pool.submit(_post, app, TEXT, {"model": MODEL, "prompt": huge, "max_tokens": 4}) for _ in range(2)
        ]
        chat = pool.submit(
            _post, app, CHAT, {"model": MODEL, "messages": [{"role": "user", "content": huge}]}
        )
        good = [
            pool.submit(_post, app, TEXT, {"model": MODEL, "prompt": "class Stack:", "max_tokens": 8})
            for _ in range(4)
        ]
        for f in refused:
            assert "at least" in _error(f.result(), 413)["message"]
        assert _error(chat.result(), 413)["param"] == "messages"
        assert all(f.result().status_code == 200 for f in good)
    after = app.client.replicas()
    assert {r["replica_id"] for r in after} == before and not any(r["stale"] for r in after)


def test_a_replica_sent_an_oversized_prompt_directly_refuses_it_and_keeps_serving(app: LocalApp) -> None:
    """Past the HTTP app (a deployment handle straight to the replicas' `generate`): the replica's
    own size bound refuses it before any tokenization, and the replica keeps answering meanwhile."""
    from ray import serve

    from deployments.http.openai_models import CompletionRequest
    from deployments.http.request_report import Tally
    from deployments.replica.prompts import PromptTooLarge
    from policy.routing import RequestClass

    handle = serve.get_deployment_handle(f"SpecFlipServer:{MODEL}", app_name="specflip").options(stream=True)
    before = {r["replica_id"] for r in app.client.replicas()}
    request = CompletionRequest(model=MODEL, prompt="y" * 20_000_000, max_tokens=4)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        good = pool.submit(_post, app, TEXT, {"model": MODEL, "prompt": "return self.", "max_tokens": 8})
        with pytest.raises(PromptTooLarge, match="more than the context"):
            list(
                handle.generate.remote(
                    "completions", request, request_class=RequestClass.BATCH, tally=Tally("on", 0), rids=[]
                )
            )
        assert good.result().status_code == 200
    after = app.client.replicas()
    assert {r["replica_id"] for r in after} == before and not any(r["stale"] for r in after)
