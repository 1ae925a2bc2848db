"""8B-shaped benchmark model dirs: configs SGLang reads, and a tokenizer padded to the 8B vocabulary."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from loadtests.models.dummy8b import LLAMA_8B, pad_tokenizer, write_shapes


def test_shapes_with_a_padded_tokenizer_encode_like_the_original_and_decode_every_id(model_pair, tmp_path):
    target, draft = write_shapes(tmp_path, tokenizer_from=model_pair.target)
    assert json.loads((Path(target) / "config.json").read_text())["hidden_size"] == 4096
    draft_cfg = json.loads((Path(draft) / "config.json").read_text())
    assert draft_cfg["architectures"] == ["LlamaForCausalLMEagle3"] and draft_cfg["draft_vocab_size"] == 32000

    small = AutoTokenizer.from_pretrained(model_pair.target)
    big = AutoTokenizer.from_pretrained(target)
    assert len(small) < len(big) == LLAMA_8B["vocab_size"]
    text = "def add(a, b):\n    return a + b  # the of and 12345"
    assert big.encode(text) == small.encode(text)
    ids = random.Random(0).sample(range(len(small), len(big)), 50)
    assert big.decode(ids) == "".join(f" <f{i}>" for i in ids)
    # the chat template travels with it (the OpenAI chat route renders it)
    assert big.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False
    ) == small.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)


def test_padding_refuses_a_tokenizer_larger_than_the_vocabulary(model_pair, tmp_path):
    with pytest.raises(ValueError, match="more than vocab_size 100"):
        pad_tokenizer(model_pair.target, tmp_path, 100)


def test_padding_refuses_what_is_not_byte_level_bpe(tmp_path):
    (tmp_path / "tokenizer.json").write_text(json.dumps({"model": {"type": "WordPiece", "vocab": {}}}))
    with pytest.raises(ValueError, match="byte-level BPE"):
        pad_tokenizer(tmp_path, tmp_path / "out", 10)


def test_shapes_refuse_a_tokenizer_without_a_chat_template(model_pair, tmp_path):
    src = tmp_path / "tok"
    src.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (src / name).write_bytes((Path(model_pair.target) / name).read_bytes())
    config = json.loads((src / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (src / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="no chat template"):
        write_shapes(tmp_path / "out", tokenizer_from=src)
