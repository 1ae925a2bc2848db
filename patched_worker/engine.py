"""`SpecFlipEngine`: an `sglang.Engine` whose scheduler runs the patched EAGLE-3 worker.

SGLang starts its scheduler in a spawned process, where a patch made in this process
does not exist. The engine points `run_scheduler_process_func` at a module-level
function that calls `install()` there first, then runs SGLang's scheduler.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from typing import Any

from sglang.srt.entrypoints.engine import Engine
from sglang.srt.utils import kill_process_tree

from patched_worker.control import ControlChannel
from patched_worker.errors import SpecFlipControlTimeout, SpeculationRpcError, UnsupportedSetup
from patched_worker.install import run_scheduler_process
from patched_worker.setup_check import check_engine_setup, check_strategy, cold_allowed
from patched_worker.state import OffPrefill, SpeculationState, Strategy, SwitchConfig
from patched_worker.version import check_sglang_version

__all__ = [
    "SpecFlipControlTimeout",
    "SpecFlipEngine",
    "SpeculationRpcError",
    "UnsupportedSetup",
    "cpu_engine_kwargs",
]


class SpecFlipEngine(Engine):
    """sglang.Engine + `set_speculation(enabled)` / `get_speculation_state()`.

    switch: scheduler-side settings (strategy while OFF, initial mode).
    control_timeout_s: how long a control call waits for the scheduler's reply
    (SpecFlipControlTimeout after that). Every other keyword goes to `sglang.Engine` unchanged.
    Setups the switch does not support are refused here, before anything starts (UnsupportedSetup).
    """

    # sglang.Engine's attributes this class reads and resets (SGLang ships no types): its zmq socket
    # to the scheduler (None when it has none) and the weight-cache daemons it may start
    send_to_rpc: Any
    _weight_cache_daemon_procs: list[Any]

    def __init__(
        self, switch: SwitchConfig | None = None, *, control_timeout_s: float = 60.0, **engine_kwargs
    ):
        check_sglang_version()
        switch = switch or SwitchConfig()
        if cold_allowed(switch):  # the environment's benchmark flag travels in the config
            switch = dataclasses.replace(switch, allow_cold=True)
        check_engine_setup(engine_kwargs, switch)
        self.switch_config = switch
        self.run_scheduler_process_func = functools.partial(
            run_scheduler_process, self.switch_config.to_json()
        )
        self._control: ControlChannel | None = None
        super().__init__(**engine_kwargs)
        if self.send_to_rpc is not None:
            self._control = ControlChannel(self.send_to_rpc, control_timeout_s)

    def shutdown(self) -> None:
        """Stop this engine's own scheduler and detokenizer processes only.

        sglang.Engine.shutdown kills every child of the calling process: with two engines in one
        process (tests, a host serving two models) that takes the other engine's scheduler down,
        and its watchdog then SIGQUITs the whole process. Idempotent (it also runs at exit)."""
        if getattr(self, "_specflip_closed", False):
            return
        manager = getattr(self, "tokenizer_manager", None)
        watchdog = getattr(manager, "_subprocess_watchdog", None)
        own = list(getattr(watchdog, "_processes", None) or [])
        if not own or watchdog is None:  # not started this far (or a layout we do not know): SGLang's
            super().shutdown()  # own cleanup
            self._specflip_closed = True
            return
        watchdog.stop()
        daemons = getattr(self, "_weight_cache_daemon_procs", None)
        if daemons:
            self._terminate_weight_cache_daemons(daemons)
            self._weight_cache_daemon_procs = []
        self._control = None  # control calls now say the engine is not running
        if getattr(self, "send_to_rpc", None) is not None:
            self.send_to_rpc.close(linger=0)
            self.send_to_rpc = None
        for proc in own:
            kill_process_tree(proc.pid, include_parent=True, wait_timeout=60)
        self._specflip_closed = True

    def _specflip_rpc(self, call: str, method: str, timeout_s: float | None = None, **params) -> dict:
        if self._control is None:
            raise SpeculationRpcError(
                "speculation control is only reachable from node rank 0, on an engine that is running"
            )
        return self._control.call(call, method, timeout_s, **params)

    def set_speculation(self, enabled: bool, *, timeout_s: float | None = None) -> None:
        """Ask for speculation ON or OFF; applied at the next decode step (idempotent)."""
        self._specflip_rpc("set_speculation", "specflip_set_speculation", timeout_s, enabled=bool(enabled))

    def set_strategy(self, strategy: Strategy, *, timeout_s: float | None = None) -> None:
        """Change what the draft does while OFF (takes effect at the next OFF step).

        Refuses (UnsupportedSetup) `cold` outside benchmarks and `warm_kv` for a draft it cannot serve."""
        strategy = Strategy(strategy)
        check_strategy(strategy, self.switch_config.allow_cold)
        self._specflip_rpc("set_strategy", "specflip_configure", timeout_s, strategy=strategy.value)

    def set_off_prefill(self, mode: OffPrefill, *, timeout_s: float | None = None) -> None:
        """How prefills keep the draft K/V while OFF under warm_kv: `kv_write` (default: no draft forward)
        or `draft_forward` (upstream's draft prefill, kept for comparison)."""
        self._specflip_rpc(
            "set_off_prefill", "specflip_configure", timeout_s, off_prefill=OffPrefill(mode).value
        )

    def schedule_flips(self, steps: list[int], *, timeout_s: float | None = None) -> None:
        """Toggle speculation at these decode steps from now (1 = next step); replaces earlier ones
        (an empty list cancels the flips still pending)."""
        if steps and min(steps) < 1:
            raise ValueError("schedule_flips needs step offsets >= 1")
        flip_at = ",".join(str(int(s)) for s in steps) or "none"
        self._specflip_rpc("schedule_flips", "specflip_configure", timeout_s, flip_at=flip_at)

    def get_speculation_state(self, *, timeout_s: float | None = None) -> SpeculationState:
        return SpeculationState.from_json(
            json.dumps(self._specflip_rpc("get_speculation_state", "specflip_state", timeout_s))
        )


def cpu_engine_kwargs(
    model_path: str,
    draft_path: str | None,
    *,
    steps: int = 3,
    topk: int = 1,
    draft_tokens: int = 4,
    max_total_tokens: int = 8192,
    **extra,
) -> dict:
    """Engine keywords that run the real engine on CPU (fp32, eager, the shim's attention backend)."""
    kw = dict(
        model_path=model_path,
        device="cpu",
        dtype="float32",
        disable_cuda_graph=True,
        max_total_tokens=max_total_tokens,
        skip_server_warmup=True,
        log_level="error",
        attention_backend="torch_native",
        sleep_on_idle=True,
    )  # an idle scheduler must not spin a core
    if draft_path:
        from patched_worker.cpu.shim import keep_intel_amx_backend

        keep_intel_amx_backend()
        kw.update(
            attention_backend="intel_amx",
            speculative_algorithm="EAGLE3",
            speculative_draft_model_path=draft_path,
            speculative_num_steps=steps,
            speculative_eagle_topk=topk,
            speculative_num_draft_tokens=draft_tokens,
        )
    kw.update(extra)
    return kw
