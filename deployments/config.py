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

from deployments.routing.settings import RoutingSettings
from patched_worker.state import Strategy, SwitchConfig
from policy.types import PolicyConfig, PolicySettings, Rule

__all__ = [
    "ConfigError",
    "DIRECT_STREAMING_ENV",
    "FORWARD_BODY",
    "POLICY_NAMESPACE",
    "required_env",
    "serve_env",
    "Device",
    "EngineSettings",
    "ModelSettings",
    "PolicySection",
    "ReplicaSettings",
    "RoutingSettings",
    "ServeSettings",
    "SpecFlipConfig",
    "SpeculationSettings",
    "load_config",
]


class ConfigError(ValueError):
    """A config that cannot run; str(e) is one line saying what and where."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", use_enum_values=False)


class Device(enum.StrEnum):
    CUDA = "cuda"
    CPU = "cpu"


# what every process that builds a CPU engine needs before sglang's kernels load (patched_worker.cpu)
CPU_ENV = {"SPECFLIP_CPU": "1", "SGLANG_USE_CPU_ENGINE": "1", "TORCHDYNAMO_DISABLE": "1"}


class ModelSettings(_Frozen):
    id: str = Field(default="specflip", description="Model name clients pass as `model` in OpenAI requests.")
    path: str = Field(..., description="Target model directory (HF format) on every replica's filesystem.")
    draft_path: str | None = Field(
        default=None, description="EAGLE-3 draft directory; None serves without speculation."
    )
    tokenizer_path: str | None = Field(default=None, description="Tokenizer directory if not the target's.")


class SpeculationSettings(_Frozen):
    steps: int = Field(default=3, ge=1, le=16, description="Draft steps per verify while ON.")
    topk: int = Field(default=1, ge=1, le=16, description="Draft branches per step (1 = chain).")
    draft_tokens: int = Field(default=4, ge=2, le=256, description="Tokens verified per step while ON.")
    strategy: Strategy = Field(
        default=Strategy.WARM_KV, description="Draft upkeep while OFF: warm_kv | full_extend | cold."
    )
    start_enabled: bool = Field(default=True, description="Mode of a replica until the policy first decides.")

    @model_validator(mode="after")
    def _shape(self) -> SpeculationSettings:
        if self.topk == 1 and self.draft_tokens != self.steps + 1:
            raise ValueError(
                f"with topk=1, draft_tokens must be steps+1 (= {self.steps + 1}), got {self.draft_tokens}"
            )
        # SGLang's draft tree: topk candidates at the first step, topk*topk at each later one, plus the root
        tree = self.topk + (self.steps - 1) * self.topk * self.topk + 1
        if self.draft_tokens > tree:
            raise ValueError(
                f"draft_tokens {self.draft_tokens} exceeds the draft tree of steps={self.steps}, topk={self.topk} "
                f"({tree} nodes)"
            )
        return self

    def switch_config(self) -> SwitchConfig:
        return SwitchConfig(strategy=self.strategy, start_enabled=self.start_enabled)


class PolicySection(PolicySettings):
    """The `policy` section: every policy setting (declared once, on policy.types.PolicySettings,
    with its bounds) plus the app's own two keys."""

    enabled: bool = Field(
        default=True,
        description="Run the central policy; false keeps every replica at "
        "speculation.start_enabled unless an operator overrides it.",
    )
    actor_name: str = Field(
        default="specflip-policy",
        min_length=1,
        description="Name of the policy actor in the Serve namespace.",
    )

    def to_policy_config(self, batch_cap: int | None = None) -> PolicyConfig:
        """The policy package's PolicyConfig; with `enabled: false` a rule that never proposes a flip."""
        kw: dict[str, Any] = {name: getattr(self, name) for name in PolicySettings.model_fields}
        if batch_cap is not None:
            kw["batch_cap"] = batch_cap
        if not self.enabled:
            kw.update(rule=Rule.HOLD, min_on_replicas=0)
        return PolicyConfig(**kw)


