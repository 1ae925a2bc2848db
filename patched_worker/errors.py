"""Errors of the speculation switch, each with a one-line message that says what to change.

No SGLang or torch import: the replica catches these without loading the engine stack.
"""

from __future__ import annotations

__all__ = ["SpecFlipControlTimeout", "SpeculationRpcError", "UnsupportedSetup"]


class UnsupportedSetup(ValueError):
    """An engine setup the speculation switch does not support, refused before the engine starts."""


class SpeculationRpcError(RuntimeError):
    """The scheduler refused a speculation-control call; the message says why."""


class SpecFlipControlTimeout(TimeoutError):
    """A speculation-control call got no reply in time (the scheduler is busy in one long step, or hung)."""

    def __init__(self, call: str, timeout_s: float):
        self.call, self.timeout_s = call, timeout_s
        super().__init__(
            f"{call} got no reply from the SGLang scheduler within {timeout_s:g} s (a long step or a hung "
            f"scheduler; a request already sent may still apply): retry, or raise control_timeout_s"
        )
