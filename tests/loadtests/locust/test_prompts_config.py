"""Prompt sets, request bodies and the load-test config's three sources."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deployments.config import ConfigError
from loadtests.locust.config import LoadConfig, load_config
from loadtests.locust.payloads import build_request
from loadtests.locust.prompts import Prompt, PromptError, corpus_prompts, make_prompts, synthetic_prompts


def test_synthetic_prompts_have_the_word_count_and_distinct_prefixes() -> None:
    ps = synthetic_prompts(20, 64, seed=1)
    assert all(len(p.text.split()) == 64 and p.words == 64 for p in ps)
    assert len({p.text.split()[0] for p in ps}) == 20  # p0:, p1:, ... no shared prefix
    assert ps == synthetic_prompts(20, 64, seed=1)
    assert ps != synthetic_prompts(20, 64, seed=2)


def test_corpus_chunks_are_contiguous_runs_of_the_source_files(tmp_path: Path) -> None:
    a = " ".join(f"a{i}" for i in range(50))
    b = " ".join(f"b{i}" for i in range(50))
    (tmp_path / "a.py").write_text(a)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "b.py").write_text(b)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "c.py").write_text("SKIPPED " * 50)  # test folders are left out
    (tmp_path / "short.py").write_text("too short")
    ps = corpus_prompts(30, 10, seed=3, root=tmp_path)
    assert len(ps) == 30
    for p in ps:
        words = p.text.split()
        assert len(words) == 10 and words[0] != "SKIPPED"
        assert p.text in a or p.text in b
        first = int(words[0][1:])
        assert words == [f"{words[0][0]}{first + k}" for k in range(10)]
    assert ps == corpus_prompts(30, 10, seed=3, root=tmp_path)


def test_default_corpus_is_the_local_stdlib() -> None:
    ps = make_prompts("corpus", 3, 32, seed=0)
    assert len(ps) == 3 and all(len(p.text.split()) == 32 for p in ps)


@pytest.mark.parametrize(("kind", "n", "length"), [("nope", 1, 8), ("synthetic", 0, 8), ("synthetic", 1, 1)])
def test_bad_prompt_sets(kind: str, n: int, length: int) -> None:
    with pytest.raises(PromptError):
        make_prompts(kind, n, length)


def test_empty_corpus_folder_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(PromptError, match="folder of text files"):
        corpus_prompts(1, 5, root=tmp_path)


def test_chat_and_completions_bodies() -> None:
    p = Prompt("hello there", 2)
    chat = build_request(LoadConfig(output_len=7), "m", p)
    assert chat == {
        "model": "m",
        "max_tokens": 7,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
        "messages": [{"role": "user", "content": "hello there"}],
    }
    comp = build_request(LoadConfig(api="completions", ignore_eos=False, temperature=0.5), "m", p)
    assert comp["prompt"] == "hello there" and "messages" not in comp and "ignore_eos" not in comp
    assert comp["temperature"] == 0.5


def test_config_precedence_defaults_json_flags(tmp_path: Path) -> None:
    f = tmp_path / "lt.json"
    f.write_text(json.dumps({"api": "completions", "input_len": 64, "slo_tpot_ms": 40}))
    cfg = load_config(f, {"input_len": "32", "ignore_eos": "false", "slo_ttft_ms": "none", "model": None})
    assert cfg.api == "completions"  # from JSON
    assert cfg.input_len == 32  # flag beats JSON
    assert cfg.ignore_eos is False and cfg.slo_ttft_ms is None and cfg.slo_tpot_ms == 40
    assert cfg.output_len == 128 and cfg.model == ""  # defaults
    assert load_config(None, {}) == LoadConfig()
    assert LoadConfig(**json.loads(cfg.to_json())) == cfg


@pytest.mark.parametrize(
    "overrides",
    [
        {"api": "grpc"},
        {"input_len": "many"},
        {"input_len": "0"},
        {"ignore_eos": "perhaps"},
        {"shape": "fixed:users=2"},
        {"prompt_set": "web"},
    ],
)
def test_bad_settings_are_config_errors(overrides: dict) -> None:
    with pytest.raises((ConfigError, ValueError)):
        load_config(None, overrides)


def test_unknown_json_keys_are_rejected(tmp_path: Path) -> None:
    f = tmp_path / "lt.json"
    f.write_text('{"inputlen": 5}')
    with pytest.raises(ConfigError, match="inputlen"):
        load_config(f)