class EngineSettings(_Frozen):
    device: Device = Field(default=Device.CUDA, description="cuda (a GPU per replica) or cpu (tests, demos).")
    dtype: str = Field(default="auto", description="Model dtype; cpu runs float32.")
    attention_backend: str | None = Field(
        default=None, description="None picks flashinfer on cuda, intel_amx/torch_native on cpu."
    )
    max_running_requests: int = Field(
        default=128, ge=1, description="Decode batch cap (SGLang defaults to 48 with speculation)."
    )
    max_total_tokens: int | None = Field(
        default=None, ge=256, description="KV cache size in tokens; None = from memory (cpu: 8192)."
    )
    context_length: int | None = Field(
        default=None,
        ge=16,
        description="Max prompt + output tokens; None = the model's. Requests beyond it get a 400.",
    )
    mem_fraction_static: float | None = Field(
        default=None, gt=0, lt=1, description="GPU memory fraction for weights + KV."
    )
    disable_cuda_graph: bool = Field(default=False, description="Run eager (always true on cpu).")
    load_format: str | None = Field(default=None, description="'dummy' for random weights (benchmarks).")
    extra: dict[str, Any] = Field(
        default_factory=dict, description="Other sglang.Engine keywords, passed as-is."
    )


class ReplicaSettings(_Frozen):
    count: int = Field(default=2, ge=1, le=1024, description="Engine replicas (fixed; no autoscaling).")
    num_gpus: float = Field(default=1.0, ge=0, description="GPUs per replica (cuda); ignored on cpu.")
    num_cpus: float = Field(default=1.0, ge=0, description="CPUs per replica (Ray resource).")
    max_ongoing_requests: int = Field(
        default=256,
        ge=1,
        description="Requests Ray Serve sends one replica at once; the engine queues what it cannot run.",
    )
    tick_s: float = Field(
        default=0.5,
        gt=0,
        le=60,
        description="Seconds between a replica's load reports to the policy (and mode updates it applies).",
    )
    report_timeout_s: float = Field(default=1.0, gt=0, description="Timeout of a report to the policy actor.")
    fallback_after_ticks: int = Field(
        default=3,
        ge=1,
        description="After this many failed reports in a row the replica decides locally on its own load.",
    )
    health_timeout_s: float = Field(
        default=10.0,
        gt=0,
        description="Engine probe timeout of a health check (Ray Serve restarts a replica that fails it).",
    )
    control_timeout_s: float = Field(
        default=10.0,
        gt=0,
        description="How long a replica waits for its engine to answer a control call (state read, "
        "speculation switch); one that times out is logged, counted (control_timeouts in "
        "/specflip/status) and retried at the next tick.",
    )
    env: dict[str, str] = Field(
        default_factory=dict,
        description="Environment variables of every replica process and the SGLang processes it starts "
        "(Ray runtime_env), e.g. SGLANG_SIMULATE_ACC_LEN for benchmarks with random weights.",
    )
    warm_up: bool = Field(
        default=True,
        description="Before a replica takes traffic, run a few requests through every path it will run "
        "(prefill, speculative decode, OFF decode, the re-enable resync), so kernels compiled on first "
        "use are ready; a replica is not ready until this finished.",
    )


# What the app needs in the environment of every Ray process (Serve reads it at import): Serve's
# direct streaming with HAProxy in front of the replicas' own HTTP servers, and the class header
# forwarded to the ingress request router as Serve's session id. (Ray Serve's throughput settings
# go to the replicas alone: deployments.app.REPLICA_ENV.)
DIRECT_STREAMING_ENV = {
    "RAY_SERVE_ENABLE_HA_PROXY": "1",
    "RAY_SERVE_LLM_ENABLE_DIRECT_STREAMING": "1",
    # the one request header HAProxy forwards to the request router: the class header (routing.class_header)
    "RAY_SERVE_SESSION_ID_HEADER_KEY": "x-specflip-class",
}
# With routing.class_routing only: HAProxy waits for each POST's body and forwards it to the ingress
# request router, which parses it (the class from body fields, prefix affinity from the prompt).
# Ray leaves it off by default because buffering the body adds to the time to first token; the
# default router (deployments.routing.power_of_two, by load) needs no body.
FORWARD_BODY = "RAY_SERVE_INGRESS_REQUEST_ROUTER_FORWARD_BODY"


