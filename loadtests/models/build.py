"""`specflip models build`: a deterministic, cached build of a tiny target + EAGLE-3 draft pair."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["PairSpec", "PairPaths", "build_pair", "pair_paths"]

AUX_LAYERS = [0, 1, 2]  # SGLang captures the outputs of these target layers for the draft


@dataclass(frozen=True)
class PairSpec:
    seed: int = 0
    vocab: int = 4096
    hidden: int = 128
    layers: int = 4
    intermediate: int = 256
    heads: int = 4
    kv_heads: int = 2
    corpus_chars: int = 6_000_000
    target_steps: int = 450
    target_batch: int = 8
    target_seq: int = 256
    target_lr: float = 4e-3
    unlikelihood: float = 1.0  # token-level unlikelihood weight: keeps greedy outputs out of short loops
    ul_window: int = 64
    distill_prompts: int = 512
    distill_prompt_len: int = 32
    distill_new_tokens: int = 96
    draft_vocab: int = 2048
    draft_intermediate: int = 512
    draft_steps: int = 120
    draft_batch: int = 16
    ttt_steps: int = 3
    draft_lr: float = 3e-3

    def key(self) -> str:
        blob = json.dumps(dataclasses.asdict(self), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:12]


@dataclass(frozen=True)
class PairPaths:
    root: str
    target: str
    draft: str
    manifest: str


def pair_paths(out: str) -> PairPaths:
    return PairPaths(out, os.path.join(out, "target"), os.path.join(out, "draft"), os.path.join(out, "manifest.json"))


def _cached(paths: PairPaths, spec: PairSpec) -> bool:
    try:
        with open(paths.manifest) as f:
            return json.load(f).get("key") == spec.key()
    except (OSError, ValueError):
        return False


def build_pair(out: str, spec: PairSpec = PairSpec(), log: Callable[[str], None] = print,
               force: bool = False) -> PairPaths:
    """Build (or reuse, if `out` holds a build of the same spec) the target and draft under `out`."""
    paths = pair_paths(out)
    if not force and _cached(paths, spec):
        log(f"models: reusing {out} (spec {spec.key()})")
        return paths
    import torch
    from transformers import LlamaForCausalLM

    from loadtests.models import corpus, distill, draft, target

    t0 = time.time()
    torch.manual_seed(spec.seed)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    text = corpus.load_corpus(spec.corpus_chars)
    tok = corpus.train_tokenizer(text.train[:: 3], spec.vocab)
    stream = target.token_stream(tok, text.train)
    log(f"models: tokenizer {len(tok)} tokens, corpus {stream.numel() / 1e6:.2f}M tokens ({time.time() - t0:.0f}s)")

    cfg = target.target_config(tok, spec.hidden, spec.layers, spec.intermediate, spec.heads, spec.kv_heads)
    model = LlamaForCausalLM(cfg).float()
    loss = target.train_target(model, stream, steps=spec.target_steps, batch=spec.target_batch,
                               seq=spec.target_seq, lr=spec.target_lr, seed=spec.seed, log=log,
                               unlikelihood=spec.unlikelihood, ul_window=spec.ul_window)
    tmp = out + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tpaths = pair_paths(tmp)
    model.save_pretrained(tpaths.target, safe_serialization=True)
    tok.save_pretrained(tpaths.target)

    g = torch.Generator().manual_seed(spec.seed + 1)
    starts = torch.randint(0, stream.numel() - spec.distill_prompt_len, (spec.distill_prompts,), generator=g)
    prompts = torch.stack([stream[s: s + spec.distill_prompt_len] for s in starts.tolist()])
    data = distill.collect(model, prompts, spec.distill_new_tokens, AUX_LAYERS, batch=128, log=log)

    # draft vocab: the target's most frequent greedy choices; everything else is ignored in the loss
    counts = torch.bincount(data.preds.flatten(), minlength=len(tok))
    hot = counts.argsort(descending=True)[: spec.draft_vocab].sort().values
    t2d = torch.full((len(tok),), -100, dtype=torch.int64)
    t2d[hot] = torch.arange(hot.numel())
    log(f"models: draft vocab covers {counts[hot].sum().item() / counts.sum().item():.1%} of target choices")

    d = draft.EagleDraft(spec.hidden, spec.heads, spec.kv_heads, spec.draft_intermediate, spec.draft_vocab)
    with torch.no_grad():  # start from the target's own output rows
        d.lm_head.weight.copy_(model.lm_head.weight[hot])
        d.norm.weight.copy_(model.model.norm.weight)
    seq = data.tokens.shape[1] - spec.ttt_steps - 1
    acc = distill.train_draft(d, model.model.embed_tokens, data, t2d, steps=spec.draft_steps,
                              batch=spec.draft_batch, seq=seq, ttt_steps=spec.ttt_steps, lr=spec.draft_lr,
                              seed=spec.seed + 2, log=log)
    _save_draft(tpaths.draft, d, hot, cfg, spec, tpaths.target)

    manifest = {"key": spec.key(), "spec": dataclasses.asdict(spec), "target_loss": round(loss, 4),
                "draft_accuracy_per_step": [round(a, 3) for a in acc], "aux_layers": AUX_LAYERS,
                "build_seconds": round(time.time() - t0, 1)}
    with open(tpaths.manifest, "w") as f:
        json.dump(manifest, f, indent=1)
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)
    log(f"models: built {out} in {time.time() - t0:.0f}s (target loss {loss:.3f}, draft acc {acc})")
    return paths


def _save_draft(path: str, d, hot, tcfg, spec: PairSpec, target_dir: str) -> None:
    from safetensors.torch import save_file

    os.makedirs(path, exist_ok=True)
    cfg = {
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama",
        "hidden_size": spec.hidden, "intermediate_size": spec.draft_intermediate, "num_hidden_layers": 1,
        "num_attention_heads": spec.heads, "num_key_value_heads": spec.kv_heads,
        "head_dim": spec.hidden // spec.heads, "hidden_act": "silu", "rms_norm_eps": 1e-5,
        "max_position_embeddings": tcfg.max_position_embeddings, "rope_theta": 10000.0,
        "tie_word_embeddings": False, "vocab_size": tcfg.vocab_size, "draft_vocab_size": spec.draft_vocab,
        "target_hidden_size": spec.hidden, "bos_token_id": tcfg.bos_token_id, "eos_token_id": tcfg.eos_token_id,
        "pad_token_id": tcfg.pad_token_id, "torch_dtype": "float32",
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": AUX_LAYERS, "use_aux_hidden_state": True},
    }
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    save_file(d.sglang_state_dict(hot, tcfg.vocab_size), os.path.join(path, "model.safetensors"))
    for name in os.listdir(target_dir):
        if name.startswith("tokenizer") or name.endswith(".jinja"):
            shutil.copy(os.path.join(target_dir, name), path)
