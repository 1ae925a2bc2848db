"""The app's HTTP client reaches only paths under its base URL (its requests against an app are
tested with the stand-in in tests/loadtests/sweep/test_control_launcher.py and with the real app in
test_serve_app.py)."""

from __future__ import annotations

import pytest

from deployments.client import SpecflipClient


@pytest.mark.parametrize(
    ("base", "path", "url"),
    [
        ("http://127.0.0.1:8000", "/v1/models", "http://127.0.0.1:8000/v1/models"),
        ("http://127.0.0.1:8000/", "/specflip/status", "http://127.0.0.1:8000/specflip/status"),
        ("http://gw/llm/", "/metrics", "http://gw/llm/metrics"),  # a route prefix is kept
    ],
)
def test_paths_are_joined_to_the_base(base: str, path: str, url: str) -> None:
    with SpecflipClient(base) as client:
        assert client.url(path) == url


@pytest.mark.parametrize(
    "path", ["v1/models", "//evil.example/x", "http://evil.example/v1/models", "/@evil.example/", "/\\\\evil"]
)
def test_anything_but_a_path_under_the_base_is_refused(path: str) -> None:
    with SpecflipClient("http://127.0.0.1:8000") as client, pytest.raises(ValueError, match="single '/'"):
        client.get(path)
