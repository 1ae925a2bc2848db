"""Setups the speculation switch does not support are refused at start, in one line that says what and why.

The checks are pure (engine keywords in, UnsupportedSetup out); the last test shows that
`SpecFlipEngine` runs them before SGLang starts anything.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from patched_worker.errors import UnsupportedSetup
from patched_worker.setup_check import ALLOW_COLD_ENV, check_engine_setup, check_strategy
from patched_worker.state import SpeculationState, Strategy, SwitchConfig

SPEC = {"model_path": "/m", "speculative_algorithm": "EAGLE3", "speculative_draft_model_path": "/d"}


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            {"enable_dp_attention": True},
            r"^enable_dp_attention is not supported .*: drop enable_dp_attention$",
        ),
        (
            {"tp_size": 2},
            r"^tp_size=2 is not supported .*tensor parallelism.*: use tp_size=1 and scale with more",
        ),
        ({"pp_size": 4}, r"^pp_size=4 is not supported .*pipeline parallelism.*: use pp_size=1"),
        ({"dp_size": 2}, r"^dp_size=2 is not supported .*data parallelism.*: use dp_size=1"),
    ],
)
def test_parallel_setups_are_refused_with_what_and_why(extra, message):
    with pytest.raises(UnsupportedSetup, match=message) as err:
        check_engine_setup({**SPEC, **extra}, SwitchConfig())
    assert "\n" not in str(err.value)


def test_a_server_args_object_is_checked_like_keywords():
    server_args = SimpleNamespace(
        speculative_algorithm="EAGLE3", tp_size=2, pp_size=1, dp_size=1, enable_dp_attention=False
    )
    with pytest.raises(UnsupportedSetup, match=r"^tp_size=2 "):
        check_engine_setup({"server_args": server_args}, SwitchConfig())


def test_supported_setups_pass():
    check_engine_setup({**SPEC, "tp_size": 1, "pp_size": 1, "dp_size": 1}, SwitchConfig())
    check_engine_setup(SPEC, SwitchConfig(strategy=Strategy.FULL_EXTEND))
    # without speculation the engine runs plain and reports itself unswitchable: nothing to refuse
    check_engine_setup({"model_path": "/m", "tp_size": 8}, SwitchConfig())


def test_cold_is_refused_outside_benchmarks(monkeypatch):
    monkeypatch.delenv(ALLOW_COLD_ENV, raising=False)
    with pytest.raises(
        UnsupportedSetup,
        match=r"^strategy 'cold' is a benchmark-only counter-example .*radix "
        r"cache.*: use warm_kv, or set SPECFLIP_ALLOW_COLD=1",
    ):
        check_engine_setup(SPEC, SwitchConfig(strategy=Strategy.COLD))
    with pytest.raises(UnsupportedSetup, match="benchmark-only"):
        check_strategy(Strategy.COLD, allow_cold=False)
    check_engine_setup(SPEC, SwitchConfig(strategy=Strategy.COLD, allow_cold=True))
    monkeypatch.setenv(ALLOW_COLD_ENV, "1")
    check_engine_setup(SPEC, SwitchConfig(strategy=Strategy.COLD))


def test_state_round_trips_through_json_with_the_operator_fields():
    state = SpeculationState(
        enabled=False,
        requested=True,
        strategy=Strategy.FULL_EXTEND,
        steps=3,
        topk=4,
        draft_tokens=8,
        toggles=5,
        accept_length_ema=2.5,
        on_steps=10,
        off_steps=7,
        resyncs=2,
        running=3,
        waiting=0,
        off_cuda_graphs=True,
        off_cuda_graphs_bytes=123456,
        last_resync_ms=4.5,
        resync_ms_total=9.0,
        resyncs_timed=2,
        strategy_configured=Strategy.WARM_KV,
        strategy_fallback="warm_kv unsupported: draft has 2 decoder layers",
        trace=[(1, "on", 3, 2.0)],
    )
    assert SpeculationState.from_json(state.to_json()) == state


@pytest.mark.engine
def test_the_engine_refuses_before_starting_anything(model_pair, monkeypatch):
    import psutil

    from patched_worker.engine import SpecFlipEngine, cpu_engine_kwargs

    monkeypatch.delenv(ALLOW_COLD_ENV, raising=False)
    children = {p.pid for p in psutil.Process().children(recursive=True)}
    kwargs = cpu_engine_kwargs(model_pair.target, model_pair.draft, tp_size=2)
    with pytest.raises(UnsupportedSetup, match=r"^tp_size=2 is not supported"):
        SpecFlipEngine(**kwargs)
    with pytest.raises(UnsupportedSetup, match=r"^strategy 'cold'"):
        SpecFlipEngine(
            SwitchConfig(strategy=Strategy.COLD), **cpu_engine_kwargs(model_pair.target, model_pair.draft)
        )
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= children  # no scheduler was spawned
