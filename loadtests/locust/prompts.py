"""Prompt sets: synthetic (controlled lengths) and a local text corpus. No downloads.

Lengths are in *words* as a stand-in for tokens, because the load generator has
no tokenizer of the served model:
- synthetic prompts are lowercase common English words separated by spaces; with
  Llama-3/GPT-style BPE tokenizers each such word (with its leading space) is
  about one token, so `input_len` words ~ `input_len` prompt tokens (a chat
  template adds a few more). Each prompt opens with a unique numbered tag so no
  two prompts share a long prefix (prefix caching would otherwise skip prefill).
- corpus prompts are whitespace-delimited chunks of Python standard library
  sources (`sysconfig.get_paths()["stdlib"]`, or any folder of text files); code
  tokenizes at roughly 1.5-3 tokens per whitespace word.
The server's `usage.prompt_tokens`, when sent, is recorded per request, so the
real prompt lengths are in the results. Both sets are deterministic for a seed.
"""

from __future__ import annotations

import random
import sysconfig
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Prompt", "PromptError", "corpus_prompts", "make_prompts", "synthetic_prompts"]

# ~160 frequent English words: mostly single tokens in common BPE vocabularies.
_WORDS_TEXT = (
    "the of and to in is was for that with on as by at from his her they this which or be are an had not "
    "but one have were all their there been has when who will more no if out so said what up its about "
    "into than them can only other new some could time these two may then do first any my now such like "
    "our over man me even most made after also did many before must through back years where much your way "
    "well down should because each just those people how too little state good very make world still own "
    "see men work long get here between both life being under never day same another know while last might "
    "us great old year off come since against go came right used take three small large water place house "
    "number part word look find give hand high point city line name light night home show open end"
)
_WORDS = tuple(dict.fromkeys(_WORDS_TEXT.split()))


class PromptError(ValueError):
    """A prompt set that cannot be built."""


@dataclass(frozen=True)
class Prompt:
    """One prompt; `words` is its length in the unit described in the module docstring."""

    text: str
    words: int


def synthetic_prompts(n: int, input_len: int, seed: int = 0) -> list[Prompt]:
    """`n` prompts of `input_len` words each, made of common English words."""
    if n < 1 or input_len < 2:
        raise PromptError(f"need n >= 1 and input_len >= 2 words, got n={n}, input_len={input_len}")
    rng = random.Random(seed)
    out = []
    for i in range(n):
        body = " ".join(rng.choice(_WORDS) for _ in range(input_len - 1))
        out.append(Prompt(text=f"p{i}: {body}", words=input_len))
    return out


_SKIP_DIRS = {"site-packages", "dist-packages", "__pycache__"}


def _wanted(path: Path, root: Path) -> bool:
    parts = path.relative_to(root).parts
    return not _SKIP_DIRS.intersection(parts) and not any("test" in part for part in parts)


def _corpus_files(root: Path) -> list[Path]:
    files = sorted(p for p in root.rglob("*.py") if _wanted(p, root))
    return files or sorted(p for p in root.rglob("*.txt") if _wanted(p, root))


def corpus_prompts(n: int, input_len: int, seed: int = 0, root: Path | None = None) -> list[Prompt]:
    """`n` chunks of `input_len` whitespace words from local text files, picked with `seed`."""
    if n < 1 or input_len < 1:
        raise PromptError(f"need n >= 1 and input_len >= 1, got n={n}, input_len={input_len}")
    base = root if root is not None else Path(sysconfig.get_paths()["stdlib"])
    files = _corpus_files(base)
    if not files:
        raise PromptError(f"no .py or .txt files under {base}: pass a folder of text files as the corpus")
    rng = random.Random(seed)
    out: list[Prompt] = []
    attempts = 0
    while len(out) < n:
        attempts += 1
        if attempts > 50 * n:
            raise PromptError(f"could not find {n} chunks of {input_len} words under {base}")
        path = files[rng.randrange(len(files))]
        try:
            words = path.read_text(encoding="utf-8", errors="replace").split()
        except OSError:
            continue
        if len(words) < input_len:
            continue
        at = rng.randrange(len(words) - input_len + 1)
        out.append(Prompt(text=" ".join(words[at : at + input_len]), words=input_len))
    return out


def make_prompts(
    kind: str, n: int, input_len: int, seed: int = 0, corpus_dir: str | None = None
) -> list[Prompt]:
    """The prompt set named `kind`: `synthetic` or `corpus`."""
    if kind == "synthetic":
        return synthetic_prompts(n, input_len, seed)
    if kind == "corpus":
        return corpus_prompts(n, input_len, seed, Path(corpus_dir) if corpus_dir else None)
    raise PromptError(f"unknown prompt set {kind!r}: use synthetic or corpus")
