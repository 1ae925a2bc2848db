"""A replica reads a request's class once: the API edge's reading (deployments.http.handlers sets
`SERVED_CLASS` in the request's task) is what the server counts by and what the mixed rule's
interactive demand sees; a call without the edge (a Serve handle) is classified by the server."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import AsyncGenerator
from types import SimpleNamespace
from typing import Any

from deployments.replica.server import SpecFlipServer
from deployments.routing.journal import JOURNAL, SERVED_CLASS
from policy.routing import ClassRule, RequestClass


def _server() -> Any:
    return SimpleNamespace(_class_rule=ClassRule(), _interactive=0, current_mode=lambda: "on")


async def _items(server: Any, seen: list[int]) -> AsyncGenerator[str, None]:
    for item in ("a", "b"):
        seen.append(server._interactive)  # interactive requests in flight while the stream runs
        yield item


def _serve(server: Any, headers: dict[str, str]) -> list[int]:
    seen: list[int] = []

    async def run() -> None:
        stream = SpecFlipServer._counted(
            server, SimpleNamespace(), SimpleNamespace(headers=headers), _items(server, seen)
        )
        assert [item async for item in stream] == ["a", "b"]

    contextvars.copy_context().run(asyncio.run, run())
    return seen


def test_the_server_counts_by_the_class_the_edge_read() -> None:
    server = _server()
    before = JOURNAL.served_copy()

    def edge_read_interactive() -> list[int]:
        SERVED_CLASS.set(RequestClass.INTERACTIVE)  # what the handler read (the header says batch)
        return _serve(server, {"x-specflip-class": "batch"})

    assert contextvars.copy_context().run(edge_read_interactive) == [1, 1]
    assert server._interactive == 0  # the stream ended: no longer in flight
    after = JOURNAL.served_copy()
    assert after.get(("interactive", "on"), 0) == before.get(("interactive", "on"), 0) + 1
    assert after.get(("batch", "on"), 0) == before.get(("batch", "on"), 0)


def test_without_the_edge_the_server_reads_the_class_header() -> None:
    server = _server()
    before = JOURNAL.served_copy()
    assert _serve(server, {"x-specflip-class": "interactive"}) == [1, 1]
    assert _serve(server, {"x-specflip-class": "batch"}) == [0, 0]
    after = JOURNAL.served_copy()
    assert after.get(("batch", "on"), 0) == before.get(("batch", "on"), 0) + 1
