"""Self-distillation: the draft learns the target's own greedy behaviour from its aux states."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from loadtests.models.draft import EagleDraft

__all__ = ["DistillData", "greedy_continue", "collect", "train_draft"]


@dataclass
class DistillData:
    aux: torch.Tensor  # [N, T, 3H] outputs of the target's aux layers (un-normed, as SGLang captures)
    tokens: torch.Tensor  # [N, T] prompt + greedy continuation
    preds: torch.Tensor  # [N, T] target argmax at each position (the token it predicts for t+1)


@torch.no_grad()
def greedy_continue(model, prompts: torch.Tensor, new_tokens: int) -> torch.Tensor:
    """Batched greedy decoding with a KV cache; prompts [B, P] of equal length -> [B, P + new]."""
    out = model(input_ids=prompts, use_cache=True)
    past, seq = out.past_key_values, prompts
    nxt = out.logits[:, -1].argmax(-1, keepdim=True)
    for _ in range(new_tokens):
        seq = torch.cat([seq, nxt], 1)
        out = model(input_ids=nxt, past_key_values=past, use_cache=True)
        past, nxt = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
    return seq


@torch.no_grad()
def collect(model, prompts: torch.Tensor, new_tokens: int, aux_layers: list[int], batch: int,
            log: Callable[[str], None]) -> DistillData:
    """Generate greedy continuations, then read the aux layers' outputs and argmax predictions."""
    aux, toks, preds = [], [], []
    t0 = time.time()
    for i in range(0, prompts.shape[0], batch):
        seq = greedy_continue(model, prompts[i: i + batch], new_tokens)
        out = model(input_ids=seq, output_hidden_states=True)
        # hidden_states[k + 1] is the output of decoder layer k (before the final norm for k < L-1)
        aux.append(torch.cat([out.hidden_states[k + 1] for k in aux_layers], -1))
        toks.append(seq)
        preds.append(out.logits.argmax(-1))
        log(f"distill data {min(i + batch, prompts.shape[0])}/{prompts.shape[0]} sequences "
            f"({time.time() - t0:.0f}s)")
    return DistillData(torch.cat(aux), torch.cat(toks), torch.cat(preds))


def train_draft(draft: EagleDraft, embed: torch.nn.Embedding, data: DistillData, t2d: torch.Tensor, *,
                steps: int, batch: int, seq: int, ttt_steps: int, lr: float, seed: int,
                log: Callable[[str], None]) -> list[float]:
    """Train with a `ttt_steps`-step unrolled loss (weights 0.8^k); returns per-step accuracy."""
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(draft.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / 10) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / steps))))
    N, T = data.tokens.shape
    acc = [0.0] * ttt_steps
    t0 = time.time()
    for step in range(steps):
        rows = torch.randint(0, N, (batch,), generator=g)
        start = torch.randint(0, T - seq - ttt_steps, (1,), generator=g).item()
        sl = slice(start, start + seq)
        aux = data.aux[rows, sl]
        with torch.no_grad():
            # step k at row t consumes tok_{t+1+k} and must predict the target's choice after it
            emb = [embed(data.tokens[rows, start + 1 + k: start + 1 + k + seq]) for k in range(ttt_steps)]
            labels = [t2d[data.preds[rows, start + 1 + k: start + 1 + k + seq]] for k in range(ttt_steps)]
        logits = draft.unrolled(aux, emb, ttt_steps)
        terms = [0.8 ** k * F.cross_entropy(lg.flatten(0, 1), lb.flatten(), ignore_index=-100)
                 for k, (lg, lb) in enumerate(zip(logits, labels, strict=True))]
        loss = terms[0]
        for term in terms[1:]:  # as sum() added them (0 + the first is the first): same floats
            loss = loss + term
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(draft.parameters(), 1.0)
        opt.step()
        sched.step()
        for k, (lg, lb) in enumerate(zip(logits, labels, strict=True)):
            ok = lb != -100
            a = (lg.argmax(-1)[ok] == lb[ok]).float().mean().item() if ok.any() else 0.0
            acc[k] = a if step == 0 else 0.9 * acc[k] + 0.1 * a
        if (step + 1) % max(1, steps // 10) == 0 or step + 1 == steps:
            log(f"draft step {step + 1}/{steps} loss {loss.item():.3f} "
                f"acc/step {' '.join(f'{a:.2f}' for a in acc)} ({time.time() - t0:.0f}s)")
    return acc
