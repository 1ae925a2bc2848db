"""The chat and completions routes take the body the guard parsed and checked: one JSON parse per
request, no second serialization, and the request model's own refusals still answer 400 naming the
field (deployments.http.guard.with_checked_body); a route without the guard is a fault."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.testclient import TestClient
from starlette.responses import JSONResponse, Response

from deployments.http.errors import install_handlers
from deployments.http.guard import JsonBodyGuard, checked_request, with_checked_body
from deployments.http.openai_models import ChatCompletionRequest, CompletionRequest


class ReceiveSpy:
    """ASGI middleware between the guard and the routes: counts reads of the raw body."""

    def __init__(self, app: Any, reads: list[str]) -> None:
        self.app, self.reads = app, reads

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":  # lifespan messages are not bodies
            await self.app(scope, receive, send)
            return

        async def counted() -> Any:
            self.reads.append(scope["path"])
            return await receive()

        await self.app(scope, counted, send)


def _app(seen: list[Any], reads: list[str] | None = None) -> FastAPI:
    async def completions(body: CompletionRequest, request: Request) -> Response:
        seen.append((body, checked_request(request)))
        return JSONResponse({"prompt": body.prompt, "max_tokens": body.max_tokens})

    async def chat(body: ChatCompletionRequest, request: Request) -> Response:
        seen.append((body, checked_request(request)))
        return JSONResponse({"messages": len(body.messages)})

    app = FastAPI()
    install_handlers(app)
    if reads is not None:
        app.add_middleware(ReceiveSpy, reads=reads)  # added first: inside the guard
    app.add_middleware(JsonBodyGuard, config=None)
    app.post("/v1/completions")(with_checked_body(completions, CompletionRequest))
    app.post("/v1/chat/completions")(with_checked_body(chat, ChatCompletionRequest))
    return app


def test_the_route_validates_the_guards_dict_and_never_reads_the_body_again() -> None:
    seen: list[Any] = []
    reads: list[str] = []
    with TestClient(_app(seen, reads)) as client:
        r = client.post(
            "/v1/completions", content=b'{"model": "m", "prompt": "hi", "max_tokens": 3.0}',
            headers={"content-type": "text/plain"},
        )  # fmt: skip
        assert r.status_code == 200, r.text
        assert r.json() == {"prompt": "hi", "max_tokens": 3}  # normalized by the guard: 3.0 -> 3
        chat = client.post(
            "/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "x"}]}
        )
        assert chat.status_code == 200 and chat.json() == {"messages": 1}
    assert [type(body).__name__ for body, _ in seen] == ["CompletionRequest", "ChatCompletionRequest"]
    assert all(body is checked for body, checked in seen)  # the guard's models, not copies
    assert reads == []  # nothing behind the guard read the body: no second serialization or parse


def test_a_route_without_the_guard_is_a_fault_not_an_unchecked_body() -> None:
    app = FastAPI()
    app.post("/v1/completions")(with_checked_body(_echo, CompletionRequest))
    with TestClient(app, raise_server_exceptions=False) as client:
        r = client.post("/v1/completions", json={"model": "m", "prompt": "hi"})
    assert r.status_code == 500


async def _echo(body: CompletionRequest, request: Request) -> Response:
    return JSONResponse({})


def test_the_request_models_refusal_is_a_400_naming_the_field() -> None:
    with TestClient(_app([])) as client:
        r = client.post("/v1/chat/completions", json={"model": "m", "messages": "not a list"})
    assert r.status_code == 400, r.text
    assert "messages" in r.json()["error"]["message"]


def test_the_handler_gets_the_very_model_the_guard_validated() -> None:
    """One validation per request: the route hands on the guard's model, it does not build another
    from a dict (as it did into Ray's request models)."""
    seen: list[tuple[Any, Any]] = []

    async def chat(body: ChatCompletionRequest, request: Request) -> Response:
        seen.append((body, checked_request(request)))
        return JSONResponse({})

    app = FastAPI()
    install_handlers(app)
    app.add_middleware(JsonBodyGuard, config=None)
    app.post("/v1/chat/completions")(with_checked_body(chat, ChatCompletionRequest))
    with TestClient(app) as client:
        r = client.post(
            "/v1/chat/completions", json={"model": "m", "messages": [{"role": "User", "content": "x"}]}
        )
    assert r.status_code == 200, r.text
    ((body, checked),) = seen
    assert body is checked and body.messages[0].role == "user"
