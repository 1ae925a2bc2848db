"""Every URL the load generator touches is built here, from the one configured host.

The load generator sends no request anywhere but the configured host. Callers
never format URLs themselves: they ask a `HostBoundUrls` for a path, and it
refuses anything that would leave the host (absolute URLs, scheme-relative
`//other/`, userinfo tricks such as `@evil.example/`, other ports). HTTP
clients in this package also turn redirects off, so a server cannot bounce a
request elsewhere either (the app's own client, deployments.client, does the
same for its paths).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

__all__ = ["ForeignUrlError", "HostBoundUrls", "guard_fast_session", "guard_session"]


class ForeignUrlError(ValueError):
    """A URL would reach something other than the configured host."""


def _origin(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return parts.scheme.lower(), parts.netloc.lower()


@dataclass(frozen=True)
class HostBoundUrls:
    """Builds URLs on one host; raises `ForeignUrlError` for anything else.

    `host` is a base URL such as `http://127.0.0.1:8000` (a path prefix such as
    `http://gw/llm` is kept: paths are appended to it).
    """

    host: str

    def __post_init__(self) -> None:
        parts = urlsplit(self.host)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ForeignUrlError(
                f"host must be an http(s) base URL like http://127.0.0.1:8000, got {self.host!r}"
            )
        if parts.username or parts.password or parts.query or parts.fragment:
            raise ForeignUrlError(f"host must not carry credentials, query or fragment: {self.host!r}")
        object.__setattr__(self, "host", self.host.rstrip("/"))

    @property
    def base_path(self) -> str:
        """The path prefix of the host ('' for a bare host)."""
        return urlsplit(self.host).path

    def url(self, path: str) -> str:
        """The absolute URL of `path` (which must start with a single '/') on the host."""
        if not path.startswith("/") or path.startswith("//"):
            raise ForeignUrlError(f"path must start with a single '/': {path!r}")
        if "\\" in path or "@" in path.split("?", 1)[0]:
            raise ForeignUrlError(f"path must not contain '\\' or '@': {path!r}")
        url = self.host + path
        self.check(url)
        return url

    def check(self, url: str) -> None:
        """Raise unless `url` is on the configured host (same scheme, host and port)."""
        if _origin(url) != _origin(self.host):
            raise ForeignUrlError(f"refusing {url!r}: only {self.host!r} may be contacted")
        if not urlsplit(url).path.startswith(self.base_path):
            raise ForeignUrlError(f"refusing {url!r}: outside the base path {self.base_path!r}")


class _Sender(Protocol):
    def send(self, request: Any, **kwargs: Any) -> Any: ...


def guard_session(session: _Sender, urls: HostBoundUrls) -> None:
    """Make a `requests.Session` (Locust's HttpSession is one) refuse foreign URLs.

    Every request a session sends, redirects included, goes through `send`; the
    wrapper checks the URL before anything leaves the process.
    """
    inner = session.send

    def send(request: Any, **kwargs: Any) -> Any:
        urls.check(str(request.url))
        return inner(request, **kwargs)

    session.send = send  # type: ignore[method-assign]


def guard_fast_session(session: Any, urls: HostBoundUrls) -> None:
    """The same for Locust's `FastHttpSession`: every request it sends passes
    `_send_request_safe_mode(method, url, ...)`, which is wrapped to check the URL first."""
    inner = session._send_request_safe_mode

    def send(method: str, url: str, **kwargs: Any) -> Any:
        urls.check(url)
        return inner(method, url, **kwargs)

    session._send_request_safe_mode = send
