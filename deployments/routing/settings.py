"""The `routing:` section of a specflip config: class-aware routing settings and what the request
router (deployments.routing.router) and the ranking (policy.routing) are built from. The ranking's own
settings are declared once, on policy.routing.RoutingConfig; RoutingSettings adds them."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

from deployments.settings_fields import setting_fields, setting_names
from policy.routing import ClassRule, RequestClass, RoutingConfig

__all__ = ["ROUTING_SETTINGS", "RoutingSettings"]

ROUTING_SETTINGS = setting_names(RoutingConfig)


class _RoutingAppSettings(BaseModel):
    """Class-aware routing (deployments.routing.router, policy.routing): interactive requests to
    speculation-ON replicas, batch requests to OFF replicas. The `routing:` section of the config
    (deployments.config). RoutingSettings adds every RoutingConfig field declared as a setting."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_enum_values=False)

    class_routing: bool = Field(
        default=False,
        description="Route by request class and replica mode (specflip's request router); false "
        "keeps Ray Serve's power-of-two router. Only with a draft (speculative replicas). Off by "
        "default until measured on a GPU (docs/routing.md).",
    )
    stats_period_s: float = Field(
        default=0.25,
        gt=0,
        le=10,
        description="Seconds between two routing-stats reads of a replica by Serve (its mode, "
        "running, waiting, accept length, step time).",
    )
    class_header: str = Field(
        default="x-specflip-class",
        min_length=1,
        description="HTTP header naming a request's class (interactive | batch). HAProxy forwards it "
        "to the request router as Serve's session id: Ray's processes need "
        "RAY_SERVE_SESSION_ID_HEADER_KEY set to it (`specflip serve` sets it from here).",
    )
    default_class: RequestClass = Field(
        default=RequestClass.BATCH,
        description="Class of a request nothing else classifies (header, service_tier, priority, "
        "the two rules below).",
    )
    batch_min_max_tokens: int | None = Field(
        default=None,
        ge=1,
        description="Requests with max_tokens at least this large are batch; null: no such rule.",
    )
    non_stream_is_batch: bool = Field(default=False, description="Requests without stream: true are batch.")

    @model_validator(mode="after")
    def _consistent(self) -> _RoutingAppSettings:
        self.routing_config()  # the ranking's own checks, as one-line errors
        return self

    def class_rule(self) -> ClassRule:
        return ClassRule(
            header=self.class_header.lower(),
            default=self.default_class,
            batch_min_max_tokens=self.batch_min_max_tokens,
            non_stream_is_batch=self.non_stream_is_batch,
        )

    def routing_config(self) -> RoutingConfig:
        try:
            return RoutingConfig(**{name: getattr(self, name) for name in ROUTING_SETTINGS})
        except ValueError as e:
            raise ValueError(str(e).removeprefix("RoutingConfig: ")) from None

    def router_kwargs(self, policy_actor: str | None = None) -> dict[str, Any]:
        """`request_router_kwargs` of the replica deployment (plain data: Serve serializes it);
        `policy_actor`: where the router sends its counts."""
        rule, cfg = self.class_rule(), self.routing_config()
        return {
            "policy_actor": policy_actor,
            "class_rule": {
                "header": rule.header,
                "default": rule.default.value,
                "batch_min_max_tokens": rule.batch_min_max_tokens,
                "non_stream_is_batch": rule.non_stream_is_batch,
            },
            "routing": dataclasses.asdict(cfg),
        }


if TYPE_CHECKING:
    RoutingSettings = _RoutingAppSettings
else:
    RoutingSettings = create_model(
        "RoutingSettings",
        __base__=_RoutingAppSettings,
        __module__=__name__,
        __doc__="The `routing` section: the app's own settings plus RoutingConfig's (policy/routing.py).",
        **setting_fields(RoutingConfig),
    )