class ServeSettings(_Frozen):
    # route_prefix, host and port apply where specflip starts Serve itself (`specflip serve`, the demo);
    # under `serve run/deploy` a Serve config's route_prefix and http_options decide
    route_prefix: str = Field(
        default="/", pattern="^/", description="HTTP route prefix of the app (API, /specflip/*, /metrics)."
    )
    host: str = Field(default="0.0.0.0", description="HTTP bind address (specflip serve).")
    port: int = Field(
        default=8000,
        ge=1,
        le=65535,
        description="HTTP port of the API, /specflip/* and /metrics (specflip serve).",
    )
    stream_batching_interval_ms: float = Field(
        default=50.0,
        ge=0,
        le=1000,
        description="Streams, while the replica's event loop is behind (stream_batching_lag_ms): at "
        "most one packet per this many ms with every token generated meanwhile (fewer HTTP writes "
        "from the replica's one Python process, which also runs the engine's tokenizer manager; Ray "
        "Serve LLM's default is 50). The first and the last packet go at once; 0 sends every chunk "
        "alone at every load.",
    )
    stream_batching_lag_ms: float = Field(
        default=5.0,
        ge=0,
        le=1000,
        description="Streams: each token leaves as soon as it is made, as SGLang's own server sends "
        "it, while the replica's event loop runs at most this far behind (how late a 10-ms timer "
        "fires, averaged); above it, packets are coalesced per stream_batching_interval_ms. 0 "
        "coalesces at every load.",
    )
    request_report: bool = Field(
        default=True,
        description="Chat and completions responses carry `usage.specflip`: the speculation modes the "
        "request ran under, its accept length (tokens per decode step) and whether the replica "
        "flipped while it ran (docs/routing.md); false leaves OpenAI's usage fields alone.",
    )
    control_token: str | None = Field(
        default=None,
        description="Bearer token for control endpoints; falls back to "
        "$SPECFLIP_CONTROL_TOKEN; control is refused if unset.",
    )

    cors_allow_origins: tuple[str, ...] = Field(
        default=("*",),
        description="Origins browsers may call the API from ('*': any); never with credentials "
        "(cookies): clients authenticate with a bearer token. [] turns cross-origin access off.",
    )
    graceful_shutdown_s: float = Field(
        default=30.0,
        ge=0,
        le=3600,
        description="On shutdown or redeploy, how long a replica keeps serving "
        "its in-flight requests, streams included, before it is stopped.",
    )

    @model_validator(mode="before")
    @classmethod
    def _no_data_path(cls, data: Any) -> Any:
        if isinstance(data, dict) and "data_path" in data:
            raise ValueError(
                "data_path was removed: every replica serves the API itself behind Serve's HAProxy "
                "(the one data path, docs/architecture.md); delete the key"
            )
        return data

    # a request's whole cost, bounded before anything tokenizes it (deployments.http.limits)
    max_body_bytes: int = Field(
        default=16 * 1024 * 1024,
        ge=64 * 1024,
        le=1024 * 1024 * 1024,
        description="Raw bytes of one chat or completions request body; more is a 413, answered as "
        "soon as that many arrived, before anything parses it. The default holds max_input_bytes of "
        "text even JSON-escaped to three times its size (non-ASCII as \\u escapes), with room for "
        "tools and schemas.",
    )
    max_prompts: int = Field(
        default=64,
        ge=1,
        le=100_000,
        description="Prompts one /v1/completions request may carry (a `prompt` list of texts or of "
        "token-id lists); more is a 400 naming `prompt`.",
    )
    max_messages: int = Field(
        default=2048,
        ge=1,
        le=1_000_000,
        description="Messages one /v1/chat/completions request may carry (the chat template renders "
        "each one before anything is tokenized); more is a 400 naming `messages`.",
    )
    max_input_bytes: int = Field(
        default=4 * 1024 * 1024,
        ge=1024,
        description="UTF-8 bytes of text one request may carry across all its prompts (completions) "
        "or all its messages and tool definitions (chat); more is a 413, answered before anything "
        "tokenizes it. Each prompt must also fit the model's context by its size.",
    )
    max_input_token_ids: int = Field(
        default=131_072,
        ge=1,
        description="Token ids one /v1/completions request may carry across all its token-id prompts; "
        "more is a 413 naming `prompt`.",
    )

    def resolved_token(self) -> str | None:
        return self.control_token or os.environ.get("SPECFLIP_CONTROL_TOKEN") or None


# The Ray namespace of the policy actor: Serve's own, where the replicas and Ray's request router
# live (a detached actor created from a replica would otherwise land in the app's anonymous
# namespace, where nothing else finds it)
POLICY_NAMESPACE = "serve"


