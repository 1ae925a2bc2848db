"""Comparing bf16 GPU outputs with the plain engine's: whole lengths exact, divergences only at near-ties.

bf16 rounding differs between a plain decode and a verify forward (and between batch shapes),
so where the plain run's top two tokens are within a hair the runs may pick differently.
Every divergence must be such a near-tie: at the first token where a request's output
parts from plain, plain's log-prob of its own choice minus its log-prob of the token the
speculative run chose is at most NEAR_TIE. Past that token the outputs are no longer
comparable; the length must still be exact.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

__all__ = ["NEAR_TIE", "Divergence", "compare", "report_dir", "write_report"]

NEAR_TIE = 0.25  # nats


@dataclass(frozen=True)
class Divergence:
    request: int
    position: int  # first differing token; -1 when only the length differs
    gap: float  # plain log-prob of its choice minus that of the speculative run's choice (inf: not in plain's top-k)
    near_tie: bool
    got_len: int
    want_len: int


def compare(got: list[list[int]], want: list[list[int]], top) -> list[Divergence]:
    """Every request whose output differs from `want` (same length expected; top = plain's top logprobs)."""
    out = []
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        k = next((k for k, (a, b) in enumerate(zip(g, w, strict=False)) if a != b), None)
        if k is None:
            if len(g) != len(w):
                out.append(Divergence(i, -1, float("inf"), False, len(g), len(w)))
            continue
        lp = {t: v for v, t, *_ in top[i][k]}
        gap = lp[w[k]] - lp[g[k]] if g[k] in lp and w[k] in lp else float("inf")
        out.append(Divergence(i, k, gap, gap <= NEAR_TIE and len(g) == len(w), len(g), len(w)))
    return out


def report_dir(default: str) -> Path:
    path = Path(os.environ.get("SPECFLIP_GPU_REPORT_DIR", default))
    path.mkdir(parents=True, exist_ok=True)
    return path


def write_report(directory: Path, name: str, payload: dict, markdown: str) -> None:
    def plain(value):
        if isinstance(value, Divergence):
            return asdict(value)
        raise TypeError(type(value).__name__)

    (directory / f"{name}.json").write_text(json.dumps(payload, indent=1, default=plain))
    (directory / f"{name}.md").write_text(markdown)
    print(markdown, flush=True)
