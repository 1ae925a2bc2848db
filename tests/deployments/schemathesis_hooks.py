"""Schemathesis hooks: each generated request bounded for the CPU app, in the Python-API run
(test_schema_fuzz.py) and in the CLI run it starts (`SCHEMATHESIS_HOOKS=tests.deployments.
schemathesis_hooks`): the served model id, `max_tokens` at most 8 (a short generation on CPU), and 8
where a body leaves both `max_tokens` and `max_completion_tokens` absent or null (SGLang's default
of 128 tokens took 1.3-1.7 s per served case on CPU: 600 of the CLI run's 626 s), the control token
on overrides. Idempotent."""

from __future__ import annotations

from typing import Any

import schemathesis

MODEL = "specflip-tiny"  # tests.deployments.conftest's (not imported: the CLI process stays light)
TOKEN = "test-control-token"


def bounded(case: Any) -> None:
    body = case.body
    if isinstance(body, dict):
        if "model" in body or case.path.startswith("/v1/"):
            body["model"] = MODEL
        for name in ("max_tokens", "max_completion_tokens"):
            if isinstance(body.get(name), int) and not isinstance(body[name], bool):
                body[name] = max(-1, min(body[name], 8))
        if (
            case.path.startswith("/v1/")
            and body.get("max_tokens") is None
            and body.get("max_completion_tokens") is None
        ):
            body["max_tokens"] = 8  # a valid value where none was set: the request stays valid or invalid
        if isinstance(body.get("min_tokens"), int) and not isinstance(body["min_tokens"], bool):
            body["min_tokens"] = min(body["min_tokens"], 8)
    if case.path == "/specflip/override":
        case.headers = {**(case.headers or {}), "Authorization": f"Bearer {TOKEN}"}


@schemathesis.hook
def before_call(context: Any, case: Any, **kwargs: Any) -> None:
    bounded(case)
