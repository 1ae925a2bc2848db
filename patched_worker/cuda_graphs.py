"""Plain DECODE CUDA graphs for the target of a speculative engine, replayed by OFF steps.

In a speculative engine SGLang captures the target only in TARGET_VERIFY mode, at the
draft-token width (sglang 0.5.17 decode_cuda_graph_runner.py:271: `capture_forward_mode =
TARGET_VERIFY` whenever `spec_algorithm.is_speculative()`), and a one-token DECODE batch
must never replay those. `PlainDecodeGraphRunner` captures the same target in DECODE mode,
one token per request, with its own attention backend, by presenting the model runner as
non-speculative while it captures and replays. It also keeps the aux hidden states
(FULL capture) that warm_kv writes into the draft KV.
"""

from __future__ import annotations

import contextlib
import logging

from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode
from sglang.srt.model_executor.runner.decode_cuda_graph_runner import DecodeCudaGraphRunner
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

__all__ = ["PlainDecodeGraphRunner", "build_plain_decode_graphs"]

logger = logging.getLogger(__name__)


@contextlib.contextmanager
def _plain_view(model_runner):
    saved = model_runner.spec_algorithm
    model_runner.spec_algorithm = SpeculativeAlgorithm.NONE
    try:
        yield
    finally:
        model_runner.spec_algorithm = saved


class PlainDecodeGraphRunner(DecodeCudaGraphRunner):
    # BaseRunner sets this from the server's return-hidden-states flag; OFF steps need the aux states
    return_hidden_states_mode = property(lambda self: CaptureHiddenMode.FULL, lambda self, value: None)

    def __init__(self, model_runner):
        with _plain_view(model_runner):
            saved = model_runner.init_new_workspace
            try:
                backend = model_runner._get_attention_backend(init_new_workspace=True)
            finally:
                model_runner.init_new_workspace = saved
            super().__init__(model_runner, attn_backend=backend)

    def can_run_graph(self, forward_batch) -> bool:
        with _plain_view(self.model_runner):
            return super().can_run_graph(forward_batch)

    def execute(self, *args, **kwargs):
        with _plain_view(self.model_runner):
            return super().execute(*args, **kwargs)


def build_plain_decode_graphs(worker):
    """Capture plain decode graphs for `worker`'s target: (runner, "", device bytes they took), or
    (None, reason, None) to run OFF steps eager.

    The bytes are the drop in free device memory across the capture (graph pool, the new
    attention backend's workspace, static buffers): what OFF steps cost beyond a speculative engine.
    """
    import torch

    model_runner = worker.target_worker.model_runner
    if model_runner.decode_cuda_graph_runner is None:
        return None, "cuda graphs disabled", None
    try:
        torch.cuda.synchronize()
        free_before = torch.cuda.mem_get_info()[0]
        runner = PlainDecodeGraphRunner(model_runner)
        torch.cuda.synchronize()
        return runner, "", max(0, free_before - torch.cuda.mem_get_info()[0])
    except Exception as e:  # OFF steps still run, eager; the state says why
        logger.exception("specflip: plain decode CUDA graph capture failed; OFF steps run eager")
        return None, f"{type(e).__name__}: {e}", None
