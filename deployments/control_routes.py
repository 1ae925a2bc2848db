"""specflip's own HTTP routes: `GET /specflip/status`, `POST /specflip/override`, `GET /metrics`.

Served by the ingress (`serve.data_path: ingress`) or, with the direct data path, by every
replica next to SGLang's own OpenAI routes. Each asks the named policy actor (created here if it
does not exist yet), with a timeout; the token check and the documents are in deployments.control.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from fastapi import Request
from pydantic import ValidationError
from starlette.responses import JSONResponse, Response

from deployments.config import SpecFlipConfig
from deployments.control import OVERRIDES, OverrideRequest, check_bearer, status_document
from deployments.metrics import CONTENT_TYPE, IngressMetrics
from policy.types import UnknownReplicaError

__all__ = ["ControlRoutes", "error_response"]

log = logging.getLogger(__name__)

_ACTOR_TIMEOUT_S = 5.0


def error_response(
    status_code: int, message: str, type_: str = "BadRequestError", headers: dict[str, str] | None = None
) -> JSONResponse:
    """An OpenAI-style error body: {"error": {"message", "type", "param", "code"}}."""
    body = {"error": {"message": message, "type": type_, "param": None, "code": status_code}}
    return JSONResponse(body, status_code=status_code, headers=headers)


class ControlRoutes:
    """The handlers; `metrics` (the ingress's registry) is None where there is none (a replica)."""

    def __init__(self, config: SpecFlipConfig, metrics: IngressMetrics | None = None) -> None:
        self.config = config
        self.metrics = metrics
        self.token = config.serve.resolved_token()
        self._policy: Any = None
        self._policy_actor()

    def add_to(self, app: Any) -> None:
        """Add the three routes to a FastAPI app (the direct data path's replica app)."""
        app.add_api_route("/specflip/status", self.status, methods=["GET"])
        app.add_api_route("/specflip/override", self.override, methods=["POST"])
        app.add_api_route("/metrics", self.metrics_text, methods=["GET"])

    def _reachable(self, value: int) -> None:
        if self.metrics is not None:
            self.metrics.policy_reachable.set(value)

    def _policy_actor(self) -> Any:
        if self._policy is None:
            from policy.actor import get_or_create_policy_actor

            self._policy = get_or_create_policy_actor(
                self.config.policy.actor_name, self.config.policy_config()
            )
        return self._policy

    async def _ask_policy(self, method: str, *args: Any) -> Any:
        try:
            result = await asyncio.wait_for(
                getattr(self._policy_actor(), method).remote(*args), _ACTOR_TIMEOUT_S
            )
        except UnknownReplicaError:
            self._reachable(1)
            raise
        except Exception:
            self._reachable(0)
            self._policy = None  # look the actor up (or recreate it) next time
            raise
        self._reachable(1)
        return result

    async def status(self) -> Response:
        try:
            fleet = await self._ask_policy("status")
        except Exception as err:
            return error_response(
                503, f"policy actor unreachable: {type(err).__name__}", "ServiceUnavailable"
            )
        document = status_document(
            fleet,
            enabled=self.config.policy.enabled,
            actor_name=self.config.policy.actor_name,
            expected_replicas=self.config.replicas.count,
        )
        if self.metrics is not None:  # the ingress: its handle's router routed these
            from deployments.routing_journal import JOURNAL

            document["routing"] = {"class_routing": self.config.class_routing, **JOURNAL.snapshot()}
        return JSONResponse(document)

    async def override(self, request: Request) -> Response:
        problem = check_bearer(request.headers.get("authorization"), self.token)
        if problem is not None:
            headers = {"WWW-Authenticate": "Bearer"} if problem.status_code == 401 else None
            return error_response(problem.status_code, problem.message, "AuthenticationError", headers)
        try:
            order = OverrideRequest.model_validate_json(await request.body())
        except ValidationError as err:
            first = err.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "body"
            return error_response(422, f"invalid override body: {where}: {first['msg']}")
        try:
            if order.replica_id == "*":
                fleet = await self._ask_policy("status")
                targets = [r.replica_id for r in fleet.replicas]
                if not targets:
                    return error_response(404, "no replicas registered with the policy yet", "NotFoundError")
            else:
                targets = [order.replica_id]
            for rid in targets:
                await self._ask_policy("set_override", rid, OVERRIDES[order.mode])
        except UnknownReplicaError as err:
            cause = getattr(err, "cause", None) or err  # Ray wraps the actor's exception
            return error_response(404, str(cause).splitlines()[0], "NotFoundError")
        except Exception as err:
            return error_response(
                503, f"policy actor unreachable: {type(err).__name__}", "ServiceUnavailable"
            )
        log.info("override %s -> %s", targets, order.mode)
        return JSONResponse({"replica_ids": targets, "mode": order.mode})

    async def metrics_text(self) -> Response:
        try:
            policy_text = await self._ask_policy("metrics_text")
        except Exception:
            policy_text = ""
        return Response(
            (self.metrics.text() if self.metrics is not None else "") + policy_text, media_type=CONTENT_TYPE
        )
