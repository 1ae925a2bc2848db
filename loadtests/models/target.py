"""The tiny Llama target: config and a short next-token training run on local text."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["target_config", "train_target", "token_stream", "unlikelihood_loss"]


def target_config(tokenizer, hidden: int, layers: int, intermediate: int, heads: int, kv_heads: int):
    from transformers import LlamaConfig

    # passed through LlamaConfig's **kwargs (its typed signature lists neither)
    passed: dict[str, Any] = {"rope_theta": 10000.0, "torch_dtype": "float32"}
    return LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=intermediate,
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
        head_dim=hidden // heads, max_position_embeddings=2048, rms_norm_eps=1e-5,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=False, **passed,
    )


def token_stream(tokenizer, texts: list[str]) -> torch.Tensor:
    """All texts tokenized and joined with EOS, as one long int64 tensor."""
    ids: list[int] = []
    for enc in tokenizer(texts, add_special_tokens=False)["input_ids"]:
        ids += enc + [tokenizer.eos_token_id]
    return torch.tensor(ids, dtype=torch.int64)


def unlikelihood_loss(logp: torch.Tensor, context: torch.Tensor, target: torch.Tensor, window: int) -> torch.Tensor:
    """Token-level unlikelihood (Welleck et al., 2019): push down recently seen tokens other than the target.

    logp [B,T,V] log-probs predicting target [B,T]; context [B,T] the inputs. Candidates at t
    are the inputs at t-window+1..t other than target[t] (a token seen twice counts twice).
    Greedy decoding of a tiny model otherwise falls into short loops.
    """
    B, T, _ = logp.shape
    padded = torch.cat([context.new_zeros((B, window - 1)), context], 1)
    recent = padded.unfold(1, window, 1)  # [B, T, window]
    valid = (torch.arange(T)[:, None] - window + 1 + torch.arange(window) >= 0) & (recent != target[..., None])
    p = logp.gather(2, recent).exp().clamp(max=1 - 1e-5)
    return -(torch.log1p(-p) * valid).sum(-1).mean()


def train_target(model, stream: torch.Tensor, *, steps: int, batch: int, seq: int, lr: float, seed: int,
                 log: Callable[[str], None], unlikelihood: float = 0.0, ul_window: int = 64) -> float:
    """AdamW with warm-up and cosine decay on random windows of `stream`; returns the last LM loss."""
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1)
    warm = max(1, steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / steps))))
    model.train()
    t0, ema = time.time(), None
    for step in range(steps):
        starts = torch.randint(0, stream.numel() - seq, (batch,), generator=g)
        x = torch.stack([stream[s: s + seq] for s in starts.tolist()])
        logp = torch.log_softmax(model(input_ids=x).logits[:, :-1].float(), -1)
        loss = torch.nn.functional.nll_loss(logp.flatten(0, 1), x[:, 1:].flatten())
        total = loss + unlikelihood * unlikelihood_loss(logp, x[:, :-1], x[:, 1:], ul_window) if unlikelihood \
            else loss
        opt.zero_grad(set_to_none=True)
        total.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        ema = loss.item() if ema is None else 0.95 * ema + 0.05 * loss.item()
        if (step + 1) % max(1, steps // 10) == 0 or step + 1 == steps:
            rate = (step + 1) * batch * seq / (time.time() - t0)
            log(f"target step {step + 1}/{steps} loss {ema:.3f} ({rate / 1000:.1f}k tok/s)")
    model.eval()
    return float(ema or 0.0)
