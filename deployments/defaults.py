"""The embedded CPU default: 2 CPU replicas of the tiny trained pair, with a policy band that
flips at CPU-sized loads. `specflip demo` and `serve run deployments.app:app` (without
$SPECFLIP_CONFIG) use it. Building the pair is tooling (`specflip models build`,
loadtests.models); this module only finds an existing build.
"""

from __future__ import annotations

import os
from typing import Any

from deployments.config import ConfigError, SpecFlipConfig

__all__ = ["PAIR_DIR_ENV", "cpu_demo_config", "default_pair_dir", "require_pair"]

PAIR_DIR_ENV = "SPECFLIP_PAIR_DIR"


def default_pair_dir() -> str:
    """$SPECFLIP_PAIR_DIR, else ./models/tiny (absolute: replicas run in other directories)."""
    return os.path.abspath(os.environ.get(PAIR_DIR_ENV) or os.path.join("models", "tiny"))


def require_pair(pair_dir: str | None = None) -> tuple[str, str]:
    """(target, draft) of an existing build; ConfigError with the command that builds one otherwise."""
    root = os.path.abspath(pair_dir or default_pair_dir())
    target, draft = os.path.join(root, "target"), os.path.join(root, "draft")
    if not all(os.path.isfile(os.path.join(d, "config.json")) for d in (target, draft)):
        raise ConfigError(
            f"no tiny model pair at {root}: run `specflip models build --out {root}` "
            f"(or `specflip demo`, which builds it), or set {PAIR_DIR_ENV} / SPECFLIP_CONFIG"
        )
    return target, draft


def cpu_demo_config(pair: tuple[str, str], **sections: dict[str, Any]) -> SpecFlipConfig:
    """The CPU default for a (target, draft) pair; `sections` override parts (e.g. policy={...})."""
    target, draft = pair
    data: dict[str, Any] = {
        "model": {"id": "specflip-tiny", "path": target, "draft_path": draft},
        "speculation": {
            "steps": 3,
            "topk": 1,
            "draft_tokens": 4,
            "strategy": "warm_kv",
            "start_enabled": True,
        },
        # CPU loads are small: 2 replicas x a handful of requests; speculation OFF at 4 in flight (at once:
        # relief under load stays prompt), back ON at <= 1 once that has held on_persist_s (the field
        # default, 3 s: the dip between two requests of a closed-loop client is not low load). No
        # persist_s of its own: on_persist_s already covers that dip, and persist_s would slow OFF too.
        "policy": {"high": 4, "low": 1, "dwell_s": 2.0, "tick_s": 0.25, "stale_after_s": 5.0, "ttl_s": 30.0},
        # the tiny model pads grammar-constrained JSON with whitespace until max_tokens: JSON
        # constraints (response_format, json_schema, tool calls) allow none between tokens
        "engine": {
            "device": "cpu",
            "max_running_requests": 16,
            "max_total_tokens": 8192,
            "extra": {"constrained_json_disable_any_whitespace": True},
        },
        "replicas": {"count": 2, "num_cpus": 1, "num_gpus": 0, "tick_s": 0.25},
        "serve": {},
    }
    for name, values in sections.items():
        data[name] = {**data.get(name, {}), **values}
    return SpecFlipConfig.parse(data, source="cpu default")
