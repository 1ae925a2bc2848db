"""specflip app configuration: the one pydantic model users write as YAML (or pass as Serve args).

Every field has a description and a default; a bad value fails at start with a one-line
reason (`ConfigError`). Nothing mutates a validated config: models are frozen.
"""

from __future__ import annotations

import enum
import os
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from patched_worker.state import Strategy, SwitchConfig

__all__ = [
    "ConfigError", "Device", "EngineSettings", "ModelSettings", "PolicySettings", "ReplicaSettings",
    "ServeSettings", "SpecFlipConfig", "SpeculationSettings", "load_config",
]


class ConfigError(ValueError):
    """A config that cannot run; str(e) is one line saying what and where."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", use_enum_values=False)


class Device(enum.StrEnum):
    CUDA = "cuda"
    CPU = "cpu"


class ModelSettings(_Frozen):
    id: str = Field("specflip", description="Model name clients pass as `model` in OpenAI requests.")
    path: str = Field(..., description="Target model directory (HF format) on every replica's filesystem.")
    draft_path: str | None = Field(None, description="EAGLE-3 draft directory; None serves without speculation.")
    tokenizer_path: str | None = Field(None, description="Tokenizer directory if not the target's.")


class SpeculationSettings(_Frozen):
    steps: int = Field(3, ge=1, le=16, description="Draft steps per verify while ON.")
    topk: int = Field(1, ge=1, le=16, description="Draft branches per step (1 = chain).")
    draft_tokens: int = Field(4, ge=2, le=256, description="Tokens verified per step while ON.")
    strategy: Strategy = Field(Strategy.WARM_KV, description="Draft upkeep while OFF: warm_kv | full_extend | cold.")
    start_enabled: bool = Field(True, description="Mode of a replica before the policy's first decision.")

    @model_validator(mode="after")
    def _shape(self) -> SpeculationSettings:
        if self.topk == 1 and self.draft_tokens != self.steps + 1:
            raise ValueError(f"with topk=1, draft_tokens must be steps+1 (= {self.steps + 1}), got {self.draft_tokens}")
        if self.draft_tokens > self.steps * self.topk + 1:
            raise ValueError(f"draft_tokens {self.draft_tokens} exceeds steps*topk+1 = {self.steps * self.topk + 1}")
        return self

    def switch_config(self) -> SwitchConfig:
        return SwitchConfig(strategy=self.strategy, start_enabled=self.start_enabled)


class PolicySettings(_Frozen):
    enabled: bool = Field(True, description="Run the central policy; false keeps every replica at start_enabled "
                                            "unless overridden.")
    rule: str = Field("threshold", pattern="^(threshold|goodput)$", description="Decision rule: threshold | goodput.")
    load_metric: str = Field("running_plus_waiting", pattern="^(running_plus_waiting|running|waiting)$",
                             description="What counts as a replica's load.")
    high: float = Field(16, gt=0, description="threshold: turn speculation OFF when load >= high.")
    low: float = Field(6, ge=0, description="threshold: turn speculation back ON when load <= low.")
    dwell_s: float = Field(5.0, ge=0, description="Minimum seconds between two flips of one replica.")
    margin: float = Field(0.05, ge=0, description="goodput: flip only if the predicted gain exceeds this fraction.")
    tick_s: float = Field(0.5, gt=0, le=60, description="Seconds between a replica's load reports.")
    max_flips_per_tick: int = Field(1, ge=1, description="Fleet limit: replicas flipped per policy tick.")
    min_on_replicas: int = Field(0, ge=0, description="Keep at least this many replicas ON for latency traffic.")
    stale_after_s: float = Field(5.0, gt=0, description="A replica whose last report is older is never flipped.")
    ttl_s: float = Field(30.0, gt=0, description="Forget a replica that has not reported for this long.")
    fallback_after_ticks: int = Field(3, ge=1, description="Replica decides locally after this many failed reports.")
    actor_name: str = Field("specflip-policy", description="Name of the policy actor in the Ray namespace.")

    @model_validator(mode="after")
    def _band(self) -> PolicySettings:
        if self.low >= self.high:
            raise ValueError(f"low ({self.low}) must be below high ({self.high})")
        return self


class EngineSettings(_Frozen):
    device: Device = Field(Device.CUDA, description="cuda (one GPU per replica) or cpu (tests, demos).")
    dtype: str = Field("auto", description="Model dtype; cpu runs float32.")
    attention_backend: str | None = Field(None, description="None picks flashinfer on cuda, intel_amx/torch_native "
                                                            "on cpu.")
    max_running_requests: int = Field(128, ge=1, description="Decode batch cap (SGLang defaults to 48 with "
                                                             "speculation).")
    max_total_tokens: int | None = Field(None, ge=256, description="KV cache size in tokens; None = from memory.")
    mem_fraction_static: float | None = Field(None, gt=0, lt=1, description="GPU memory fraction for weights + KV.")
    disable_cuda_graph: bool = Field(False, description="Run eager (always true on cpu).")
    load_format: str | None = Field(None, description="'dummy' for random weights (benchmarks).")
    extra: dict[str, Any] = Field(default_factory=dict, description="Other sglang.Engine keywords, passed as-is.")


class ReplicaSettings(_Frozen):
    count: int = Field(2, ge=1, le=1024, description="Number of engine replicas.")
    num_gpus: float = Field(1.0, ge=0, description="GPUs per replica (cuda).")
    num_cpus: float = Field(1.0, ge=0, description="CPUs per replica.")


class ServeSettings(_Frozen):
    route_prefix: str = Field("/", pattern="^/", description="HTTP route prefix of the OpenAI API.")
    host: str = Field("0.0.0.0", description="HTTP bind address.")
    port: int = Field(8000, ge=1, le=65535, description="HTTP port (API, /specflip control and /metrics).")
    control_token: str | None = Field(None, description="Bearer token for control endpoints; falls back to "
                                                        "$SPECFLIP_CONTROL_TOKEN; control is refused if unset.")

    def resolved_token(self) -> str | None:
        return self.control_token or os.environ.get("SPECFLIP_CONTROL_TOKEN") or None


class SpecFlipConfig(_Frozen):
    model: ModelSettings
    speculation: SpeculationSettings = Field(default_factory=SpeculationSettings)
    policy: PolicySettings = Field(default_factory=PolicySettings)
    engine: EngineSettings = Field(default_factory=EngineSettings)
    replicas: ReplicaSettings = Field(default_factory=ReplicaSettings)
    serve: ServeSettings = Field(default_factory=ServeSettings)

    @classmethod
    def parse(cls, data: dict[str, Any], source: str = "config") -> SpecFlipConfig:
        """Validate a plain dict; errors become one-line ConfigError messages."""
        try:
            return cls.model_validate(data)
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "(top level)"
            more = f" (+{e.error_count() - 1} more)" if e.error_count() > 1 else ""
            raise ConfigError(f"{source}: {where}: {first['msg']}{more}") from None


def load_config(path: str) -> SpecFlipConfig:
    """Read a YAML file into a validated config."""
    try:
        with open(path) as f:
            data = yaml.safe_load(f) or {}
    except OSError as e:
        raise ConfigError(f"{path}: cannot read ({e.strerror})") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return SpecFlipConfig.parse(data, source=path)
