"""Fixtures: the OpenAI stand-in server (tests/loadtests/openai_standin.py) in a thread; a one-replica CPU
config of the tiny pair for the benches that start engines."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from tests.loadtests.openai_standin import serve

TOKEN = "test-token"
CPU_EXAMPLE = Path(__file__).resolve().parents[2] / "deployments" / "examples" / "cpu-tiny-1replica.yaml"


@pytest.fixture
def tiny_config(tmp_path: Path, model_pair) -> Path:  # noqa: ANN001
    """deployments/examples/cpu-tiny-1replica.yaml pointed at the built tiny pair, written to tmp_path."""
    cfg = yaml.safe_load(CPU_EXAMPLE.read_text())
    cfg["model"].update(path=model_pair.target, draft_path=model_pair.draft)
    config = tmp_path / "cpu.yaml"
    config.write_text(yaml.safe_dump(cfg))
    return config


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
