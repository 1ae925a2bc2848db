"""A replica reads a request's class once: the API's reading (deployments.replica.api, passed to the
server's `generate` as an argument) is what the server counts by (Ray's metric
`specflip_served_requests`, read back from Ray's metrics export of a local Ray started by this
module) and what the mixed rule's interactive demand sees."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from deployments.replica.server import SpecFlipServer
from policy.routing import RequestClass
from tests.local_ray import local_ray
from tests.ray_metrics import export_text, total, wait_for_export

SERVED = "ray_specflip_served_requests_total"


@pytest.fixture(scope="module")
def ray_metrics() -> Iterator[None]:
    """A local Ray whose metrics agent hears from this process every 0.5 s."""
    with local_ray(metrics_report_s=0.5):
        yield


def _server() -> Any:
    return SimpleNamespace(_interactive=0, current_mode=lambda: "on")


async def _items(server: Any, seen: list[int]) -> AsyncGenerator[str, None]:
    for item in ("a", "b"):
        seen.append(server._interactive)  # interactive requests in flight while the stream runs
        yield item


def _serve(server: Any, request_class: RequestClass) -> list[int]:
    seen: list[int] = []

    async def run() -> None:
        stream = SpecFlipServer._counted(server, request_class, _items(server, seen))
        assert [item async for item in stream] == ["a", "b"]

    asyncio.run(run())
    return seen


def _served_grew(before: str, expected: dict[str, float]) -> None:
    """Wait until Ray's export shows each class served ON grown by exactly its expected count."""

    def grown(text: str) -> dict[str, float]:
        return {
            cls: total(text, SERVED, **{"class": cls, "mode": "on"})
            - total(before, SERVED, **{"class": cls, "mode": "on"})
            for cls in expected
        }

    wait_for_export(lambda text: grown(text) == expected, why=f"served requests grew by {expected}")


def test_the_server_counts_by_the_class_it_is_given_and_interactive_ones_in_flight(ray_metrics: None) -> None:
    server = _server()
    before = export_text()
    assert _serve(server, RequestClass.INTERACTIVE) == [1, 1]
    assert server._interactive == 0  # the stream ended: no longer in flight
    _served_grew(before, {"interactive": 1.0, "batch": 0.0})


def test_a_batch_request_is_counted_as_batch_and_not_in_the_interactive_demand(ray_metrics: None) -> None:
    server = _server()
    before = export_text()
    assert _serve(server, RequestClass.BATCH) == [0, 0]
    _served_grew(before, {"batch": 1.0, "interactive": 0.0})
