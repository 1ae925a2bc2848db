"""What SGLang refused in a request's input, as the replica's handlers answer it: a 400 with the
engine's message and the field at fault, never a 500."""

from __future__ import annotations

from typing import Any

__all__ = ["EngineInputError", "engine_refusal"]


class EngineInputError(ValueError):
    """SGLang refused a request's input; the handlers answer 400 (`status_code`) with the message
    and `param`, the request field at fault (None where SGLang's message names none)."""

    status_code = 400

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


def engine_refusal(finish: Any) -> str | None:
    """The message of SGLang's finish_reason for a request it refused (an abort with status 400)."""
    if isinstance(finish, dict) and finish.get("type") == "abort" and finish.get("status_code") == 400:
        return str(finish.get("message") or "request refused by the engine")
    return None
