"""The error shape of every answer (deployments.http.errors), without an app."""

from __future__ import annotations

import asyncio
import json

import pytest

from deployments.http.errors import _field_path, _uncaught, client_gone, fault_status, safe_stream


@pytest.mark.parametrize(
    ("loc", "path"),
    [
        (("body", "messages", 0, "content"), "messages[0].content"),
        (
            ("body", "messages", 0, "function-after[validate(), ChatCompletionMessageGenericParam]", "role"),
            "messages[0].role",
        ),
        (("body", "response_format", "ResponseFormat", "type"), "response_format.type"),
        (("body",), "body"),
    ],
)
def test_validation_errors_name_the_field_not_the_union_member(loc: tuple, path: str) -> None:
    assert _field_path(loc) == path


def test_a_replica_that_died_is_a_503_to_retry_and_anything_else_a_plain_500() -> None:
    from ray.exceptions import ActorDiedError

    assert fault_status(ActorDiedError())[0] == 503
    status, message = fault_status(RuntimeError("/usr/lib/python3/secret.py line 3: boom"))
    assert status == 500 and "secret" not in message


def test_a_stream_failing_midway_ends_with_an_error_event_and_done() -> None:
    async def failing():
        yield 'data: {"choices": [{"text": "a"}]}\n\n'
        raise RuntimeError("engine gone")

    async def collect(body) -> list[str]:
        return [p async for p in safe_stream(body, "req-1")]

    packets = asyncio.run(collect(failing()))
    assert packets[-1] == "data: [DONE]\n\n"
    error = json.loads(packets[-2][6:])["error"]
    assert error["code"] == 500 and "req-1" in error["message"] and "engine gone" not in error["message"]

    async def fine():
        yield "data: {}\n\n"
        yield "data: [DONE]\n\n"

    assert asyncio.run(collect(fine())).count("data: [DONE]\n\n") == 1


def test_ray_cancelling_a_request_whose_client_left_is_client_churn_not_a_server_error() -> None:
    """Ray Serve's `receive` raises TaskCancelledError once the client disconnected: a 499 with
    nothing logged as a failure (it was a 500 now and then when many streams closed at once)."""
    from ray.exceptions import ActorDiedError, TaskCancelledError
    from starlette.requests import ClientDisconnect, Request

    assert client_gone(TaskCancelledError()) and client_gone(ClientDisconnect()) and client_gone(OSError())
    assert not client_gone(ActorDiedError()) and not client_gone(RuntimeError("bug"))
    request = Request({"type": "http", "method": "POST", "path": "/v1/completions", "headers": []})
    assert asyncio.run(_uncaught(request, TaskCancelledError())).status_code == 499
    assert asyncio.run(_uncaught(request, RuntimeError("bug"))).status_code == 500
