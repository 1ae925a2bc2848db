"""The app's HTTP routes and what its OpenAPI document says about them.

Served: the OpenAI chat and completions routes, the model list, and the app's own
`/specflip/status`, `/specflip/override` and `/metrics`; any other path is a 404 naming these
(`deployments.http.errors`).

Every route documents the statuses it answers, with the error body (`deployments.http.errors`);
FastAPI's automatic 422 is removed where the app answers 400 instead. The chat and completions
request bodies are the request models' own JSON schemas (`deployments.http.openai_models`, the one
validation): the document accepts what the app accepts; a field served in part says why, with
OpenAI's own schema of it as `x-openai`, and SGLang's extras are marked `x-sglang`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from deployments.http.control import OverrideRequest
from deployments.http.errors import ErrorResponse
from deployments.http.openai_models import ChatCompletionRequest, CompletionRequest, OpenAIRequest
from deployments.ray_compat import ChatCompletionResponse, CompletionResponse, ModelCard, ModelList

__all__ = ["ENDPOINTS", "REQUEST_BODIES", "Route", "install_openapi", "request_schema"]


def _errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    text = {
        400: "Invalid request: the message names the field",
        401: "Missing or wrong bearer token",
        403: "Control endpoints are disabled (no control token configured)",
        404: "Unknown model, replica or route",
        408: "The request timed out on the server",
        413: "Request body or prompt larger than the server or the model's context allows",
        422: "Invalid override body",
        429: "Too many failed authentications from this client; retry after the Retry-After seconds",
        500: "Server fault (short message with the request id)",
        503: "A replica or the policy actor is unavailable; retry",
    }
    return {code: {"model": ErrorResponse, "description": text[code]} for code in codes}


_SSE_EVENT = {
    "type": "object",
    "properties": {"data": {"type": "string"}, "event": {"type": "string"}, "id": {"type": "string"}},
    "required": ["data"],
}


def _generation(model: Any) -> dict[int | str, dict[str, Any]]:
    return {
        200: {
            "model": model,
            "description": "The completion (JSON), or with `stream: true` server-sent events",
            # OpenAPI 3.1: an event stream's schema describes each event (`data`: a JSON chunk or [DONE])
            "content": {"text/event-stream": {"schema": _SSE_EVENT}},
        },
        **_errors(400, 404, 408, 413, 500, 503),
    }


def _json_body(schema: dict[str, Any]) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": schema}}}


def _ok(description: str, media: str = "application/json", kind: str = "object") -> dict[int | str, Any]:
    return {200: {"description": description, "content": {media: {"schema": {"type": kind}}}}}


class Route:
    """One served route: its method and path, FastAPI's route keywords (what the OpenAPI document
    says of it), and for chat and completions the request model the body guard validates it into."""

    def __init__(self, method: str, path: str, body: type[OpenAIRequest] | None = None, **options: Any):
        self.method, self.path, self.body, self.options = method, path, body, options

    def register(self, app: Any) -> Callable[[Any], Any]:
        """FastAPI's decorator registering a handler for this route on `app`."""
        return cast(Callable[[Any], Any], getattr(app, self.method)(self.path, **self.options))


# every route the app serves, by the name of the ReplicaApi method handling it: the one list
# (the 404's text, the guard's routes and the metrics' endpoint labels are taken from it)
_OVERRIDE_ERRORS = _errors(401, 403, 404, 422, 429, 503)
ENDPOINTS = {
    "models": Route("get", "/v1/models", response_model=ModelList),
    "model_data": Route(
        "get", "/v1/models/{model:path}", response_model=ModelCard, responses=_errors(404, 500)
    ),
    "completions": Route(
        "post", "/v1/completions", CompletionRequest, responses=_generation(CompletionResponse)
    ),
    "chat": Route(
        "post", "/v1/chat/completions", ChatCompletionRequest, responses=_generation(ChatCompletionResponse)
    ),
    "specflip_status": Route("get", "/specflip/status", responses={**_ok("Fleet status"), **_errors(503)}),
    "specflip_override": Route(
        "post",
        "/specflip/override",
        responses={**_ok("The replicas overridden"), **_OVERRIDE_ERRORS},
        openapi_extra={"requestBody": _json_body(OverrideRequest.model_json_schema())},
    ),
    "prometheus_metrics": Route("get", "/metrics", responses=_ok("Prometheus text", "text/plain", "string")),
}

_ANSWERS_422 = {r.path for r in ENDPOINTS.values() if 422 in r.options.get("responses", {})}
# request bodies the body guard validates: their schema is the request model's (what the app serves)
REQUEST_BODIES = {r.path: r.body for r in ENDPOINTS.values() if r.body is not None}
_COMPONENTS = "#/components/schemas/"


def request_schema(model: type[OpenAIRequest]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A request model's JSON schema for the OpenAPI document, and the component schemas it refers to."""
    schema = model.model_json_schema(ref_template=_COMPONENTS + "{model}")
    return schema, schema.pop("$defs", {})


def install_openapi(app: Any) -> None:
    """Drop FastAPI's automatic 422 from routes that answer 400 for invalid bodies instead, and
    describe the chat and completions bodies as the app accepts them."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = build()
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            for path, operations in schema.get("paths", {}).items():
                for operation in operations.values():
                    if path not in _ANSWERS_422:
                        operation.get("responses", {}).pop("422", None)
                    if path in REQUEST_BODIES:  # the route takes the guard's validated model
                        model = REQUEST_BODIES[path]
                        name = "Specflip" + model.__name__  # not the name of Ray's model of it
                        components[name], parts = request_schema(model)
                        clash = sorted(k for k in parts if components.get(k, parts[k]) != parts[k])
                        if clash:  # a response model of Ray's with a request part's name
                            raise RuntimeError(f"OpenAPI component names taken twice: {clash}")
                        components.update(parts)
                        operation["requestBody"] = _json_body({"$ref": _COMPONENTS + name})
            _drop_unreferenced(schema)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi


def _drop_unreferenced(schema: dict[str, Any]) -> None:
    """Remove component schemas nothing refers to any more (the request models' own)."""
    components = schema.get("components", {}).get("schemas", {})
    seen: set[str] = set()
    stack: list[Any] = [schema.get("paths", {})]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            ref = item.get("$ref")
            name = ref[len(_COMPONENTS) :] if isinstance(ref, str) and ref.startswith(_COMPONENTS) else None
            if name is not None and name not in seen:
                seen.add(name)
                stack.append(components.get(name))
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    for name in [n for n in components if n not in seen]:
        del components[name]
