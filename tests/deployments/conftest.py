"""Shared fixtures of the deployments tests: the tiny trained model pair and a running app."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAIR_ENV = "SPECFLIP_TEST_PAIR"


@pytest.fixture(scope="session")
def deploy_pair() -> tuple[str, str]:
    """(target, draft) of the tiny trained pair: $SPECFLIP_TEST_PAIR (default /tmp/pair0), built if missing."""
    from patched_worker.models.build import build_pair

    paths = build_pair(os.environ.get(PAIR_ENV, "/tmp/pair0"))
    return paths.target, paths.draft
