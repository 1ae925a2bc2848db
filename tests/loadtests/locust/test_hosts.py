"""No request goes anywhere but the configured host."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
import requests
from requests.adapters import BaseAdapter

from loadtests.locust.hosts import ForeignUrlError, HostBoundUrls, guard_session

HOST = HostBoundUrls("http://127.0.0.1:8000/")


@pytest.mark.parametrize(
    ("path", "url"),
    [
        ("/v1/chat/completions", "http://127.0.0.1:8000/v1/chat/completions"),
        ("/specflip/status", "http://127.0.0.1:8000/specflip/status"),
        ("/v1/models?x=1", "http://127.0.0.1:8000/v1/models?x=1"),
    ],
)
def test_paths_are_joined_to_the_host(path: str, url: str) -> None:
    assert HOST.url(path) == url


@pytest.mark.parametrize(
    "path",
    [
        "http://evil.example/v1/models",
        "//evil.example/v1/models",
        "v1/models",
        "@evil.example/x",
        "/x@evil.example",
        ":9000/x",
        "/\\evil",
        "",
    ],
)
def test_foreign_or_ambiguous_paths_are_refused(path: str) -> None:
    with pytest.raises(ForeignUrlError):
        HOST.url(path)


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8001/v1/models",
        "https://127.0.0.1:8000/v1/models",
        "http://localhost:8000/",
        "http://127.0.0.1:8000@evil.example/",
        "http://evil.example/",
    ],
)
def test_check_refuses_other_origins(url: str) -> None:
    with pytest.raises(ForeignUrlError):
        HOST.check(url)


def test_base_path_prefix_is_kept_and_enforced() -> None:
    gw = HostBoundUrls("http://gw:80/llm")
    assert gw.url("/v1/models") == "http://gw:80/llm/v1/models"
    with pytest.raises(ForeignUrlError):
        gw.check("http://gw:80/other/v1/models")


@pytest.mark.parametrize("host", ["127.0.0.1:8000", "ftp://h/", "http://u:p@h/", "http://h/?q=1", "http://"])
def test_bad_hosts_are_refused(host: str) -> None:
    with pytest.raises(ForeignUrlError):
        HostBoundUrls(host)


class RecordingAdapter(BaseAdapter):
    """Fake transport (failure injection): answers with a redirect to another host."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[str] = []

    def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:  # type: ignore[override]
        self.sent.append(str(request.url))
        r = requests.Response()
        r.status_code, r.url, r.request = 302, str(request.url), request
        r.headers["Location"] = "http://evil.example/steal"
        r._content = b""
        return r

    def close(self) -> None:
        pass


def test_guarded_session_never_sends_to_another_host_even_on_redirect() -> None:
    s = requests.Session()
    adapter = RecordingAdapter()
    s.mount("http://", adapter)
    guard_session(s, HOST)
    with pytest.raises(ForeignUrlError):
        s.get("http://evil.example/x")
    with pytest.raises(ForeignUrlError):
        s.get(HOST.url("/v1/models"), allow_redirects=True)
    assert adapter.sent == ["http://127.0.0.1:8000/v1/models"]


HTTP_METHODS = {"get", "post", "put", "patch", "delete", "head", "request"}


def test_every_http_call_in_the_package_takes_a_host_bound_url() -> None:
    """Static check: the first argument of each HTTP call is `<something>.url(...)`, a variable
    assigned from one in the same function, or a literal path '/...' (deployments.client's
    SpecflipClient joins it to its base URL and refuses anything else): no literal or foreign URL."""
    pkg = Path(__file__).resolve().parents[3] / "loadtests"
    calls = 0
    for path in sorted(pkg.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for fn in [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]:
            bound = {
                t.id
                for a in ast.walk(fn)
                if isinstance(a, ast.Assign) and _is_url_call(a.value)
                for t in a.targets
                if isinstance(t, ast.Name)
            } | {a.arg for a in fn.args.args if a.arg == "url"}
            for call in [c for c in ast.walk(fn) if isinstance(c, ast.Call)]:
                f = call.func
                if not (isinstance(f, ast.Attribute) and f.attr in HTTP_METHODS and _is_http_client(f.value)):
                    continue
                calls += 1
                first = call.args[0] if call.args else None
                ok = first is not None and (
                    _is_url_call(first)
                    or (isinstance(first, ast.Name) and first.id in bound)
                    or (isinstance(first, ast.Constant) and str(first.value).startswith("/"))
                )
                assert ok, (
                    f"{path.name}:{call.lineno}: HTTP call whose URL is not built by HostBoundUrls.url()"
                )
    assert calls >= 3  # the user's POST, model discovery, the demo's requests


def _is_url_call(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "url"


def _is_http_client(node: ast.AST) -> bool:
    name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")
    return name in {"requests", "client", "session", "_session", "http"}
