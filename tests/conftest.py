"""Shared fixtures: the tiny trained model pair, built once and cached on disk."""

from __future__ import annotations

import os

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS_DIR = os.environ.get("SPECFLIP_MODELS", os.path.join(REPO, "models", "tiny"))


@pytest.fixture(scope="session")
def model_pair():
    """(target, draft) directories of the tiny pair; builds it (minutes) only if the cache is missing."""
    from patched_worker.models.build import build_pair

    return build_pair(MODELS_DIR, log=lambda line: print(line, flush=True))
