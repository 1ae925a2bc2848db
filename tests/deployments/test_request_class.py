"""A replica reads a request's class once: the API's reading (deployments.replica.api, passed to the
server's `generate` as an argument) is what the server counts by and what the mixed rule's
interactive demand sees."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from types import SimpleNamespace
from typing import Any

import pytest

from deployments.replica import server as server_module
from deployments.replica.server import SpecFlipServer
from policy.routing import RequestClass


def _server() -> Any:
    return SimpleNamespace(_interactive=0, current_mode=lambda: "on")


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, ...]]:
    """What the server records in its served-requests counter (Ray's metric API records nothing
    outside a Ray worker, so a recording stand-in takes the `labels(...).inc()` calls)."""
    seen: list[tuple[str, ...]] = []
    counter = SimpleNamespace(labels=lambda *values: SimpleNamespace(inc=lambda: seen.append(values)))
    monkeypatch.setattr(server_module, "http_metrics", lambda: SimpleNamespace(served=counter))
    return seen


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


def test_the_server_counts_by_the_class_it_is_given_and_interactive_ones_in_flight(
    served: list[tuple[str, ...]],
) -> None:
    server = _server()
    assert _serve(server, RequestClass.INTERACTIVE) == [1, 1]
    assert server._interactive == 0  # the stream ended: no longer in flight
    assert served == [("interactive", "on")]  # counted once


def test_a_batch_request_is_counted_as_batch_and_not_in_the_interactive_demand(
    served: list[tuple[str, ...]],
) -> None:
    server = _server()
    assert _serve(server, RequestClass.BATCH) == [0, 0]
    assert served == [("batch", "on")]
