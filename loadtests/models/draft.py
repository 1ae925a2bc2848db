"""EAGLE-3 draft head for training, with the math and weight names of SGLang 0.5.17's
`srt/models/llama_eagle3.py` (one decoder layer, "midlayer.*" checkpoint names):

    res = fc(aux_t)                               # aux_t: target layers' outputs at t, [3H]
    x   = cat[input_layernorm(embed(tok_{t+1})), hidden_norm(res)]   # [2H] into q/k/v
    r1  = o_proj(attn(x)) + res
    h   = mlp(post_attention_layernorm(r1)) + r1  # pre-norm hidden, fed to the next draft step
    logits = lm_head(norm(h))                     # over the draft vocab; d2t maps to target ids

The next draft step skips fc (its hidden input is already H wide). `embed_tokens` is
shared from the target at load time, so it is not saved.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["EagleDraft", "RMSNorm"]


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def _rope(x: torch.Tensor, pos: torch.Tensor, theta: float) -> torch.Tensor:
    """Neox-style rotary embedding (Llama): x [..., T, heads, hd], pos [..., T]."""
    hd = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
    ang = pos.float()[..., None] * inv  # [..., T, hd/2]
    cos, sin = torch.cat([ang, ang], -1).cos()[..., None, :], torch.cat([ang, ang], -1).sin()[..., None, :]
    x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


class EagleDraft(nn.Module):
    def __init__(self, hidden: int, heads: int, kv_heads: int, intermediate: int, draft_vocab: int,
                 n_aux: int = 3, rope_theta: float = 10000.0, eps: float = 1e-5):
        super().__init__()
        self.heads, self.kv_heads, self.hd, self.theta = heads, kv_heads, hidden // heads, rope_theta
        self.fc = nn.Linear(n_aux * hidden, hidden, bias=False)
        self.hidden_norm, self.input_layernorm = RMSNorm(hidden, eps), RMSNorm(hidden, eps)
        self.post_attention_layernorm, self.norm = RMSNorm(hidden, eps), RMSNorm(hidden, eps)
        self.q_proj = nn.Linear(2 * hidden, heads * self.hd, bias=False)
        self.k_proj = nn.Linear(2 * hidden, kv_heads * self.hd, bias=False)
        self.v_proj = nn.Linear(2 * hidden, kv_heads * self.hd, bias=False)
        self.o_proj = nn.Linear(heads * self.hd, hidden, bias=False)
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)
        self.lm_head = nn.Linear(hidden, draft_vocab, bias=False)

    def qkv(self, emb: torch.Tensor, res: torch.Tensor, pos: torch.Tensor):
        """emb, res [B, T, H]; pos [B, T] -> q [B,T,h,d], k/v [B,T,h,d] (kv heads repeated)."""
        x = torch.cat([self.input_layernorm(emb), self.hidden_norm(res)], -1)
        B, T = x.shape[:2]
        q = _rope(self.q_proj(x).view(B, T, self.heads, self.hd), pos, self.theta)
        k = _rope(self.k_proj(x).view(B, T, self.kv_heads, self.hd), pos, self.theta)
        v = self.v_proj(x).view(B, T, self.kv_heads, self.hd)
        rep = self.heads // self.kv_heads
        return q, k.repeat_interleave(rep, 2), v.repeat_interleave(rep, 2)

    def finish(self, attn: torch.Tensor, res: torch.Tensor):
        """attn [B,T,h,d] -> (pre-norm hidden h [B,T,H], logits [B,T,V_draft])."""
        r1 = self.o_proj(attn.flatten(2)) + res
        x = self.post_attention_layernorm(r1)
        h = self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x)) + r1
        return h, self.lm_head(self.norm(h))

    def unrolled(self, aux: torch.Tensor, emb_next: list[torch.Tensor], steps: int):
        """Training-time test: the first step sees the target's aux states, later steps their own hidden.

        aux [B,T,3H]: target features at t; emb_next[k] [B,T,H]: embedding of tok_{t+1+k}.
        Row t of step k is the chain whose last target-verified position is t: it sits at
        position t+k and attends to step-0 keys at positions <= t plus its own chain's keys
        of steps 1..k (as the draft KV cache looks at inference). Returns logits per step.
        """
        B, T = aux.shape[:2]
        pos = torch.arange(T).expand(B, T)
        res = self.fc(aux)
        q, k0, v0 = self.qkv(emb_next[0], res, pos)
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        scale = self.hd ** -0.5
        chain_k: list[torch.Tensor] = []
        chain_v: list[torch.Tensor] = []
        out = []
        for step in range(steps):
            if step > 0:
                q, k, v = self.qkv(emb_next[step], res, pos + step)
                chain_k.append(k)
                chain_v.append(v)
            s0 = torch.einsum("bqhd,bkhd->bhqk", q, k0) * scale
            s0 = s0.masked_fill(~causal, float("-inf"))
            sd = [torch.einsum("bthd,bthd->bht", q, k)[..., None] * scale for k in chain_k]  # diagonal keys
            p = torch.softmax(torch.cat([s0, *sd], -1), -1)
            attn = torch.einsum("bhqk,bkhd->bqhd", p[..., :T], v0)
            for j, v in enumerate(chain_v):
                attn = attn + p[..., T + j].permute(0, 2, 1)[..., None] * v
            res, logits = self.finish(attn, res)
            out.append(logits)
        return out

    def sglang_state_dict(self, hot_ids: torch.Tensor, vocab: int) -> dict[str, torch.Tensor]:
        """Weights under the names SGLang's LlamaForCausalLMEagle3.load_weights reads."""
        names = {"fc": "fc", "hidden_norm": "midlayer.hidden_norm", "input_layernorm": "midlayer.input_layernorm",
                 "post_attention_layernorm": "midlayer.post_attention_layernorm", "norm": "norm",
                 "lm_head": "lm_head", "q_proj": "midlayer.self_attn.q_proj", "k_proj": "midlayer.self_attn.k_proj",
                 "v_proj": "midlayer.self_attn.v_proj", "o_proj": "midlayer.self_attn.o_proj",
                 "gate_proj": "midlayer.mlp.gate_proj", "up_proj": "midlayer.mlp.up_proj",
                 "down_proj": "midlayer.mlp.down_proj"}
        sd = {f"{names[n]}.weight": m.get_parameter("weight").detach().float().contiguous() for n, m in self.named_children()}
        t2d = torch.zeros(vocab, dtype=torch.bool)
        t2d[hot_ids] = True
        sd["d2t"] = (hot_ids - torch.arange(hot_ids.numel())).to(torch.int64)  # target = draft + d2t[draft]
        sd["t2d"] = t2d
        return sd
