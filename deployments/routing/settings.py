"""The `routing:` section of a specflip config: class-aware routing settings and what the request
router (deployments.routing.router) and the ranking (policy.routing) are built from. The class
rule's and the ranking's settings are declared once, on policy.routing.ClassRule and RoutingConfig;
RoutingSettings is both plus the app's own two keys."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from policy.routing import ClassRule, RoutingConfig

__all__ = ["RoutingSettings"]


class RoutingSettings(ClassRule, RoutingConfig):
    """Class-aware routing (deployments.routing.router, policy.routing): interactive requests to
    speculation-ON replicas, batch requests to OFF replicas. The `routing:` section of the config
    (deployments.config)."""

    class_routing: bool = Field(
        default=False,
        description="Route by request class and replica mode (specflip's request router); false "
        "routes by Serve's power of two choices, the less loaded first (routing.power_of_two). Only "
        "with a draft (speculative replicas). Off by default until measured on a GPU (docs/routing.md).",
    )
    stats_period_s: float = Field(
        default=0.25,
        gt=0,
        le=10,
        description="Seconds between two routing-stats reads of a replica by Serve (its mode, "
        "running, waiting, accept length, step time).",
    )

    def class_rule(self) -> ClassRule:
        return ClassRule(**{name: getattr(self, name) for name in ClassRule.model_fields})

    def routing_config(self) -> RoutingConfig:
        return RoutingConfig(**{name: getattr(self, name) for name in RoutingConfig.model_fields})

    def router_kwargs(
        self, policy_actor: str | None = None, policy_namespace: str | None = None
    ) -> dict[str, Any]:
        """`request_router_kwargs` of the replica deployment (plain data: Serve serializes it);
        `policy_actor` in Ray namespace `policy_namespace`: where the router sends its counts (the
        router takes both from here, so it imports nothing of deployments.config, which imports this
        folder's settings)."""
        return {
            "policy_actor": policy_actor,
            "policy_namespace": policy_namespace,
            "class_rule": self.class_rule().model_dump(mode="json"),
            "routing": self.routing_config().model_dump(mode="json"),
        }
