"""Shared fixtures: the tiny trained model pair, built once and cached on disk."""

from __future__ import annotations

import contextlib
import os

import pytest

from deployments.config import DIRECT_STREAMING_ENV

# Serve reads its HAProxy / direct-streaming switches when it is imported, in this process too (the
# app is built here): set them before any test module imports Ray Serve (deployments.local sets
# them again for the Ray processes it starts)
os.environ.update(DIRECT_STREAMING_ENV)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS_DIR = os.environ.get("SPECFLIP_MODELS", os.path.join(REPO, "models", "tiny"))


@pytest.fixture(scope="session")
def model_pair():
    """(target, draft) directories of the tiny pair; builds it (minutes) only if the cache is missing."""
    from loadtests.models.build import build_pair

    return build_pair(MODELS_DIR, log=lambda line: print(line, flush=True))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test using the shared real app (tests/deployments' `app` fixture) is a serve test: it must
    not land in CI's fast stage, which starts no app (one that did, unmarked, made that stage
    slow and load-sensitive)."""
    unmarked = [
        item.nodeid
        for item in items
        if "app" in getattr(item, "fixturenames", ()) and item.get_closest_marker("serve") is None
    ]
    if unmarked:
        pytest.exit(f"tests using the shared app without the serve marker: {unmarked}", returncode=4)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    from tests.reporting import LINES

    if LINES:
        terminalreporter.section("what the real-app tests measured")
        for line in LINES:
            terminalreporter.write_line(line)


# --- exit ------------------------------------------------------------------------------------
# The suite starts and stops Ray several times in this process (Serve apps, the policy actor)
# and hosts SGLang engines (zmq sockets, torch threads). Interpreter finalization after that is
# not safe: CI saw a segfault (exit 139) *after* pytest had printed "503 passed", i.e. in
# Python's teardown of those extensions' threads (Ray documents the pattern:
# https://github.com/ray-project/ray/issues/31145). The results are final by then, so the
# process ends with pytest's own exit status without finalizing; leftover children are stopped first (what sglang's atexit did),
# except multiprocessing's resource tracker, which cleans up by itself once we are gone.
# SPECFLIP_TEST_SOFT_EXIT=1 keeps the normal interpreter exit (to debug teardown).

_EXIT_STATUS = pytest.StashKey[int]()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    session.config.stash[_EXIT_STATUS] = int(exitstatus)


def _stop_children(grace_s: float = 5.0) -> None:
    import psutil

    try:
        from multiprocessing import resource_tracker

        tracker = getattr(resource_tracker._resource_tracker, "_pid", None)
    except Exception:  # noqa: BLE001 - private API; only used to spare the tracker
        tracker = None
    children = [p for p in psutil.Process().children(recursive=True) if p.pid != tracker]
    for p in children:
        with contextlib.suppress(psutil.Error):
            p.terminate()
    _, alive = psutil.wait_procs(children, timeout=grace_s)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    status = config.stash.get(_EXIT_STATUS, None)
    if status is None or os.environ.get("SPECFLIP_TEST_SOFT_EXIT") == "1":
        return
    import sys

    _stop_children()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
