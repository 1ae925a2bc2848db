"""What one Locust run needs to know, as one typed record with three sources.

Precedence (later wins): the defaults below < a JSON file (`--lt-config FILE` or
`SPECFLIP_LT_CONFIG`) < one flag per field (`--lt-<field>`, e.g. `--lt-api
completions`, or the environment variable `SPECFLIP_LT_<FIELD>`). The sweep
runner writes the JSON file; people running Locust by hand use the flags.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Literal, get_args

from deployments.config import ConfigError  # the one config error: one line, what and where
from loadtests.locust.shapes import Schedule, parse_shape
from loadtests.metrics import Slo

__all__ = ["LoadConfig", "flag_name", "load_config"]

Api = Literal["chat", "completions"]
PromptSet = Literal["synthetic", "corpus"]


@dataclass(frozen=True)
class LoadConfig:
    """Settings of one Locust run; each field is explained in `HELP`."""

    model: str = ""
    api: Api = "chat"
    prompt_set: PromptSet = "synthetic"
    input_len: int = 128
    output_len: int = 128
    output_spread: float = 0.0
    start_stagger_s: float = 0.0
    num_prompts: int = 256
    seed: int = 0
    corpus_dir: str = ""
    temperature: float = 0.0
    ignore_eos: bool = True
    shape: str = "fixed:users=1,duration=30"
    out_dir: str = "out/loadtest"
    slo_ttft_ms: float | None = 2000.0
    slo_tpot_ms: float | None = 100.0
    request_timeout_s: float = 600.0
    itl_events: bool = False
    stream: bool = True

    def __post_init__(self) -> None:
        if self.api not in get_args(Api):
            raise ConfigError(f"api must be chat or completions, got {self.api!r}")
        if self.prompt_set not in get_args(PromptSet):
            raise ConfigError(f"prompt_set must be synthetic or corpus, got {self.prompt_set!r}")
        for name in ("input_len", "output_len", "num_prompts"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 0.0 <= self.output_spread < 1.0:
            raise ConfigError(f"output_spread must be in [0, 1), got {self.output_spread}")
        if self.start_stagger_s < 0:
            raise ConfigError(f"start_stagger_s must be >= 0, got {self.start_stagger_s}")
        parse_shape(self.shape)  # fail here, not at the first tick

    @property
    def schedule(self) -> Schedule:
        return parse_shape(self.shape)

    @property
    def slo(self) -> Slo:
        return Slo(ttft_ms=self.slo_ttft_ms, tpot_ms=self.slo_tpot_ms)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2)

    def replace(self, **changes: Any) -> LoadConfig:
        return dataclasses.replace(self, **changes)


HELP: dict[str, str] = {
    "model": "model id sent in requests ('' = the first id from /v1/models)",
    "api": "chat (/v1/chat/completions) or completions (/v1/completions)",
    "prompt_set": "synthetic (common words) or corpus (local text files)",
    "input_len": "prompt length in words (~tokens, see loadtests/locust/prompts.py)",
    "output_len": "max_tokens per request (the mean, with output_spread)",
    "output_spread": "max_tokens drawn per request uniformly from output_len x [1 - s, 1 + s] "
    "(0 = all equal; > 0 keeps users from finishing in lockstep waves)",
    "start_stagger_s": "each user waits a random 0..s seconds before its first request",
    "num_prompts": "prompts in the set (cycled)",
    "seed": "seed of the prompt set",
    "corpus_dir": "folder of .py/.txt files for the corpus set ('' = the Python stdlib)",
    "temperature": "sampling temperature (0 = greedy)",
    "ignore_eos": "ask the server to ignore EOS so outputs reach output_len",
    "shape": "load shape spec, e.g. fixed:users=4,duration=30 (loadtests/locust/shapes.py)",
    "out_dir": "folder for requests.jsonl and summary.json",
    "slo_ttft_ms": "TTFT SLO for goodput in ms ('none' = not checked)",
    "slo_tpot_ms": "TPOT SLO for goodput in ms ('none' = not checked)",
    "request_timeout_s": "per-request timeout in seconds",
    "itl_events": "also fire one Locust ITL event per inter-chunk gap (costs load-generator CPU; "
    "the JSONL records keep every gap either way)",
    "stream": "stream the response (SSE); false sends plain requests (no TTFT/TPOT, e2e only)",
}


def flag_name(field_name: str) -> str:
    return "--lt-" + field_name.replace("_", "-")


def _convert(name: str, default: Any, value: Any) -> Any:
    if value is None or not isinstance(value, str):
        return value
    try:
        if isinstance(default, bool):
            if value.lower() not in ("1", "0", "true", "false", "yes", "no"):
                raise ValueError(value)
            return value.lower() in ("1", "true", "yes")
        if name.startswith("slo_"):
            return None if value.lower() in ("none", "") else float(value)
        if isinstance(default, int):
            return int(value)
        if isinstance(default, float):
            return float(value)
    except ValueError as e:
        raise ConfigError(f"{flag_name(name)}: cannot use {value!r}") from e
    return value


def load_config(json_path: str | Path | None = None, overrides: dict[str, Any] | None = None) -> LoadConfig:
    """Defaults < JSON file < overrides (strings from flags/env are converted)."""
    defaults = LoadConfig()
    values: dict[str, Any] = {}
    if json_path:
        try:
            data = json.loads(Path(json_path).read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise ConfigError(f"cannot read load-test config {json_path}: {e}") from e
        known = {f.name for f in fields(LoadConfig)}
        unknown = set(data) - known
        if unknown:
            raise ConfigError(f"unknown keys in {json_path}: {sorted(unknown)}")
        values.update(data)
    for key, value in (overrides or {}).items():
        if value is not None:
            values[key] = _convert(key, getattr(defaults, key), value)
    return LoadConfig(**values)
