"""Start-time refusal of engine setups the speculation switch does not support.

Checked in the calling process before SGLang starts anything, on the keywords given to
`SpecFlipEngine` (or the `server_args` object passed instead). No SGLang or torch import.
"""

from __future__ import annotations

import os
from typing import Any

from patched_worker.errors import UnsupportedSetup
from patched_worker.state import Strategy, SwitchConfig

__all__ = ["ALLOW_COLD_ENV", "check_engine_setup", "check_strategy", "cold_allowed"]

ALLOW_COLD_ENV = "SPECFLIP_ALLOW_COLD"  # "1": benchmark runs may select strategy cold


def cold_allowed(config: SwitchConfig) -> bool:
    return config.allow_cold or os.environ.get(ALLOW_COLD_ENV) == "1"


def check_strategy(strategy: Strategy, allow_cold: bool) -> None:
    """Refuse `cold` outside benchmarks: it leaves stale draft K/V that the radix cache then shares."""
    if Strategy(strategy) is Strategy.COLD and not allow_cold:
        raise UnsupportedSetup(
            "strategy 'cold' is a benchmark-only counter-example (stale draft K/V, cached and reused by "
            f"the radix cache, lowers acceptance): use warm_kv, or set {ALLOW_COLD_ENV}=1 / "
            "SwitchConfig(allow_cold=True) in a benchmark"
        )


def _arg(engine_kwargs: dict[str, Any], name: str, default: Any) -> Any:
    server_args = engine_kwargs.get("server_args")
    if server_args is not None:
        return getattr(server_args, name, default)
    return engine_kwargs.get(name, default)


def check_engine_setup(engine_kwargs: dict[str, Any], switch: SwitchConfig) -> None:
    """Raise UnsupportedSetup (one line: what and why) for a setup the switch cannot flip correctly."""
    check_strategy(switch.strategy, cold_allowed(switch))
    if not _arg(engine_kwargs, "speculative_algorithm", None):
        return  # no speculation: the engine runs plain and reports itself unswitchable
    if _arg(engine_kwargs, "enable_dp_attention", False):
        raise UnsupportedSetup(
            "enable_dp_attention is not supported with the speculation switch (DP-attention ranks agree on "
            "each step's token count, sized for the verify width, before the forward; an OFF step decodes one "
            "token per request): drop enable_dp_attention"
        )
    for name, what in (("tp_size", "tensor"), ("pp_size", "pipeline"), ("dp_size", "data")):
        size = int(_arg(engine_kwargs, name, 1) or 1)
        if size > 1:
            raise UnsupportedSetup(
                f"{name}={size} is not supported with the speculation switch ({what} parallelism: the OFF "
                f"step and the draft K/V upkeep are verified on one GPU per engine only): use {name}=1 and "
                "scale with more replicas"
            )
