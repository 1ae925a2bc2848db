"""specflip's own HTTP routes: `GET /specflip/status`, `POST /specflip/override`, `GET /metrics`.

Served by every replica, beside the OpenAI routes (deployments.replica.api). Each asks the named
policy actor (created here if it does not exist yet), with a timeout; the token check and the
documents are in deployments.http.control.

Whoever builds `ControlRoutes` first creates the actor, detached: it has no owner, so it outlives
any one replica (every replica builds `ControlRoutes`; a non-detached actor would die with whichever
replica happened to create it). Each `ControlRoutes` hands the actor this app's policy config (a
redeployed app finds the running actor of its name); `specflip serve` kills it when the app stops.
The handle is kept across timeouts and restarts (Ray restarts the actor in place, `max_restarts`),
and only an actor that is gone for good (killed without restart) is created anew. Restarts are
counted from Ray's GCS actor table. The bearer token is checked first, on every override: the right
token always passes. Wrong tokens are limited per client address (`FailedAuthLimiter`: 401 for the
first ones, then 429 with Retry-After), so a client guessing tokens slows only itself; the rate
limit cannot lock the operator out. Overrides never echo the request back.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from typing import Any

from fastapi import Request
from prometheus_client import CONTENT_TYPE_PLAIN_0_0_4
from pydantic import ValidationError
from starlette.responses import JSONResponse, Response

from deployments.config import POLICY_NAMESPACE, SpecFlipConfig
from deployments.http.control import (
    OVERRIDES,
    FailedAuthLimiter,
    OverrideRequest,
    check_bearer,
    status_document,
)
from deployments.http.errors import error_response
from deployments.http.metrics import HttpMetrics
from deployments.ray_compat import actor_restarts
from policy.types import UnknownReplicaError

__all__ = ["ControlRoutes", "error_response"]

log = logging.getLogger(__name__)

_ACTOR_TIMEOUT_S = 5.0
# failed authentications per client: a burst of typos, then one a second
FAILED_AUTH_RATE, FAILED_AUTH_BURST = 1.0, 10
# a token this short can be guessed: the failure limit does not stop guessing (the right token always passes)
_SHORT_TOKEN = 16


class ControlRoutes:
    """The handlers. `metrics`: this process's HTTP-edge metrics (None: none), where the policy
    actor's reachability and restarts are recorded (exported by Ray's metrics agent, never sent
    to the actor). `replica_id`: set in a replica (each serves the API itself): its
    `/specflip/status` carries the fleet's routing totals."""

    def __init__(
        self, config: SpecFlipConfig, metrics: HttpMetrics | None = None, *, replica_id: str | None = None
    ) -> None:
        self.config = config
        self.metrics = metrics
        self.replica_id = replica_id
        self.token = config.serve.resolved_token()
        self._failed_auth = FailedAuthLimiter(FAILED_AUTH_RATE, FAILED_AUTH_BURST)
        if self.token and len(self.token) < _SHORT_TOKEN:
            log.warning(
                "the control token has %d characters: use a long random one (at least %d); the limit on "
                "failed attempts answers floods, it does not stop guessing",
                len(self.token),
                _SHORT_TOKEN,
            )
        self._policy: Any = None
        self._policy_actor()

    def _reachable(self, value: int) -> None:
        if self.metrics is not None:
            self.metrics.policy_reachable.set(value)

    def _policy_actor(self) -> Any:
        """The policy actor's handle, kept for this process's lifetime (see the module docstring)."""
        if self._policy is None:
            from policy.actor import get_or_create_policy_actor

            config = self.config.policy_config()
            self._policy = get_or_create_policy_actor(
                self.config.policy.actor_name, config, namespace=POLICY_NAMESPACE, detached=True
            )
            self._policy.configure.remote(config)  # an actor left by an earlier deploy takes this config
        return self._policy

    def _policy_gone(self) -> bool:
        """True if no actor of the policy's name exists any more (killed for good, not restarting)."""
        import ray

        try:
            ray.get_actor(self.config.policy.actor_name, namespace=POLICY_NAMESPACE)
        except ValueError:
            return True
        return False

    async def _ask_policy(self, method: str, *args: Any) -> Any:
        handle = self._policy_actor()
        try:
            result = await asyncio.wait_for(getattr(handle, method).remote(*args), _ACTOR_TIMEOUT_S)
        except UnknownReplicaError:
            self._reachable(1)
            raise
        except Exception:
            self._reachable(0)
            # a timeout or a restart keeps the handle (and so the actor); only an actor that is
            # gone for good (killed without restart) is created anew on the next call
            if await asyncio.to_thread(self._policy_gone):
                log.warning("policy actor %s is gone: creating a new one", self.config.policy.actor_name)
                self._policy = None
            raise
        self._reachable(1)
        return result

    async def policy_restarts(self) -> int | None:
        """Times Ray restarted the policy actor (None if unknown); also set as a metric."""
        restarts = await asyncio.to_thread(actor_restarts, self._policy_actor())
        if restarts is not None and self.metrics is not None:
            self.metrics.policy_restarts.set(restarts)
        return restarts

    async def status(self) -> Response:
        """The fleet's status from the policy actor: two round trips (the actor, once: the fleet
        and the routing totals; the GCS's actor table for the actor's restarts)."""
        try:
            fleet, sums = await self._ask_policy("status_view", self.replica_id is not None)
        except Exception as err:
            return _unreachable(err)
        document = status_document(
            fleet,
            enabled=self.config.policy.enabled,
            actor_name=self.config.policy.actor_name,
            expected_replicas=self.config.replicas.count,
        )
        document["policy"]["restarts"] = await self.policy_restarts()
        if self.replica_id is not None:  # the request router's counts, as it pushed them last
            document["routing"] = {"class_routing": self.config.class_routing, **_fleet_routing(*sums)}
        return JSONResponse(document)

    async def override(self, request: Request) -> Response:
        problem = check_bearer(request.headers.get("authorization"), self.token)
        if problem is not None:
            if problem.status_code == 401:
                client = request.client.host if request.client is not None else "unknown"
                wait_s = self._failed_auth.failed(client, time.monotonic())
                if wait_s > 0:
                    retry = str(max(1, math.ceil(wait_s)))
                    return error_response(
                        429,
                        f"too many failed control authentications from {client[:100]}: retry in {retry} s",
                        headers={"Retry-After": retry},
                    )
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
            return error_response(404, str(cause).splitlines()[0][:400], "NotFoundError")
        except Exception as err:
            return _unreachable(err)
        log.info("override %s -> %s", targets, order.mode)
        return JSONResponse({"replica_ids": targets, "mode": order.mode})

    async def metrics_text(self) -> Response:
        """The policy actor's own families (modes, decisions, flips, overrides, engine state, the
        request router's counts). The replicas' HTTP-edge families are not here: Ray's metrics agent
        exports them on every node (docs/metrics.md). Two round trips: the GCS (the actor's
        restarts), the actor; empty if the actor does not answer."""
        try:
            await self.policy_restarts()
            text = await self._ask_policy("metrics_text")
        except Exception:
            text = ""
        return Response(text, media_type=CONTENT_TYPE_PLAIN_0_0_4)


def _unreachable(err: Exception) -> Response:
    return error_response(503, f"policy actor unreachable: {type(err).__name__}", "ServiceUnavailable")


def _fleet_routing(
    routed: dict[tuple[str, ...], float],
    reasons: dict[tuple[str, ...], float],
    prefix: dict[tuple[str, ...], float],
) -> dict[str, Any]:
    """The request router's counts as it pushed them last: requests by class and the mode of the
    replica it chose, its decisions by reason, its prefix-affinity hits. (What each replica
    served, by class and its mode on arrival, is Ray's export `ray_specflip_served_requests_total`.)"""
    by_class: dict[str, dict[str, int]] = {}
    for (cls, mode), n in sorted(routed.items()):
        by_class.setdefault(cls, {})[mode] = int(n)
    return {
        "by_class_and_mode": by_class,
        "by_reason": {reason: int(n) for (reason,), n in sorted(reasons.items())},
        "prefix_affinity": {"hits": int(prefix.get(("hit",), 0)), "misses": int(prefix.get(("miss",), 0))},
    }
