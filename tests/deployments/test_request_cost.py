"""A request's whole cost is bounded before anything tokenizes it (the first item of the reliability report), on the real
app: 20 bodies of the kind the reliability report sent, in a row (its ~30 MB /v1/completions body
with `prompt` = 300 texts of 100 kB each, token-id prompt lists, and bodies under the body-size
cap for each cap on prompts, text and token ids) are each refused in under a second with a 400/413
naming the field and the setting, the replicas' resident memory stays within 200 MB of where it
started (before, one replica went 4.7 -> 8.3 GB over 5 such requests), and requests sent
meanwhile are served."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from typing import Any

import httpx
import psutil
import pytest

from deployments.local import LocalApp
from tests.deployments.conftest import MODEL
from tests.reporting import report

pytestmark = pytest.mark.serve
TEXT = "/v1/completions"
RSS_BUDGET = 200 * 1024 * 1024
MAX_BODY_BYTES = 16 * 1024 * 1024  # serve.max_body_bytes, the default


def _texts(n: int, size: int) -> list[str]:
    """`n` different texts of exactly `size` bytes each."""
    code = "def add(a, b):\n    return a + b\n"
    return [(f"{i:05d}" + code * (size // len(code) + 1))[:size] for i in range(n)]


def _ids(n: int, length: int) -> list[list[int]]:
    return [[(7 * i + j) % 4000 + 10 for j in range(length)] for i in range(n)]


def _bodies() -> list[tuple[str, bytes, int, str | None]]:
    """(what, raw body, status, param): the issue's body, then one body under the body-size cap
    for each cap on the request's cost."""
    bodies: list[tuple[str, dict[str, Any], int, str | None]] = [
        ("the issue's: 300 texts of 100 kB", {"prompt": _texts(300, 100_000)}, 413, None),
        ("150 texts of 100 kB", {"prompt": _texts(150, 100_000)}, 400, "prompt"),
        ("1300 token-id prompts of 2000 ids", {"prompt": _ids(1300, 2000)}, 400, "prompt"),
        ("45 texts of 100 kB: 4.5 MB of text", {"prompt": _texts(45, 100_000)}, 413, "prompt"),
        ("64 token-id prompts of 2100 ids", {"prompt": _ids(64, 2100)}, 413, "prompt"),
        (
            "150 chat messages of 100 kB",
            {"messages": [{"role": "user", "content": t} for t in _texts(150, 100_000)]},
            413,
            "messages",
        ),
    ]
    out = []
    for what, body, status, param in bodies:
        raw = json.dumps({"model": MODEL, "max_tokens": 4, **body}).encode()
        # the body is refused by its size; every other one by the cap it exceeds
        assert (len(raw) > MAX_BODY_BYTES) == (param is None), (what, len(raw))
        out.append((what, raw, status, param))
    return out


def _replica_processes() -> dict[int, psutil.Process]:
    """The SpecFlipServer replica processes (Ray workers) of this test session's app."""
    found = {}
    for p in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(p.info.get("cmdline") or [])
        if cmdline.startswith("ray::ServeReplica:specflip:SpecFlipServer"):
            found[p.pid] = p
    return found


def _rss(process: psutil.Process) -> int:
    """A replica's resident memory with its engine's processes (scheduler, detokenizer)."""
    total = 0
    for p in [process, *process.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):  # an engine process that just ended
            total += p.memory_info().rss
    return total


def test_twenty_oversized_bodies_in_a_row_are_refused_fast_and_leave_replica_memory_where_it_was(
    app: LocalApp,
) -> None:
    replicas = _replica_processes()
    assert len(replicas) == 2, replicas
    raw = _bodies()
    # warm both replicas' allocators on ordinary traffic first: the baseline is a serving replica
    for _ in range(4):
        assert (
            app.client.post(TEXT, {"model": MODEL, "prompt": "def", "max_tokens": 8}, timeout=300).status_code
            == 200
        )
    before = {pid: _rss(p) for pid, p in replicas.items()}

    served: list[tuple[int, float]] = []
    stop = threading.Event()

    def meanwhile() -> None:  # ordinary requests the whole time
        while not stop.is_set():
            t = time.monotonic()
            r = app.client.post(
                TEXT, {"model": MODEL, "prompt": "class Stack:", "max_tokens": 8}, timeout=300
            )
            served.append((r.status_code, time.monotonic() - t))

    worker = threading.Thread(target=meanwhile)
    worker.start()
    took: list[float] = []
    try:
        with httpx.Client(base_url=app.base, timeout=60) as http:
            for i in range(20):
                what, content, status, param = raw[i % len(raw)]
                path = "/v1/chat/completions" if "messages" in what else TEXT
                started = time.monotonic()
                r = http.post(path, content=content, headers={"Content-Type": "application/json"})
                took.append(time.monotonic() - started)
                error = r.json()["error"]
                assert (r.status_code, error["param"]) == (status, param), (what, r.status_code, error)
                assert "serve.max_" in error["message"], error  # names the setting that bounds it
    finally:
        stop.set()
        worker.join(timeout=300)
    after = {pid: _rss(p) for pid, p in replicas.items()}
    mb = 1024 * 1024
    report(
        f"request cost: 20 oversized bodies ({', '.join(f'{len(c) / 1e6:.1f} MB' for _, c, _, _ in raw)}) "
        f"refused in {min(took):.2f}-{max(took):.2f} s; replica RSS before/after (MB) "
        + ", ".join(f"{before[pid] / mb:.0f} -> {after[pid] / mb:.0f}" for pid in before)
        + f"; {len(served)} requests served meanwhile, slowest {max(t for _, t in served):.2f} s"
    )
    assert max(took) < 1.0, took
    assert all(after[pid] - before[pid] < RSS_BUDGET for pid in before), (before, after)
    assert served and all(code == 200 for code, _ in served), served
