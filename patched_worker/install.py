"""`install()`: the one entry point that patches SGLang, inside its scheduler process.

Patched (sglang 0.5.17 only; `check_sglang_version` refuses anything else):
- `EAGLEWorkerV2.forward_batch_generation` (srt/speculative/eagle_worker_v2.py:1103):
  `SpecSwitch.step` times each batch and hands decode steps to `SpecSwitch.decode_step`, extend steps
  to `SpecSwitch.prefill_step` (upstream's unless OFF, see off_prefill.py).
- `EAGLEWorkerV2.on_verify_complete_cpu` (:1285): also feeds the switch's accept-length EMA.
- `EAGLEWorkerV2.init_cuda_graphs` (:1072): also captures plain DECODE graphs for OFF steps.
- `Scheduler.handle_rpc_request` (srt/managers/scheduler.py:4304): methods named
  `specflip_*` return their JSON result (or error and its type) in `RpcReqOutput.message`
  (upstream returns ""), with the caller's sequence number (control.py drops stale replies).
- `Scheduler.specflip_set_speculation` / `specflip_state` / `specflip_configure`: new RPC targets.
These go when SGLang ships a runtime speculation switch with a plain-decode OFF mode.
- Per-request `sampling_seed` honoured without deterministic inference: `patched_worker.seeding`.
- The spec-decode KV allocation's per-request loop reads its lengths as a list: `patched_worker.spec_alloc`.
- An EAGLE prefill's tail tokens without a host wait (ON prefills; the OFF prefill calls the same):
  `patched_worker.prefill_tail`.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass

from patched_worker.state import OffPrefill, Strategy, SwitchConfig
from patched_worker.version import check_sglang_version

__all__ = ["PatchStatus", "install", "switch_of"]

_CONFIG = SwitchConfig()
_INSTALLED: PatchStatus | None = None


@dataclass(frozen=True)
class PatchStatus:
    patched: bool
    sglang_version: str
    targets: tuple[str, ...]


def switch_of(worker):
    """The worker's SpecSwitch, created on first use."""
    sw = getattr(worker, "_specflip_switch", None)
    if sw is None:
        from patched_worker.switch import SpecSwitch

        sw = worker._specflip_switch = SpecSwitch(worker, _CONFIG)
    return sw


def install(config: SwitchConfig | None = None) -> PatchStatus:
    """Patch SGLang in this process (idempotent). Raises UnsupportedSGLangVersion on other releases."""
    global _INSTALLED, _CONFIG
    if config is not None:
        _CONFIG = config
    if _INSTALLED is not None:
        return _INSTALLED
    version = check_sglang_version()
    from sglang.srt.managers.io_struct import RpcReqOutput
    from sglang.srt.managers.scheduler import Scheduler
    from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2

    upstream_forward = EAGLEWorkerV2.forward_batch_generation
    upstream_verify_complete = EAGLEWorkerV2.on_verify_complete_cpu
    upstream_rpc = Scheduler.handle_rpc_request
    upstream_init_graphs = EAGLEWorkerV2.init_cuda_graphs

    @functools.wraps(upstream_forward)
    def forward_batch_generation(self, batch, on_publish=None, grammar_barrier=None):
        extend = batch.forward_mode.is_extend() or batch.is_extend_in_batch
        return switch_of(self).step(
            extend, functools.partial(upstream_forward, self), batch, on_publish, grammar_barrier
        )

    @functools.wraps(upstream_init_graphs)
    def init_cuda_graphs(self):
        upstream_init_graphs(self)
        from patched_worker.cuda_graphs import build_plain_decode_graphs

        sw = switch_of(self)
        sw.plain_decode_graphs, sw.plain_decode_graphs_note, sw.plain_decode_graphs_bytes = (
            build_plain_decode_graphs(self)
        )

    @functools.wraps(upstream_verify_complete)
    def on_verify_complete_cpu(self, num_correct_drafts_per_req, batch_size=0):
        switch_of(self).on_results(num_correct_drafts_per_req, batch_size)
        return upstream_verify_complete(self, num_correct_drafts_per_req, batch_size=batch_size)

    def _switch(scheduler):
        worker = getattr(scheduler, "draft_worker", None)
        if not isinstance(worker, EAGLEWorkerV2):
            raise RuntimeError(
                "this engine runs no EAGLE speculative decoding (speculative_algorithm unset, "
                f"or a worker specflip does not patch: {type(worker).__name__})"
            )
        return switch_of(worker)

    def specflip_set_speculation(self, enabled: bool) -> dict:
        _switch(self).request(enabled)
        return {"requested": bool(enabled)}

    def specflip_configure(self, strategy: str = "", flip_at: str = "", off_prefill: str = "") -> dict:
        sw = _switch(self)
        if strategy:
            sw.set_strategy(Strategy(strategy))
        if off_prefill:
            sw.set_off_prefill(OffPrefill(off_prefill))
        if flip_at:
            sw.schedule_flips([] if flip_at == "none" else [int(k) for k in flip_at.split(",")])
        return {"strategy": sw.config.strategy.value, "off_prefill": sw.config.off_prefill.value}

    def specflip_state(self) -> dict:
        running = len(self.running_batch.reqs) if self.running_batch is not None else 0
        state = _switch(self).state(running, len(self.waiting_queue), version)
        return json.loads(state.to_json())

    @functools.wraps(upstream_rpc)
    def handle_rpc_request(self, recv_req):
        if not recv_req.method.startswith("specflip_"):
            return upstream_rpc(self, recv_req)
        from torch.distributed import barrier

        params = dict(recv_req.parameters or {})
        seq = params.pop("_seq", None)  # echoed: the caller drops replies to calls it gave up on
        try:
            body = {"seq": seq, "result": getattr(self, recv_req.method)(**params)}
        except Exception as e:  # reported to the caller, the scheduler keeps running
            body = {"seq": seq, "error": str(e), "type": type(e).__name__}
        barrier(group=self.tp_group.cpu_group)
        return RpcReqOutput(success="error" not in body, message=json.dumps(body))

    from patched_worker.seeding import install_seeding

    seeding_targets = install_seeding()
    from patched_worker.spec_alloc import install_spec_alloc

    alloc_targets = install_spec_alloc()
    from patched_worker.prefill_tail import install_prefill_tail

    tail_targets = install_prefill_tail()
    EAGLEWorkerV2.forward_batch_generation = forward_batch_generation
    EAGLEWorkerV2.on_verify_complete_cpu = on_verify_complete_cpu
    EAGLEWorkerV2.init_cuda_graphs = init_cuda_graphs
    Scheduler.handle_rpc_request = handle_rpc_request
    Scheduler.specflip_set_speculation = specflip_set_speculation
    Scheduler.specflip_state = specflip_state
    Scheduler.specflip_configure = specflip_configure
    _INSTALLED = PatchStatus(
        True,
        version,
        (
            "EAGLEWorkerV2.forward_batch_generation",
            "EAGLEWorkerV2.on_verify_complete_cpu",
            "EAGLEWorkerV2.init_cuda_graphs",
            "Scheduler.handle_rpc_request",
            "Scheduler.specflip_set_speculation",
            "Scheduler.specflip_state",
            "Scheduler.specflip_configure",
            *seeding_targets,
            *alloc_targets,
            *tail_targets,
        ),
    )
    return _INSTALLED


def run_scheduler_process(config_json: str, *args, **kwargs):
    """Target of SGLang's scheduler subprocess: patch, then run the real scheduler."""
    install(SwitchConfig.from_json(config_json))
    from sglang.srt.managers.scheduler import run_scheduler_process as upstream

    return upstream(*args, **kwargs)
