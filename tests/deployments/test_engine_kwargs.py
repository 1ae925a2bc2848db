"""The config -> sglang.Engine keywords mapping the replica's factory uses (no engine started)."""

from __future__ import annotations

from deployments.config import SpecFlipConfig
from deployments.replica.engine import engine_kwargs

MODEL = {"path": "/m/target", "draft_path": "/m/draft"}


def test_cuda_engine_gets_eagle3_with_the_configured_shape_and_the_engine_settings() -> None:
    config = SpecFlipConfig.parse(
        {
            "model": MODEL,
            "speculation": {"steps": 2, "topk": 4, "draft_tokens": 16},
            "engine": {
                "dtype": "bfloat16",
                "mem_fraction_static": 0.8,
                "context_length": 4096,
                "extra": {"disable_radix_cache": True},
            },
        }
    )
    kw = engine_kwargs(config)
    assert {
        k: kw[k]
        for k in (
            "speculative_algorithm",
            "speculative_draft_model_path",
            "speculative_num_steps",
            "speculative_eagle_topk",
            "speculative_num_draft_tokens",
        )
    } == {
        "speculative_algorithm": "EAGLE3",
        "speculative_draft_model_path": "/m/draft",
        "speculative_num_steps": 2,
        "speculative_eagle_topk": 4,
        "speculative_num_draft_tokens": 16,
    }
    assert (kw["dtype"], kw["mem_fraction_static"], kw["context_length"], kw["max_running_requests"]) == (
        "bfloat16",
        0.8,
        4096,
        128,
    )
    assert kw["disable_radix_cache"] is True and "sleep_on_idle" not in kw and "device" not in kw


def test_cpu_engine_runs_fp32_on_the_shims_backend_and_sleeps_when_idle() -> None:
    config = SpecFlipConfig.parse({"model": MODEL, "engine": {"device": "cpu"}, "replicas": {"num_gpus": 0}})
    kw = engine_kwargs(config)
    assert (kw["device"], kw["dtype"], kw["attention_backend"], kw["speculative_algorithm"]) == (
        "cpu",
        "float32",
        "intel_amx",
        "EAGLE3",
    )
    assert kw["sleep_on_idle"] is True  # an idle scheduler would spin a whole core
    off = SpecFlipConfig.parse(
        {**config.model_dump(mode="json"), "engine": {"device": "cpu", "extra": {"sleep_on_idle": False}}}
    )
    assert engine_kwargs(off)["sleep_on_idle"] is False


def test_without_a_draft_the_engine_runs_plain() -> None:
    config = SpecFlipConfig.parse({"model": {"path": "/m/target"}})
    assert not config.speculative and "speculative_algorithm" not in engine_kwargs(config)
