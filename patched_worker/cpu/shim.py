"""Run the real SGLang 0.5.17 engine on a CPU-only host (CI, demos, correctness tests).

SGLang's kernel package (`sgl_kernel`) is built for CUDA: its op library fails to
load without libcuda, and its `*_cpu` ops are not in the PyPI wheel. This shim

1. lets `sgl_kernel` import without its CUDA op library and registers plain-torch
   CPU ops instead (`patched_worker.cpu.ops`);
2. fixes SGLang 0.5.17's CPU EAGLE attention path: `IntelAMXAttnBackend.forward_extend`
   and `.forward_decode` overwrite the speculative `seq_lens` (verify: committed +
   draft tokens; multi-step draft: per-candidate lengths) with `forward_batch.seq_lens`,
   so topk=1 accepts nothing and topk>1 crashes. Upstream removed both overwrites in
   0.5.23; the patch can go when the pin moves there;
3. keeps the `intel_amx` attention backend selected without AMX hardware (it is the
   only CPU backend with EAGLE draft/verify support); its two kernels come from (1);
4. lets the xgrammar grammar backend (structured output: json_schema, regex, ebnf) run
   on CPU: SGLang 0.5.17 allocates its token bitmask in pinned memory (needs CUDA) and
   applies it only to CUDA/NPU logits; xgrammar's own CPU kernel applies it here;
5. with SPECFLIP_CPU_OVERLAP=1 when an engine is built, keeps SGLang's overlap scheduler
   on for a speculative CPU engine (SGLang switches it off on CPU), so tests cover the
   overlap path: delayed result processing, the FutureMap relay, the grammar barrier.
   Its two CUDA-only pieces get CPU versions (stream bookkeeping is a no-op on CPU);
6. samples in the EAGLE verify on CPU: SGLang 0.5.17 verifies every CPU batch with argmax, so
   with speculation ON only a request's prefill token was sampled at temperature > 0. Batches
   that are not all greedy now take SGLang's GPU path (target-only speculative sampling over
   the draft tree) with plain-torch kernels (`patched_worker.cpu.sampling`); all-greedy batches
   keep the argmax verify unchanged.

Switch it on with `enable()` (sets SPECFLIP_CPU=1 so SGLang's spawned scheduler and
detokenizer processes activate the import hook at start-up via `specflip_cpu.pth`).
It refuses to run on a host where CUDA is available.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.util
import inspect
import os
import sys
import types
from collections.abc import Callable
from types import ModuleType
from typing import Any

__all__ = [
    "ENV_FLAG",
    "OVERLAP_ENV",
    "CpuShimError",
    "enable",
    "activate_hook",
    "is_active",
    "keep_intel_amx_backend",
]

ENV_FLAG = "SPECFLIP_CPU"
OVERLAP_ENV = "SPECFLIP_CPU_OVERLAP"  # "1" while building an engine: speculative CPU engine with overlap
# A module of SGLang or sgl_kernel whose functions a patch below replaces: mypy cannot know those
# names (SGLang ships no types), so the patches take it as Any; the import hook hands them a ModuleType.
SglangModule = Any
_SEQ_LENS_OVERWRITE = "\n        seq_lens = forward_batch.seq_lens\n"
_ARGMAX_ON_CPU = "if sampling_info.is_all_greedy or _is_cpu or "  # eagle_sample's verify choice
_SAMPLED_VERIFY_FLAG = "_specflip_argmax_verify_on_cpu"  # what that choice reads instead of _is_cpu


class CpuShimError(RuntimeError):
    """The CPU shim was asked for where it cannot work; the message says what to do."""


def _patch_load_utils(module: SglangModule) -> None:
    """sgl_kernel.load_utils: tolerate the missing CUDA op library, register CPU ops instead."""
    real = module._load_architecture_specific_ops

    def load() -> object:
        try:
            return real()
        except ImportError:
            from patched_worker.cpu import ops

            ops.register()
            return None

    module._load_architecture_specific_ops = load
    module._preload_cuda_library = lambda *a, **k: None


def _patch_intel_amx_backend(module: SglangModule) -> None:
    """Hand the speculative seq_lens to the attention kernels (SGLang 0.5.23 behaviour).

    Replaces: sglang 0.5.17 srt/layers/attention/intel_amx_backend.py
    `IntelAMXAttnBackend.forward_extend` / `forward_decode`, the line
    `seq_lens = forward_batch.seq_lens` after the metadata unpacking. Applied only
    when that line is present. Remove when the SGLang pin is >= 0.5.23.
    """
    cls = module.IntelAMXAttnBackend
    fix_extend = _SEQ_LENS_OVERWRITE in inspect.getsource(cls.forward_extend)
    fix_decode = _SEQ_LENS_OVERWRITE in inspect.getsource(cls.forward_decode)
    if not (fix_extend or fix_decode) or getattr(cls, "_specflip_seq_lens_fix", False):
        return
    original_init = cls.__init__

    def __init__(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        original_init(self, *args, **kwargs)
        import torch

        if fix_extend:
            extend = self.extend_attention_fwd

            def extend_attention_fwd(*a):  # type: ignore[no-untyped-def]
                if self.extend_metadata is not None and self.extend_metadata[0] is not None:
                    a = (*a[:8], self.extend_metadata[0].to(torch.int64), *a[9:])  # arg 8 = seq_lens
                return extend(*a)

            self.extend_attention_fwd = extend_attention_fwd
        if fix_decode:
            decode = self.decode_attention_fwd

            def decode_attention_fwd(*a):  # type: ignore[no-untyped-def]
                if self.draft_decode_metadata is not None:
                    a = (*a[:10], self.draft_decode_metadata[1].to(torch.int64), *a[11:])  # arg 10 = seq_lens
                return decode(*a)

            self.decode_attention_fwd = decode_attention_fwd

    cls.__init__ = __init__
    cls._specflip_seq_lens_fix = True


def _patch_xgrammar_backend(module: SglangModule) -> None:
    """Token bitmask in pageable memory, applied to CPU logits by xgrammar's CPU kernel.

    Replaces: sglang 0.5.17 srt/constrained/xgrammar_backend.py `_allocate_token_bitmask`
    (`pin_memory=True`, which needs a CUDA driver) and `XGrammarGrammar.apply_vocab_mask`
    (raises "Unsupported device: cpu"), for CPU logits only.
    """
    import torch
    import xgrammar

    cls = module.XGrammarGrammar
    if getattr(cls, "_specflip_cpu", False):
        return
    module._allocate_token_bitmask = lambda vocab_size, batch_size: torch.full(
        module.get_bitmask_shape(batch_size, vocab_size), -1, dtype=module.bitmask_dtype
    )
    device_apply = cls.apply_vocab_mask

    def apply_vocab_mask(self, logits, vocab_mask):  # type: ignore[no-untyped-def]
        if logits.device.type != "cpu":
            return device_apply(self, logits, vocab_mask)
        xgrammar.apply_token_bitmask_inplace(logits, vocab_mask.to(logits.device))

    cls.apply_vocab_mask = apply_vocab_mask
    cls._specflip_cpu = True


def _patch_speculative_hook(module: SglangModule) -> None:
    """Keep the overlap scheduler for a speculative CPU engine built while SPECFLIP_CPU_OVERLAP=1.

    Replaces: sglang 0.5.17 srt/arg_groups/speculative_hook.py `_disable_overlap_schedule_for_cpu`
    (read when ServerArgs resolves, in the process that builds the engine) for such engines only.
    """
    real = module._disable_overlap_schedule_for_cpu

    def disable_overlap_schedule_for_cpu(server_args):  # type: ignore[no-untyped-def]
        if os.environ.get(OVERLAP_ENV) != "1":
            real(server_args)

    module._disable_overlap_schedule_for_cpu = disable_overlap_schedule_for_cpu


def _patch_overlap_utils(module: SglangModule) -> None:
    """CPU versions of the overlap scheduler's CUDA-only pieces.

    Replaces, for CPU tensors only: `torch.Tensor.record_stream` (CUDA streams; a CPU stream is
    not accepted, and there is nothing to order on CPU) and sglang 0.5.17
    srt/managers/overlap_utils.py `gather_spec_extras` (a Triton kernel) by an index gather.
    """
    import torch

    if getattr(torch.Tensor.record_stream, "_specflip_cpu", False):
        return
    record_stream = torch.Tensor.record_stream

    def record_stream_cpu_noop(self, stream):  # type: ignore[no-untyped-def]
        if self.device.type != "cpu":
            record_stream(self, stream)

    record_stream_cpu_noop._specflip_cpu = True  # type: ignore[attr-defined]
    torch.Tensor.record_stream = record_stream_cpu_noop  # type: ignore[method-assign]
    gather = module.gather_spec_extras

    def gather_spec_extras(indices, topk_p_buf, topk_index_buf, output_tokens_buf, hidden_states_buf):  # type: ignore[no-untyped-def]
        if indices.device.type != "cpu":
            return gather(indices, topk_p_buf, topk_index_buf, output_tokens_buf, hidden_states_buf)
        rows = indices.long()
        hidden = None if hidden_states_buf is None else hidden_states_buf[rows]
        return topk_p_buf[rows], topk_index_buf[rows], output_tokens_buf[rows], hidden

    module.gather_spec_extras = gather_spec_extras


def _patch_eagle_sample(module: SglangModule) -> None:
    """Sampled verify on CPU for batches that are not all greedy (what SGLang does on the GPU).

    Replaces: sglang 0.5.17 srt/speculative/eagle_utils.py `eagle_sample`, whose verify choice
    `if sampling_info.is_all_greedy or _is_cpu or ...:` (argmax verify) sends every CPU batch to
    `verify_tree_greedy`. The replacement runs upstream's own function with that one `_is_cpu`
    read from a module global that is False, so a batch with any sampled request goes through
    upstream's sampled path unchanged (penalties, grammar mask, temperature, top-k/top-p, its
    coins: seeded from `sampling_seed` when set, see `patched_worker.seeding`; the accept
    thresholds) into plain-torch kernels: `sgl_kernel::tree_speculative_sampling_target_only`
    (registered by `ops.register`) and `sgl_kernel.top_k_renorm_prob` / `top_p_renorm_prob`
    (flashinfer's, CUDA-only, wrapped here for CPU tensors). An all-greedy batch calls the
    upstream function itself: argmax verify, greedy output token-identical as before.
    Not covered: `speculative_use_rejection_sampling` (a Triton kernel; refused on CPU).
    Checked against the source (fails loudly if the line moved). Remove when SGLang's CPU verify
    samples (the condition loses `_is_cpu`).
    """
    from patched_worker.version import check_sglang_version

    check_sglang_version()
    upstream = module.eagle_sample
    if getattr(upstream, "_specflip_sampled_verify", False):
        return
    source = inspect.getsource(upstream)
    if source.count(_ARGMAX_ON_CPU) != 1 or source.count("_is_cpu") != 1:
        raise CpuShimError(
            "specflip CPU shim: SGLang's eagle_sample verify choice changed; update patched_worker/cpu/shim.py"
        )
    code = upstream.__code__
    names = tuple(_SAMPLED_VERIFY_FLAG if n == "_is_cpu" else n for n in code.co_names)
    sampled = types.FunctionType(
        code.replace(co_names=names), upstream.__globals__, code.co_name, upstream.__defaults__
    )
    setattr(module, _SAMPLED_VERIFY_FLAG, False)
    _wrap_renorm_for_cpu()

    @functools.wraps(upstream)
    def eagle_sample(verify_input, batch, logits_output, grammar_mask=None):  # type: ignore[no-untyped-def]
        info = batch.sampling_info
        if info is None or info.is_all_greedy or batch.forward_mode.is_idle():
            return upstream(verify_input, batch, logits_output, grammar_mask)
        from sglang.srt.runtime_context import get_spec

        if get_spec().speculative_use_rejection_sampling:
            raise CpuShimError(
                "specflip CPU shim: speculative_use_rejection_sampling has no CPU kernel; leave it off on CPU"
            )
        return sampled(verify_input, batch, logits_output, grammar_mask)

    eagle_sample._specflip_sampled_verify = True  # type: ignore[attr-defined]
    module.eagle_sample = eagle_sample


def _wrap_renorm_for_cpu() -> None:
    """`sgl_kernel.top_k_renorm_prob` / `top_p_renorm_prob` (the names eagle_sample imports) for CPU
    tensors: plain torch (`cpu.sampling`) instead of flashinfer's CUDA kernels."""
    import sgl_kernel

    from patched_worker.cpu import sampling

    for name, cpu_fn in (
        ("top_k_renorm_prob", sampling.top_k_renorm_probs),
        ("top_p_renorm_prob", sampling.top_p_renorm_probs),
    ):
        device_fn = getattr(sgl_kernel, name)
        if getattr(device_fn, "_specflip_cpu", False):
            continue

        def renorm(probs, threshold, _cpu=cpu_fn, _device=device_fn):  # type: ignore[no-untyped-def]
            return _cpu(probs, threshold) if probs.device.type == "cpu" else _device(probs, threshold)

        renorm._specflip_cpu = True  # type: ignore[attr-defined]
        setattr(sgl_kernel, name, renorm)


_POST_IMPORT: dict[str, Callable[[SglangModule], None]] = {
    "sgl_kernel.load_utils": _patch_load_utils,
    "sglang.srt.layers.attention.intel_amx_backend": _patch_intel_amx_backend,
    "sglang.srt.constrained.xgrammar_backend": _patch_xgrammar_backend,
    "sglang.srt.arg_groups.speculative_hook": _patch_speculative_hook,
    "sglang.srt.managers.overlap_utils": _patch_overlap_utils,
    "sglang.srt.speculative.eagle_utils": _patch_eagle_sample,
}


class _PostImportFinder(importlib.abc.MetaPathFinder):
    """Runs a patch right after one of the modules in _POST_IMPORT has executed."""

    def find_spec(self, name, path, target=None):  # type: ignore[no-untyped-def]
        patch = _POST_IMPORT.get(name)
        if patch is None:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_patch(module: ModuleType) -> None:
            exec_module(module)
            patch(module)

        spec.loader.exec_module = exec_and_patch  # type: ignore[method-assign]
        return spec


def activate_hook() -> None:
    """Install the import hook in this process (idempotent). Runs at start-up via the .pth file."""
    if not any(isinstance(f, _PostImportFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _PostImportFinder())


def is_active() -> bool:
    return any(isinstance(f, _PostImportFinder) for f in sys.meta_path)


def keep_intel_amx_backend() -> None:
    """Keep attention_backend="intel_amx" selected on a CPU without AMX.

    Replaces: sglang 0.5.17 srt/arg_groups/overrides.py, the module-global
    `cpu_has_amx_support()` consulted by `_attention_backend_platform_fallbacks`,
    which otherwise silently switches to torch_native (no EAGLE support). Only that
    module's name is rebound: layers keep their plain-torch paths.
    """
    from sglang.srt.arg_groups import overrides

    if "cpu_has_amx_support" not in inspect.getsource(overrides._attention_backend_platform_fallbacks):
        raise CpuShimError(
            "specflip CPU shim: SGLang's intel_amx fallback moved; update patched_worker/cpu/shim.py"
        )
    overrides.cpu_has_amx_support = lambda: True


def _cuda_available() -> bool:
    import torch

    try:
        return torch.cuda.is_available()
    except Exception:  # a broken driver counts as no CUDA
        return False


def enable() -> None:
    """Switch the CPU engine on for this process and its children. Call before importing sglang."""
    if "sgl_kernel" in sys.modules and not is_active():
        raise CpuShimError(
            "specflip CPU shim: sgl_kernel was imported before patched_worker.cpu.enable(); "
            "call enable() first (or set SPECFLIP_CPU=1 in the environment)"
        )
    if _cuda_available():
        raise CpuShimError(
            "specflip CPU shim: CUDA is available on this host; the CPU shim is for CPU-only hosts. "
            "Use device='cuda' (the default) instead of device='cpu'"
        )
    if not _pth_installed():
        raise CpuShimError(
            "specflip CPU shim: specflip_cpu.pth is missing from site-packages, so SGLang's child processes "
            "cannot load the shim. Reinstall specflip with pip (`pip install -e .` or `pip install .`)"
        )
    os.environ[ENV_FLAG] = "1"
    os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")
    os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")  # skips a 15-20 s compile, identical output
    activate_hook()


def _pth_installed() -> bool:
    import site

    dirs = [*site.getsitepackages(), site.getusersitepackages()]
    return any(os.path.exists(os.path.join(d, "specflip_cpu.pth")) for d in dirs)
