"""Llama-3.1-8B-shaped target + EAGLE-3 draft directories for GPU benchmarks, without weights.

    specflip models shapes --out DIR [--tokenizer-from models/tiny/target]

SGLang's `load_format="dummy"` fills random weights, so a config is all a throughput run
needs. Serving such a model over HTTP also needs a tokenizer for the full 128,256-token
vocabulary: `--tokenizer-from` takes a local tokenizer (the tiny pair's) and pads its
vocabulary with filler tokens `<f12345>` (a leading space, then the id), so text encodes as
with the original tokenizer and any id a random model samples decodes to readable text.
Acceptance with random weights is ~1 token: benchmarks set `SGLANG_SIMULATE_ACC_LEN`.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

__all__ = ["EAGLE3_8B", "LLAMA_8B", "pad_tokenizer", "write_shapes"]

_VOCAB = 128256  # Llama-3.1's vocabulary
LLAMA_8B = dict(
    architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=4096, intermediate_size=14336,
    num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8, head_dim=128, vocab_size=_VOCAB,
    max_position_embeddings=8192, rms_norm_eps=1e-5, rope_theta=500000.0, hidden_act="silu",
    tie_word_embeddings=False, torch_dtype="bfloat16", bos_token_id=128000, eos_token_id=128001)
EAGLE3_8B = dict(
    architectures=["LlamaForCausalLMEagle3"], model_type="llama", hidden_size=4096, intermediate_size=14336,
    num_hidden_layers=1, num_attention_heads=32, num_key_value_heads=8, head_dim=128, vocab_size=_VOCAB,
    draft_vocab_size=32000, target_hidden_size=4096, max_position_embeddings=8192, rms_norm_eps=1e-5,
    rope_theta=500000.0, hidden_act="silu", tie_word_embeddings=False, torch_dtype="bfloat16",
    bos_token_id=128000, eos_token_id=128001)

_TOKENIZER_FILES = ("tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json")


def write_shapes(root: str | Path, tokenizer_from: str | Path | None = None) -> tuple[str, str]:
    """Write `root/target-8b` and `root/eagle3-8b` (config.json; the target's tokenizer if given)."""
    paths = []
    for name, cfg in (("target-8b", LLAMA_8B), ("eagle3-8b", EAGLE3_8B)):
        d = Path(root) / name
        d.mkdir(parents=True, exist_ok=True)
        (d / "config.json").write_text(json.dumps(cfg, indent=1))
        paths.append(str(d))
    if tokenizer_from is not None:
        if not _has_chat_template(Path(tokenizer_from)):
            raise ValueError(
                f"{tokenizer_from}: no chat template (chat_template.jinja or tokenizer_config.json's "
                "chat_template); the OpenAI chat route needs one"
            )
        pad_tokenizer(tokenizer_from, paths[0], _VOCAB)
    return paths[0], paths[1]


def _has_chat_template(src: Path) -> bool:
    if (src / "chat_template.jinja").exists():
        return True
    config = src / "tokenizer_config.json"
    return config.exists() and bool(json.loads(config.read_text()).get("chat_template"))


def pad_tokenizer(src: str | Path, dst: str | Path, vocab_size: int) -> int:
    """Copy the tokenizer in `src` to `dst` with its BPE vocabulary padded to `vocab_size` ids.

    Returns the number of filler tokens added. Raises ValueError for a tokenizer that is not
    a byte-level BPE `tokenizer.json`, or one already larger than `vocab_size`.
    """
    src, dst = Path(src), Path(dst)
    spec = json.loads((src / "tokenizer.json").read_text())
    model = spec.get("model", {})
    if model.get("type") != "BPE" or (spec.get("decoder") or {}).get("type") != "ByteLevel":
        raise ValueError(f"{src}/tokenizer.json: need a byte-level BPE tokenizer to pad")
    vocab: dict[str, int] = model["vocab"]
    taken = set(vocab.values()) | {t["id"] for t in spec.get("added_tokens", [])}
    if max(taken) >= vocab_size:
        raise ValueError(f"{src}: tokenizer has ids up to {max(taken)}, more than vocab_size {vocab_size}")
    added = 0
    for i in range(vocab_size):
        if i not in taken:
            vocab[f"\u0120<f{i}>"] = i  # "Ġ" is byte-level BPE's leading space
            added += 1
    dst.mkdir(parents=True, exist_ok=True)
    (dst / "tokenizer.json").write_text(json.dumps(spec, ensure_ascii=False))
    for name in _TOKENIZER_FILES:
        if (src / name).exists():
            shutil.copyfile(src / name, dst / name)
    return added
