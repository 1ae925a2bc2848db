"""The `routing:` section of a specflip config: class-aware routing settings and what the request
router (deployments.router) and the ranking (policy.routing) are built from."""

from __future__ import annotations

import dataclasses
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from policy.routing import ClassRule, RequestClass, RoutingConfig

__all__ = ["RoutingSettings"]


class RoutingSettings(BaseModel):
    """Class-aware routing (deployments.router, policy.routing): interactive requests to
    speculation-ON replicas, batch requests to OFF replicas. The `routing:` section of the config
    (deployments.config)."""

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
    stale_after_s: float = Field(
        default=2.0,
        gt=0,
        description="Stats older than this on any replica: the router falls back to power of two.",
    )
    max_imbalance: float = Field(
        default=8.0,
        ge=0,
        description="Requests: when the least-loaded replica of a class's preferred mode carries more "
        "than this beyond the least-loaded replica of the other mode, the request goes to the other "
        "mode (no class piles onto its mode while the other idles).",
    )
    per_rank: int = Field(
        default=2,
        ge=1,
        description="Least-loaded replicas per mode handed to Serve, which probes their queues and "
        "takes the shortest with room.",
    )
    class_header: str = Field(
        default="x-specflip-class",
        min_length=1,
        description="HTTP header naming a request's class (interactive | batch); seen by the router "
        "on serve.data_path ingress only (HAProxy does not forward it on direct).",
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
    prefix_affinity: bool = Field(
        default=True,
        description="Send a request to the replica its prompt's longest known prefix went to (its "
        "prefix cache may still hold it), within the mode its class prefers and `affinity_max_gap`.",
    )
    affinity_min_match: float = Field(
        default=0.1,
        gt=0,
        le=1,
        description="Fraction of a prompt's characters the known prefix must cover to count.",
    )
    affinity_max_gap: float = Field(
        default=4.0,
        ge=0,
        description="Requests: a prefix holder carrying more than this beyond the least-loaded replica "
        "of its mode loses its priority for this request.",
    )

    def class_rule(self) -> ClassRule:
        return ClassRule(
            header=self.class_header.lower(),
            default=self.default_class,
            batch_min_max_tokens=self.batch_min_max_tokens,
            non_stream_is_batch=self.non_stream_is_batch,
        )

    def routing_config(self) -> RoutingConfig:
        return RoutingConfig(
            stale_after_s=self.stale_after_s,
            max_imbalance=self.max_imbalance,
            per_rank=self.per_rank,
            prefix_affinity=self.prefix_affinity,
            affinity_min_match=self.affinity_min_match,
            affinity_max_gap=self.affinity_max_gap,
        )

    def router_kwargs(self) -> dict[str, Any]:
        """`request_router_kwargs` of the replica deployment (plain data: Serve serializes it)."""
        rule, cfg = self.class_rule(), self.routing_config()
        return {
            "class_rule": {
                "header": rule.header,
                "default": rule.default.value,
                "batch_min_max_tokens": rule.batch_min_max_tokens,
                "non_stream_is_batch": rule.non_stream_is_batch,
            },
            "routing": dataclasses.asdict(cfg),
        }
