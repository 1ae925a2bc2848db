"""The guard's check of a parsed body as the tests compare it: the normalized dict the request
model gives (what the engine takes), or the Problem it was refused with."""

from __future__ import annotations

from typing import Any

from deployments.http.body import Endpoint, Problem, check_request
from deployments.http.limits import ModelLimits


def check_body(
    endpoint: Endpoint, body: dict[str, Any], limits: ModelLimits, *, model_id: str | None = None
) -> dict[str, Any] | Problem:
    checked = check_request(endpoint, body, limits, model_id=model_id)
    return checked if isinstance(checked, Problem) else checked.normalized()