def required_env(config: SpecFlipConfig) -> dict[str, str]:
    """What an app built from `config` cannot run without, in every Ray process and the one
    building it: DIRECT_STREAMING_ENV with the config's class header, and the body forwarded to
    the request router when class routing is on (without it, it would route on no body)."""
    env = {**DIRECT_STREAMING_ENV, "RAY_SERVE_SESSION_ID_HEADER_KEY": config.routing.class_header}
    return {**env, FORWARD_BODY: "1"} if config.class_routing else env


def serve_env(config: SpecFlipConfig) -> dict[str, str]:
    """What `specflip serve` sets before it starts Ray: `required_env`, and the forwarding switched
    off ("0") without class routing, so a forwarding exported for another app costs this one nothing."""
    return {FORWARD_BODY: "0", **required_env(config)}


class SpecFlipConfig(_Frozen):
    model: ModelSettings = Field(..., description="What to serve.")
    speculation: SpeculationSettings = Field(
        default_factory=SpeculationSettings,
        description="EAGLE-3 shape while ON and the draft upkeep while OFF.",
    )
    policy: PolicySection = Field(default_factory=PolicySection, description="The central ON/OFF policy.")
    engine: EngineSettings = Field(
        default_factory=EngineSettings, description="SGLang engine of each replica."
    )
    replicas: ReplicaSettings = Field(
        default_factory=ReplicaSettings, description="How many, and their resources and ticks."
    )
    serve: ServeSettings = Field(default_factory=ServeSettings, description="HTTP side: prefix, port, token.")
    routing: RoutingSettings = Field(
        default_factory=RoutingSettings, description="How Serve picks a replica for a request."
    )

    @model_validator(mode="after")
    def _placement(self) -> SpecFlipConfig:
        if self.engine.device is Device.CUDA and self.replicas.num_gpus <= 0:
            raise ValueError(
                "engine.device is cuda but replicas.num_gpus is 0: set num_gpus > 0, or device: cpu"
            )
        if self.policy.min_on_replicas > self.replicas.count:
            raise ValueError(
                f"policy.min_on_replicas ({self.policy.min_on_replicas}) exceeds replicas.count "
                f"({self.replicas.count})"
            )
        return self

    @property
    def class_routing(self) -> bool:
        """specflip's request router is in use (configured, and replicas can speculate)."""
        return self.routing.class_routing and self.speculative

    @property
    def speculative(self) -> bool:
        """True when a draft is configured (the engine runs EAGLE-3 and the policy may flip it)."""
        return self.model.draft_path is not None

    def policy_config(self) -> PolicyConfig:
        return self.policy.to_policy_config(batch_cap=self.engine.max_running_requests)

    @classmethod
    def parse(cls, data: dict[str, Any], source: str = "config") -> SpecFlipConfig:
        """Validate a plain dict; errors become one-line ConfigError messages."""
        try:
            return cls.model_validate(data)
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "(top level)"
            more = f" (+{e.error_count() - 1} more)" if e.error_count() > 1 else ""
            msg = str(first["msg"]).removeprefix("Value error, ")
            raise ConfigError(f"{source}: {where}: {msg}{more}") from None


def _relative_to(base: str, holder: Any, keys: tuple[str, ...]) -> Any:
    if not isinstance(holder, dict):
        return holder
    out = dict(holder)
    for key in keys:
        value = out.get(key)
        if isinstance(value, str) and value and not os.path.isabs(value) and "://" not in value:
            out[key] = os.path.normpath(os.path.join(base, value))
    return out


def _resolve_paths(data: dict[str, Any], base: str) -> dict[str, Any]:
    """Relative file paths in a config file are relative to the file (replicas run elsewhere)."""
    out = dict(data)
    if "model" in data:
        out["model"] = _relative_to(base, data["model"], ("path", "draft_path", "tokenizer_path"))
    engine = data.get("engine")
    if isinstance(engine, dict) and isinstance(engine.get("extra"), dict):
        extra = _relative_to(base, engine["extra"], ("speculative_adaptive_config",))
        out["engine"] = {**engine, "extra": extra}
    return out


def load_config(path: str) -> SpecFlipConfig:
    """Read a YAML file into a validated config; relative file paths are taken from the file's folder."""
    try:
        with open(path) as f:
            data = yaml.safe_load(f) or {}
    except OSError as e:
        raise ConfigError(f"{path}: cannot read ({e.strerror})") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    data = _resolve_paths(data, os.path.dirname(os.path.abspath(path)))
    return SpecFlipConfig.parse(data, source=path)
