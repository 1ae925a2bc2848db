"""Local training text: the Python standard library's sources, split deterministically."""

from __future__ import annotations

import os
import sysconfig
from dataclasses import dataclass

__all__ = ["CHAT_TEMPLATE", "SPECIAL_TOKENS", "Corpus", "held_out_prompts", "load_corpus", "train_tokenizer"]

SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<pad>", "<|user|>", "<|assistant|>", "<|system|>", "<|end|>"]
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
_SKIP_DIRS = {"test", "tests", "idle_test", "encodings", "site-packages", "__pycache__", "lib2to3", "turtledemo"}


@dataclass(frozen=True)
class Corpus:
    train: list[str]  # file texts used for training
    held_out: list[str]  # every `hold_out_every`-th file: prompts for evaluation only


def _stdlib_files() -> list[str]:
    root = sysconfig.get_paths()["stdlib"]
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
        out += [os.path.join(dirpath, f) for f in sorted(filenames) if f.endswith(".py")]
    return sorted(out)


def load_corpus(max_chars: int, hold_out_every: int = 12) -> Corpus:
    """Files in sorted order; file i is held out when i % hold_out_every == 0."""
    train: list[str] = []
    held: list[str] = []
    total = 0
    for i, path in enumerate(_stdlib_files()):
        with open(path, encoding="utf-8", errors="ignore") as f:
            text = f.read()
        if len(text) < 200:
            continue
        if i % hold_out_every == 0:
            held.append(text)
        elif total < max_chars:
            train.append(text)
            total += len(text)
    if not train or not held:
        raise RuntimeError("specflip models: found no Python standard library sources to train on")
    return Corpus(train=train, held_out=held)


def train_tokenizer(texts: list[str], vocab_size: int):  # -> transformers.PreTrainedTokenizerFast
    """Byte-level BPE trained on `texts`, with the chat special tokens and template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                 pad_token="<pad>")
    hf.chat_template = CHAT_TEMPLATE
    return hf


def held_out_prompts(tokenizer, n: int, length: int, seed: int) -> list[list[int]]:
    """`n` windows of `length` tokens from the held-out standard-library files (never trained on)."""
    import random

    rng = random.Random(seed)
    texts = load_corpus(max_chars=1).held_out
    out: list[list[int]] = []
    while len(out) < n:
        ids = tokenizer(rng.choice(texts), add_special_tokens=False)["input_ids"]
        if len(ids) > length + 1:
            start = rng.randrange(0, len(ids) - length)
            out.append(ids[start : start + length])
    return out
