"""The one way a replica gets its engine: an `EngineFactory` called with the app config.

The default factory builds `patched_worker.SpecFlipEngine` in the replica's own process
(cpu or cuda). `build_app(..., engine_factory=...)` is the only place to swap it; tests use
that to inject failures.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from deployments.config import ConfigError, Device, SpecFlipConfig
from patched_worker.state import SpeculationState

__all__ = ["EngineFactory", "ReplicaEngine", "build_specflip_engine", "engine_kwargs"]


class ReplicaEngine(Protocol):
    """What the replica uses of an engine: sglang.Engine's surface plus the speculation switch."""

    tokenizer_manager: Any
    server_args: Any

    async def async_generate(self, *args: Any, **kwargs: Any) -> Any: ...

    def set_speculation(self, enabled: bool) -> None: ...

    def get_speculation_state(self) -> SpeculationState: ...

    def shutdown(self) -> None: ...


EngineFactory = Callable[[SpecFlipConfig], ReplicaEngine]


def engine_kwargs(config: SpecFlipConfig) -> dict[str, Any]:
    """sglang.Engine keywords for this config. On cpu, call only in the process that builds the engine."""
    m, e, s = config.model, config.engine, config.speculation
    common: dict[str, Any] = {"max_running_requests": e.max_running_requests}
    for key, value in (
        ("tokenizer_path", m.tokenizer_path),
        ("context_length", e.context_length),
        ("load_format", e.load_format),
    ):
        if value is not None:
            common[key] = value
    if e.device is Device.CPU:
        from patched_worker.engine import cpu_engine_kwargs

        kw = cpu_engine_kwargs(
            m.path,
            m.draft_path,
            steps=s.steps,
            topk=s.topk,
            draft_tokens=s.draft_tokens,
            max_total_tokens=e.max_total_tokens or 8192,
            **common,
        )
        if e.attention_backend is not None:
            kw["attention_backend"] = e.attention_backend
    else:
        kw = dict(
            model_path=m.path,
            dtype=e.dtype,
            disable_cuda_graph=e.disable_cuda_graph,
            skip_server_warmup=True,
            log_level="error",
            # the sampling backend that takes per-request seeds (patched_worker.seeding); CPU uses it too
            sampling_backend="pytorch",
            **common,
        )
        optional: tuple[tuple[str, Any], ...] = (
            ("attention_backend", e.attention_backend),
            ("max_total_tokens", e.max_total_tokens),
            ("mem_fraction_static", e.mem_fraction_static),
        )
        for key, value in optional:
            if value is not None:
                kw[key] = value
        if m.draft_path:
            kw.update(
                speculative_algorithm="EAGLE3",
                speculative_draft_model_path=m.draft_path,
                speculative_num_steps=s.steps,
                speculative_eagle_topk=s.topk,
                speculative_num_draft_tokens=s.draft_tokens,
            )
    kw.update(e.extra)
    return kw


@contextlib.contextmanager
def _no_signal_handlers() -> Iterator[None]:
    """sglang.Engine installs signal handlers, which only works on the main thread; a Serve
    replica constructor is not on it (Ray's SGLangServer does the same)."""
    original = signal.signal
    signal.signal = lambda sig, action: signal.SIG_DFL  # type: ignore[assignment]
    try:
        yield
    finally:
        signal.signal = original


def _check_paths(config: SpecFlipConfig) -> None:
    for field, path in (("model.path", config.model.path), ("model.draft_path", config.model.draft_path)):
        if path is not None and not os.path.isdir(path):
            raise ConfigError(f"{field}: {path} is not a directory on this node ({os.uname().nodename})")


def build_specflip_engine(config: SpecFlipConfig) -> ReplicaEngine:
    """The default factory: the patched in-process SGLang engine (EAGLE-3 when a draft is set)."""
    _check_paths(config)
    if config.engine.device is Device.CPU:
        from patched_worker.cpu.shim import enable

        enable()  # before sglang's kernel package is imported in this process
    from patched_worker.engine import SpecFlipEngine

    kwargs = engine_kwargs(config)
    with _no_signal_handlers():
        engine: ReplicaEngine = SpecFlipEngine(
            switch=config.speculation.switch_config(),
            control_timeout_s=config.replicas.control_timeout_s,
            **kwargs,
        )
    return engine
