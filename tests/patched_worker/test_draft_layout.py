"""A draft whose K/V `warm_kv` cannot write: the engine falls back to full_extend at start, says so in its
state, refuses warm_kv at runtime, and stays token-identical to the plain engine when toggled.

The draft is the tiny trained one with a second decoder layer added (small random weights):
warm_kv writes layer 0 only, a deeper layer's K/V needs the draft's attention.
"""

from __future__ import annotations

import json
import random
import shutil

import pytest

from tests.patched_worker.helpers import first_mismatch, mixed_prompts, random_schedule, run_staggered

pytestmark = pytest.mark.engine

NEW = 24


def _two_layer_draft(src: str, dst) -> str:
    import torch
    from safetensors.torch import load_file, save_file

    shutil.copytree(src, dst)
    config = json.loads((dst / "config.json").read_text())
    config["num_hidden_layers"] = 2
    (dst / "config.json").write_text(json.dumps(config, indent=1))
    weights = load_file(str(dst / "model.safetensors"))
    h, inter = config["hidden_size"], config["intermediate_size"]
    q, kv = (
        config["num_attention_heads"] * config["head_dim"],
        config["num_key_value_heads"] * config["head_dim"],
    )
    gen = torch.Generator().manual_seed(0)
    shapes = {
        "self_attn.q_proj": (q, h),
        "self_attn.k_proj": (kv, h),
        "self_attn.v_proj": (kv, h),
        "self_attn.o_proj": (h, q),
        "mlp.gate_proj": (inter, h),
        "mlp.up_proj": (inter, h),
        "mlp.down_proj": (h, inter),
    }
    for name, shape in shapes.items():
        weights[f"layers.1.{name}.weight"] = torch.randn(shape, generator=gen) * 0.02
    for norm in ("input_layernorm", "post_attention_layernorm", "hidden_norm"):
        weights[f"layers.1.{norm}.weight"] = torch.ones(h)
    save_file(weights, str(dst / "model.safetensors"))
    return str(dst)


@pytest.fixture(scope="module")
def two_layer_engine(model_pair, tmp_path_factory):
    from patched_worker.engine import SpecFlipEngine, cpu_engine_kwargs

    draft = _two_layer_draft(model_pair.draft, tmp_path_factory.mktemp("draft") / "two_layers")
    engine = SpecFlipEngine(**cpu_engine_kwargs(model_pair.target, draft, steps=3, topk=1, draft_tokens=4))
    yield engine
    engine.shutdown()


def test_warm_kv_falls_back_to_full_extend_and_the_state_says_why(two_layer_engine):
    from patched_worker.state import Strategy

    state = two_layer_engine.get_speculation_state()
    assert state.strategy is Strategy.FULL_EXTEND and state.strategy_configured is Strategy.WARM_KV
    assert state.strategy_fallback == (
        "warm_kv unsupported: draft has 2 decoder layers (warm_kv writes layer 0 only; deeper layers need attention)"
    )


def test_unavailable_strategies_are_refused_at_runtime(two_layer_engine, monkeypatch):
    from patched_worker.errors import UnsupportedSetup
    from patched_worker.setup_check import ALLOW_COLD_ENV
    from patched_worker.state import Strategy

    with pytest.raises(
        UnsupportedSetup,
        match=r"^warm_kv is not available for this draft \(draft has 2 decoder "
        r"layers .*\): use full_extend$",
    ):
        two_layer_engine.set_strategy(Strategy.WARM_KV)
    monkeypatch.delenv(ALLOW_COLD_ENV, raising=False)
    with pytest.raises(UnsupportedSetup, match=r"^strategy 'cold' is a benchmark-only counter-example"):
        two_layer_engine.set_strategy(Strategy.COLD)
    assert two_layer_engine.get_speculation_state().strategy is Strategy.FULL_EXTEND  # unchanged


def test_the_fallback_engine_toggled_equals_plain(two_layer_engine, engines, model_pair):
    prompts = mixed_prompts(model_pair)[:6]
    want = [
        o["output_ids"]
        for o in engines.plain().generate(
            input_ids=prompts, sampling_params={"max_new_tokens": NEW, "temperature": 0, "ignore_eos": True}
        )
    ]
    before = two_layer_engine.get_speculation_state()
    for seed in range(3):
        rng = random.Random(f"two-layer-{seed}")
        two_layer_engine.schedule_flips(random_schedule(rng, horizon=20))
        got = run_staggered(
            two_layer_engine, prompts, [NEW] * len(prompts), [rng.choice([0.0, 0.1, 0.3]) for _ in prompts]
        )
        assert first_mismatch(got, want) is None, (seed, first_mismatch(got, want))
    after = two_layer_engine.get_speculation_state()
    assert after.off_steps > before.off_steps and after.resyncs > before.resyncs
