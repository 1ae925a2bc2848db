"""Fixtures: the OpenAI stand-in server (tests/loadtests/openai_standin.py) in a thread."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from http.server import ThreadingHTTPServer

import pytest

from tests.loadtests.openai_standin import serve

TOKEN = "test-token"


@pytest.fixture
def standin() -> Iterator[Callable[..., str]]:
    """Start stand-in apps on free ports: `url = standin(mode="dynamic", usage=True, ...)`."""
    servers: list[ThreadingHTTPServer] = []

    def start(**kwargs: object) -> str:
        server = serve(0, token=TOKEN, **kwargs)  # type: ignore[arg-type]
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for s in servers:
        s.shutdown()
        s.server_close()
