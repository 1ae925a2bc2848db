"""Every error the replica's API answers, in one OpenAI-style shape: `{"error": {"message", "type",
"param", "code"}}` with `code` the HTTP status.

- Client errors (4xx) say what was wrong and name the field (`param`) where there is one; they
  never echo the input back (it may be megabytes, or not serializable).
- Server faults (5xx) say what happened in one line with the request id; the traceback goes to
  the replica's log only. A replica that died or restarted under a request is a 503 (retry), not
  a 500.
- A stream that fails after its first chunk ends with an error event and `data: [DONE]`, so a
  client is never left with a cut stream.

The FastAPI handlers here replace Ray's (which answer a 500 with the exception text and its
traceback, and echo the input in 400s).
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse

__all__ = [
    "ErrorDetail",
    "ErrorResponse",
    "error_response",
    "fault_response",
    "install_handlers",
    "request_id_of",
    "safe_stream",
]

log = logging.getLogger(__name__)

_TYPES = {
    400: "BadRequestError",
    401: "AuthenticationError",
    403: "PermissionDeniedError",
    404: "NotFoundError",
    405: "MethodNotAllowed",
    408: "RequestTimeout",
    413: "RequestTooLarge",
    415: "UnsupportedMediaType",
    422: "UnprocessableEntityError",
    429: "RateLimitError",
    500: "InternalServerError",
    503: "ServiceUnavailable",
}


class ErrorDetail(BaseModel):
    message: str = Field(description="What was wrong, in one line.")
    type: str = Field(description="Error class, e.g. BadRequestError.")
    param: str | None = Field(default=None, description="The request field at fault, if one is.")
    code: int = Field(description="The HTTP status code.")


class ErrorResponse(BaseModel):
    """The body of every error response."""

    error: ErrorDetail


def error_response(
    status: int,
    message: str,
    type_: str | None = None,
    headers: dict[str, str] | None = None,
    param: str | None = None,
) -> JSONResponse:
    return JSONResponse(_error_body(status, message, type_, param), status_code=status, headers=headers)


def _error_body(
    status: int, message: str, type_: str | None = None, param: str | None = None
) -> dict[str, Any]:
    type_ = type_ or _TYPES.get(status, "Error")
    return {"error": {"message": message, "type": type_, "param": param, "code": status}}


def request_id_of(request: Request | None) -> str:
    if request is None:
        return "unknown"
    return request.headers.get("x-request-id") or uuid.uuid4().hex  # made only for an error


def _replica_gone(err: BaseException) -> bool:
    """The replica (or the actor behind a call) died or is restarting: worth a retry."""
    from ray.exceptions import ActorUnavailableError, RayActorError
    from ray.serve.exceptions import BackPressureError

    return isinstance(err, RayActorError | ActorUnavailableError | BackPressureError)


def client_gone(err: BaseException) -> bool:
    """An error that says the client went away mid-request (not a fault of the server): Starlette's
    disconnect, a socket error, or Ray's cancellation of the request's task, which Ray Serve's
    `receive` raises once the client disconnected."""
    from ray.exceptions import TaskCancelledError
    from starlette.requests import ClientDisconnect

    return isinstance(err, ClientDisconnect | OSError | TaskCancelledError)


def fault_status(err: BaseException) -> tuple[int, str]:
    """(status, one-line message) of a server-side failure."""
    if _replica_gone(err):
        return 503, "the replica serving this request stopped or is overloaded; retry the request"
    return 500, "internal server error"


def fault_response(err: BaseException, request_id: str) -> JSONResponse:
    """A 5xx with a short message and the request id; the traceback goes to the log."""
    status, message = fault_status(err)
    log.error("request %s failed (%d)", request_id, status, exc_info=err)
    return error_response(status, f"{message} (request id {request_id})")


def _field_path(loc: Any) -> str:
    """`('body', 'messages', 0, 'content')` -> `messages[0].content` (pydantic's union tags dropped)."""
    out = ""
    for part in loc if isinstance(loc, list | tuple) else ():
        if part == "body" and not out:
            continue
        if isinstance(part, int):
            out += f"[{part}]"
        elif isinstance(part, str) and ("[" in part or "(" in part or part[:1].isupper()):
            continue  # a union member's or validator's name, not a field
        else:
            out += f".{part}" if out else str(part)
    return out or "body"


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    errors = exc.errors() if isinstance(exc, RequestValidationError) else []
    first = errors[0] if errors else {"loc": ("body",), "msg": "invalid request"}
    where = _field_path(first.get("loc"))
    message = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
    return error_response(400, f"{where}: {message}"[:500], param=where)


def _served() -> str:
    """What a 404 says the app serves: the routes of `deployments.http.routes.ENDPOINTS`."""
    from deployments.http.routes import ENDPOINTS  # a cycle at import: routes documents these errors

    paths = ", ".join(route.path.replace(":path", "") for route in ENDPOINTS.values())
    return f"this app serves {paths} (a generative model: no embeddings, audio, scoring or tokenizing)"


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    status = getattr(exc, "status_code", 500)
    detail = getattr(exc, "detail", None)
    if status == 404 and detail in (None, "Not Found"):
        detail = f"{request.method} {request.url.path[:100]} is not served here: {_served()}"
    elif status == 405:
        detail = f"method {request.method} is not allowed on {request.url.path}"
    headers = getattr(exc, "headers", None)
    return error_response(status, str(detail or "error")[:500], headers=headers)


async def _uncaught(request: Request, exc: Exception) -> JSONResponse:
    if client_gone(exc):  # nobody to answer: no error logged (the request counter says 499)
        return error_response(499, "client closed request")
    return fault_response(exc, request_id_of(request))


def install_handlers(app: Any) -> None:
    """Replace the FastAPI app's validation, HTTP-error and last-resort handlers with these."""
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _uncaught)


def _error_event(err: BaseException, request_id: str) -> str:
    status, message = fault_status(err)
    log.error("stream %s failed after its first chunk (%d)", request_id, status, exc_info=err)
    return f"data: {json.dumps(_error_body(status, f'{message} (request id {request_id})'))}\n\n"


async def safe_stream(body: AsyncIterator[str], request_id: str) -> AsyncIterator[str]:
    """An SSE body that always ends with `data: [DONE]`: on a failure mid-stream, an error event first."""
    done = False
    try:
        async for packet in body:
            done = done or packet.rstrip().endswith("data: [DONE]")
            yield packet
    except Exception as err:
        yield _error_event(err, request_id)
        done = False
    if not done:
        yield "data: [DONE]\n\n"
