"""The per-worker speculation switch, run inside SGLang's scheduler process.

A flip is requested by RPC (between scheduler iterations, on every TP rank at the same
iteration) and applied at the top of the next decode step (an OFF also at the next prefill):

- ON -> OFF: this step is already a plain decode.
- OFF -> ON: this step is a plain decode followed by the decode-mode draft resync (a
  one-token draft extend at the new position, which refreshes the draft's top-k and
  hidden state); the following step drafts again. Strategy `cold` skips the resync.

Extend (prefill) batches: while ON (or OFF under full_extend) upstream's path with its draft
prefill; while OFF under warm_kv the target's extend and the prompt's draft K/V written from its
aux hidden states, no draft forward (`off_prefill`); under cold nothing for the draft. Either way a
request prefilled while OFF has a complete draft KV when the resync re-enables it (cold aside).
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import threading
import time

from patched_worker import draft_sync, off_decode, off_prefill, step_probe
from patched_worker.errors import UnsupportedSetup
from patched_worker.setup_check import check_strategy, cold_allowed
from patched_worker.state import OffPrefill, SpeculationState, Strategy, SwitchConfig

__all__ = ["SpecSwitch"]

logger = logging.getLogger(__name__)

_MAX_STEP_GAP_S = 5.0  # a longer gap between two decode results is an idle period, not a step
# a step whose host call took this long is recorded (kind, batch): normal steps take milliseconds on
# the host; a kernel compiled on first use (Triton specializes some kernels per power-of-two batch
# bucket), or a wait on the device, takes longer
SLOW_STEP_S = 0.25
_SLOW_STEP_LOG = 16  # the most recent slow steps kept for state queries
PREFILL_MEANS_EVERY = 64  # prefill steps of a kind per line of their mean host time (`step_probe.PhaseMeans`)


class _ResyncTimer:
    """Resync durations without a device-wide sync: CUDA events on the forward stream, read once done.

    On CPU (no CUDA) the resync has finished when the call returns: wall time.
    """

    def __init__(self):
        import torch

        self._cuda = torch.cuda.is_available()
        self._pending: collections.deque = collections.deque()
        self.timed, self.total_ms, self.last_ms = 0, 0.0, None

    def start(self):
        if not self._cuda:
            return time.perf_counter()
        import torch

        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def stop(self, started) -> None:
        if not self._cuda:
            self._add((time.perf_counter() - started) * 1e3)
            return
        import torch

        end = torch.cuda.Event(enable_timing=True)
        end.record()
        self._pending.append((started, end))

    def collect(self) -> None:
        """Add the resyncs that have finished on the device (query() never blocks)."""
        while self._pending and self._pending[0][1].query():
            start, end = self._pending.popleft()
            self._add(start.elapsed_time(end))

    def _add(self, ms: float) -> None:
        self.timed += 1
        self.total_ms += ms
        self.last_ms = ms


class SpecSwitch:
    def __init__(self, worker, config: SwitchConfig):
        check_strategy(config.strategy, cold_allowed(config))
        self.worker = worker
        self.enabled = config.start_enabled
        self.requested = config.start_enabled
        self.toggles = self.on_steps = self.off_steps = self.resyncs = self.off_prefills = 0
        self.accept_ema: float | None = None
        self._requested_t: float | None = None  # when the pending mode was asked for (RPC)
        self.last_flip_ms: float | None = None  # from that request to the step the mode took effect at
        self.resync_timer = _ResyncTimer()
        # decode-step throughput counters (CPU clock between consecutive decode results; a gap that
        # spans a prefill batch or an idle period is not decode time and is left out)
        self.decode_tokens = self.decode_steps = self.decode_requests = self.generated_tokens = 0
        self.decode_seconds = 0.0
        self._last_result_t: float | None = None
        self._prefill_since_result = False
        self.plain_decode_graphs = None  # PlainDecodeGraphRunner on CUDA hosts with graphs enabled
        self.plain_decode_graphs_note = "not captured yet"
        self.plain_decode_graphs_bytes: int | None = None
        self._step = 0
        self._flip_at: set[int] = set()  # scripted flips: decode step numbers at which `requested` toggles
        self._launched: collections.deque[tuple[int, str, int]] = collections.deque(maxlen=4096)
        self.trace: collections.deque[tuple[int, str, int, float]] = collections.deque(
            maxlen=config.trace_len
        )
        self._lock = threading.Lock()
        self.slow_steps = 0
        self._probe: step_probe.StepProbe | None = None  # the step in progress (its phases, for a slow one)
        step_probe.install_gc_clock()
        self._prefill_means = step_probe.PhaseMeans(PREFILL_MEANS_EVERY)
        self.slow_step_log: collections.deque[tuple[int, str, int, float]] = collections.deque(
            maxlen=_SLOW_STEP_LOG
        )
        # the draft's layout, checked once: warm_kv falls back to full_extend where it cannot write the K/V
        self.warm_kv_unsupported = draft_sync.warm_kv_unsupported(worker)
        self.strategy_configured = config.strategy
        self.strategy_fallback = ""
        if config.strategy is Strategy.WARM_KV and self.warm_kv_unsupported:
            self.strategy_fallback = f"warm_kv unsupported: {self.warm_kv_unsupported}"
            config = dataclasses.replace(config, strategy=Strategy.FULL_EXTEND)
            logger.warning("specflip: %s; OFF steps run full_extend instead", self.strategy_fallback)
        self.config = config

    def request(self, enabled: bool) -> None:
        enabled = bool(enabled)
        if enabled != self.requested:  # timed from the first request of the mode not yet in effect
            self._requested_t = time.perf_counter() if enabled != self.enabled else None
        self.requested = enabled

    def set_strategy(self, strategy: Strategy) -> None:
        """Change the draft upkeep while OFF; refuses what this engine cannot run (UnsupportedSetup)."""
        strategy = Strategy(strategy)
        check_strategy(strategy, cold_allowed(self.config))
        if strategy is Strategy.WARM_KV and self.warm_kv_unsupported:
            raise UnsupportedSetup(
                f"warm_kv is not available for this draft ({self.warm_kv_unsupported}): use full_extend"
            )
        self.config = dataclasses.replace(self.config, strategy=strategy)
        self.strategy_configured, self.strategy_fallback = strategy, ""

    def set_off_prefill(self, mode: OffPrefill) -> None:
        """How OFF prefills keep the draft K/V under warm_kv (kv_write, or upstream's draft_forward)."""
        self.config = dataclasses.replace(self.config, off_prefill=OffPrefill(mode))

    def schedule_flips(self, offsets: list[int]) -> None:
        """Toggle the requested mode at these decode steps from now (1 = the next one): reproducible runs."""
        self._flip_at = {self._step + k for k in offsets if k > 0}

    def _apply(self, enabled: bool) -> None:
        if enabled != self.enabled:
            self.enabled = enabled
            self.toggles += 1
            if self._requested_t is not None:  # asked by RPC (a scripted flip has no request time)
                self.last_flip_ms = (time.perf_counter() - self._requested_t) * 1e3
        self._requested_t = None

    def step(self, extend: bool, upstream, batch, on_publish, grammar_barrier):
        """One forward batch through `prefill_step` or `decode_step`, its host time checked against
        SLOW_STEP_S (recorded with the step's kind and batch size; its log line also says where the
        time went as far as `step_probe` sees: marked phases, the collector, an extend step's CUDA
        allocator calls); every PREFILL_MEANS_EVERY prefill steps of a kind, a line of their means."""
        before = (self.on_steps, self.off_steps, self.resyncs)
        self._probe = probe = step_probe.StepProbe(allocator=extend)
        result = (self.prefill_step if extend else self.decode_step)(
            upstream, batch, on_publish, grammar_barrier
        )
        ended = time.perf_counter()
        kind = _kind(extend, before, self)
        if ended - probe.started >= SLOW_STEP_S:
            self._note_slow_step(kind, _batch_size(batch), ended - probe.started, probe.note(ended))
        if extend and (means := self._prefill_means.add(kind, probe, ended)) is not None:
            logger.info("specflip: %s", means)
        self._probe = None
        return result

    def _note_slow_step(self, kind: str, batch_size: int, seconds: float, note: str = "") -> None:
        self.slow_steps += 1
        self.slow_step_log.append((self._step, kind, batch_size, round(seconds * 1e3, 1)))
        logger.info(
            "specflip: slow %s step at batch %d: %.0f ms on the host%s",
            kind,
            batch_size,
            seconds * 1e3,
            f" ({note})" if note else "",
        )

    def prefill_step(self, upstream, batch, on_publish, grammar_barrier):
        """One extend batch: upstream's (target extend + draft prefill) unless OFF skips the draft forward."""
        self._prefill_since_result = True
        if not self.requested and self.enabled:
            # a pending OFF needs no resync: it takes effect at this step, prefill or decode
            self._apply(False)
        strategy = self.config.strategy
        lean = not self.enabled and (
            strategy is Strategy.COLD
            or (strategy is Strategy.WARM_KV and self.config.off_prefill is OffPrefill.KV_WRITE)
        )
        if not lean or not off_prefill.supported(batch):
            return upstream(batch, on_publish=on_publish, grammar_barrier=grammar_barrier)
        self.off_prefills += 1
        return off_prefill.run_off_prefill(
            self.worker,
            batch,
            on_publish,
            write_kv=strategy is Strategy.WARM_KV,
            mark=self._probe.mark if self._probe is not None else None,
        )

    def decode_step(self, upstream, batch, on_publish, grammar_barrier):
        """One decode iteration: upstream EAGLE-3 when ON, a plain decode when OFF."""
        self.resync_timer.collect()
        if batch.forward_mode.is_idle():
            return upstream(batch, on_publish=on_publish, grammar_barrier=grammar_barrier)
        if self._step + 1 in self._flip_at:
            self._flip_at.discard(self._step + 1)
            self.requested = not self.requested
            self._requested_t = None  # scripted: no request to time from
        if self.requested != self.enabled and (not self.requested or self.config.strategy is Strategy.COLD):
            self._apply(self.requested)  # OFF takes effect now; cold ON too (no resync)
        bs = len(batch.seq_lens)
        if self.enabled:
            self.on_steps += 1
            self._launch("on", bs)
            return upstream(batch, on_publish=on_publish, grammar_barrier=grammar_barrier)

        strategy = self.config.strategy
        resync = self.requested  # ON pending: this OFF step doubles as the draft resync
        result = off_decode.run_off_decode(
            self.worker,
            batch,
            on_publish,
            capture_aux=resync or strategy is not Strategy.COLD,
            graph_runner=self.plain_decode_graphs,
            grammar_barrier=grammar_barrier,
        )
        if resync:
            started = self.resync_timer.start()
            draft_sync.draft_extend_one(self.worker, batch, result)
            self.resync_timer.stop(started)
        elif strategy is Strategy.FULL_EXTEND:
            draft_sync.draft_extend_one(self.worker, batch, result)
        elif strategy is Strategy.WARM_KV:
            draft_sync.write_draft_kv(self.worker, batch, result)
            draft_sync.stub_draft_state(self.worker, batch, result)
        else:
            draft_sync.stub_draft_state(self.worker, batch, result)
        self.off_steps += 1
        if resync:
            self.resyncs += 1
            self._apply(True)
        self._launch("resync" if resync else "off", bs)
        return result

    def _launch(self, kind: str, bs: int) -> None:
        self._step += 1
        with self._lock:
            self._launched.append((self._step, kind, bs))

    def on_results(self, correct_drafts_per_req: list[int], batch_size: int) -> None:
        """Called in launch order with each decode result's CPU accept counts."""
        now = time.perf_counter()
        gap = None if self._last_result_t is None else now - self._last_result_t
        self.generated_tokens += len(correct_drafts_per_req) + sum(correct_drafts_per_req)
        if gap is not None and gap < _MAX_STEP_GAP_S and not self._prefill_since_result:
            self.decode_seconds += gap
            self.decode_tokens += len(correct_drafts_per_req) + sum(correct_drafts_per_req)
            self.decode_steps += 1
            self.decode_requests += len(correct_drafts_per_req)
        self._last_result_t, self._prefill_since_result = now, False
        with self._lock:
            while self._launched:
                step, kind, bs = self._launched.popleft()
                if bs == batch_size:
                    break
            else:
                return
        if not correct_drafts_per_req:
            return
        mean_accept = 1.0 + sum(correct_drafts_per_req) / len(correct_drafts_per_req)
        self.trace.append((step, kind, bs, mean_accept))
        if kind == "on":
            a = self.config.accept_ema_alpha
            self.accept_ema = (
                mean_accept if self.accept_ema is None else (1 - a) * self.accept_ema + a * mean_accept
            )

    def state(self, running: int, waiting: int, version: str) -> SpeculationState:
        w, timer = self.worker, self.resync_timer
        timer.collect()
        return SpeculationState(
            enabled=self.enabled,
            requested=self.requested,
            strategy=self.config.strategy,
            off_prefill=self.config.off_prefill,
            off_prefills=self.off_prefills,
            steps=w.speculative_num_steps,
            topk=w.topk,
            draft_tokens=w.speculative_num_draft_tokens,
            toggles=self.toggles,
            accept_length_ema=self.accept_ema,
            on_steps=self.on_steps,
            off_steps=self.off_steps,
            resyncs=self.resyncs,
            running=running,
            waiting=waiting,
            patched=True,
            sglang_version=version,
            off_cuda_graphs=self.plain_decode_graphs is not None,
            off_cuda_graphs_note=self.plain_decode_graphs_note,
            off_cuda_graphs_bytes=self.plain_decode_graphs_bytes,
            last_resync_ms=timer.last_ms,
            last_flip_ms=self.last_flip_ms,
            resync_ms_total=timer.total_ms,
            resyncs_timed=timer.timed,
            strategy_configured=self.strategy_configured,
            strategy_fallback=self.strategy_fallback,
            generated_tokens=self.generated_tokens,
            decode_tokens=self.decode_tokens,
            decode_seconds=self.decode_seconds,
            decode_steps=self.decode_steps,
            decode_requests=self.decode_requests,
            trace=list(self.trace),
            slow_steps=self.slow_steps,
            slow_step_log=list(self.slow_step_log),
        )


def _kind(extend: bool, before: tuple[int, int, int], sw: SpecSwitch) -> str:
    """What a step was, from the counters it moved: prefill_on/prefill_off, resync, on, off, idle."""
    if extend:
        return "prefill_on" if sw.enabled else "prefill_off"
    on, off, resyncs = before
    if sw.resyncs > resyncs:
        return "resync"
    return "on" if sw.on_steps > on else "off" if sw.off_steps > off else "idle"


def _batch_size(batch) -> int:
    seq_lens = getattr(batch, "seq_lens", None)
    return 0 if seq_lens is None else len(seq_lens)
