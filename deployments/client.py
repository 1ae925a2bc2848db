"""The one HTTP client of a running specflip app: its OpenAI routes (`/v1`) and its own
(`/specflip/status`, `/specflip/override`, `/metrics`).

`specflip serve` and the demo wait on it, the load-test sweep switches variants and polls status
with it, the tests talk to the app through it. Every request goes to a path under the base URL it
was made with (paths are checked, redirects are not followed), so a client never reaches another
host. Locust's users send the measured load through Locust's own session (loadtests/locust/users.py).

Status format (`GET /specflip/status`, deployments.http.control.status_document):
`{"replicas": [{"replica_id", "mode", "desired_mode", "running", "waiting", "accept_length",
"flips", "patched", "override", "policy_source", "stale", ...}], "expected_replicas": n,
"policy": {...}}`. An app without the specflip API (e.g. SGLang's own `speculative_adaptive`)
answers 404 there: `status()` returns None.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any

import httpx

__all__ = ["ControlError", "SpecflipClient"]


class ControlError(RuntimeError):
    """The app refused or failed a call; str(e) says which and why in one line."""


class SpecflipClient:
    """One app at `base` (http://host:port plus the route prefix). Thread-safe (httpx.Client)."""

    def __init__(self, base: str, token: str = "", timeout: float = 30.0) -> None:
        self.base = base.rstrip("/")
        self.token = token
        self.timeout = timeout
        self._http = httpx.Client(timeout=timeout, follow_redirects=False)

    def __enter__(self) -> SpecflipClient:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def url(self, path: str) -> str:
        """`path` (one leading '/', no scheme, host or userinfo) under the base URL."""
        if not path.startswith("/") or path.startswith("//") or "://" in path or "@" in path or "\\" in path:
            raise ValueError(f"a path under {self.base} must start with a single '/', got {path!r}")
        return self.base + path

    # -- raw requests: the response whatever its status ----------------------------------------
    def get(self, path: str, *, timeout: float | None = None) -> httpx.Response:
        return self._http.get(self.url(path), timeout=timeout or self.timeout)

    def post(
        self,
        path: str,
        body: Any = None,
        *,
        content: bytes | str | None = None,
        headers: dict[str, str] | None = None,
        timeout: float | None = None,
    ) -> httpx.Response:
        """POST `body` as JSON (or raw `content`, e.g. a malformed body in a test)."""
        if content is not None:
            return self._http.post(
                self.url(path), content=content, headers=headers, timeout=timeout or self.timeout
            )
        return self._http.post(self.url(path), json=body, headers=headers, timeout=timeout or self.timeout)

    # -- the OpenAI routes -----------------------------------------------------------------------
    def models(self) -> list[str]:
        r = self.get("/v1/models")
        r.raise_for_status()
        return [str(m["id"]) for m in r.json().get("data") or []]

    def completion(
        self, body: dict[str, Any], *, chat: bool = False, timeout: float = 300.0
    ) -> dict[str, Any]:
        """A non-streamed completion (chat with `chat=True`); ControlError unless the app answers 200."""
        path = "/v1/chat/completions" if chat else "/v1/completions"
        r = self.post(path, body, timeout=timeout)
        if r.status_code != 200:
            raise ControlError(f"{path}: HTTP {r.status_code} {r.text[:300]}")
        result: dict[str, Any] = r.json()
        return result

    def probe(self, model: str, api: str = "chat", timeout: float = 300.0) -> None:
        """One short request, so the app has generated before anything is measured."""
        body: dict[str, Any] = {"model": model, "max_tokens": 4, "temperature": 0.0}
        if api == "completions":
            path, body["prompt"] = "/v1/completions", "Hello"
        else:
            path, body["messages"] = "/v1/chat/completions", [{"role": "user", "content": "Hello"}]
        r = self.post(path, body, timeout=timeout)
        if r.status_code != 200:
            raise ControlError(f"probe request to {path} failed: HTTP {r.status_code} {r.text[:300]}")

    # -- specflip's own routes -------------------------------------------------------------------
    def status(self) -> dict[str, Any] | None:
        """The `/specflip/status` document, or None when the app has none (404)."""
        r = self.get("/specflip/status")
        if r.status_code == 404:
            return None
        r.raise_for_status()
        doc: dict[str, Any] = r.json()
        return doc

    def replicas(self) -> list[dict[str, Any]]:
        """The replicas of the status document ([] for an app without one)."""
        doc = self.status()
        return list(doc.get("replicas") or []) if doc is not None else []

    def send_override(self, mode: str, replica_id: str = "*", token: str | None = None) -> httpx.Response:
        """POST /specflip/override as is (the response whatever its status)."""
        return self.post(
            "/specflip/override",
            {"replica_id": replica_id, "mode": mode},
            headers={"Authorization": f"Bearer {self.token if token is None else token}"},
        )

    def override(self, mode: str, replica_id: str = "*") -> None:
        """Set the operator override (`on`, `off` or `auto`) of one replica or all (`*`)."""
        r = self.send_override(mode, replica_id)
        if r.status_code == 401:
            raise ControlError("override refused (401): pass the control token (--token or SPECFLIP_TOKEN)")
        if r.status_code >= 400:
            raise ControlError(
                f"override {mode} for {replica_id} failed: HTTP {r.status_code} {r.text[:200]}"
            )

    def metrics(self) -> str:
        """The Prometheus text of `GET /metrics`."""
        r = self.get("/metrics")
        r.raise_for_status()
        return r.text
