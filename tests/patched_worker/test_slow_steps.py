"""`SpecSwitch.step` records a step whose host call is slow, with its kind and batch size, and only such
steps. The steps here are stand-ins that sleep (an injected slow step): what is under test is the
timing and the kind read from the counters a real step moves, not SGLang."""

from __future__ import annotations

import gc
import re
import time
from types import SimpleNamespace

import pytest

from patched_worker import step_probe
from patched_worker import switch as switch_mod
from patched_worker.state import SpeculationState
from patched_worker.switch import SpecSwitch


def _switch(monkeypatch: pytest.MonkeyPatch) -> SpecSwitch:
    monkeypatch.setattr(switch_mod.draft_sync, "warm_kv_unsupported", lambda worker: None)
    worker = SimpleNamespace(speculative_num_steps=2, topk=4, speculative_num_draft_tokens=16)
    return SpecSwitch(worker, switch_mod.SwitchConfig(start_enabled=False))


def _stand_in(sw: SpecSwitch, sleep_s: float, counter: str | None):
    """A step that takes `sleep_s` on the host and moves `counter` as a real step of that kind does."""

    def step(upstream, batch, on_publish, grammar_barrier):
        time.sleep(sleep_s)
        if counter is not None:
            setattr(sw, counter, getattr(sw, counter) + 1)
        return "result"

    return step


def _marking_off_prefill(monkeypatch: pytest.MonkeyPatch, target_s: float, kv_phase=None) -> None:
    """The OFF prefill replaced by a stand-in that marks "publish", sleeps `target_s` in "target" and,
    given `kv_phase`, runs it as its "draft K/V" phase: what is under test is the switch's lines."""

    def off_prefill(worker, batch, on_publish, write_kv, mark):
        mark("publish")
        time.sleep(target_s)
        mark("target")
        if kv_phase is not None:
            kv_phase()
            mark("draft K/V")
        return "result"

    monkeypatch.setattr(switch_mod.off_prefill, "run_off_prefill", off_prefill)
    monkeypatch.setattr(switch_mod.off_prefill, "supported", lambda batch: True)


def _the_line(caplog: pytest.LogCaptureFixture, pattern: str) -> tuple[str, ...]:
    """The groups of the one line logged, which must match `pattern` whole."""
    [line] = caplog.messages
    m = re.fullmatch(pattern, line)
    assert m, line
    return m.groups()


def test_a_slow_step_is_recorded_with_its_kind_and_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(switch_mod, "SLOW_STEP_S", 0.05)
    sw = _switch(monkeypatch)
    batch = SimpleNamespace(seq_lens=list(range(37)))
    cases = [  # (extend, counters moved, sleep) -> kind recorded, or None when fast
        (False, ("resyncs", "off_steps"), 0.08, "resync"),
        (False, ("on_steps",), 0.08, "on"),
        (False, ("off_steps",), 0.0, None),
        (True, (), 0.08, "prefill_off"),
    ]
    for extend, counters, sleep_s, _ in cases:

        def step(upstream, b, on_publish, grammar_barrier, counters=counters, sleep_s=sleep_s):
            time.sleep(sleep_s)
            for c in counters:
                setattr(sw, c, getattr(sw, c) + 1)
            return "result"

        monkeypatch.setattr(sw, "prefill_step" if extend else "decode_step", step)
        assert sw.step(extend, None, batch, None, None) == "result"
    kinds = [entry[1] for entry in sw.slow_step_log]
    assert kinds == [k for *_, k in cases if k is not None]
    assert sw.slow_steps == 3 and all(entry[2] == 37 and entry[3] >= 50 for entry in sw.slow_step_log)

    state = sw.state(running=37, waiting=0, version="0.5.17")
    assert state.slow_steps == 3 and state.slow_step_log[0][1:3] == ("resync", 37)
    again = SpeculationState.from_json(state.to_json())  # the RPC's way back to the replica
    assert again.slow_step_log == state.slow_step_log


def test_the_log_keeps_the_most_recent_slow_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(switch_mod, "SLOW_STEP_S", 0.0)
    sw = _switch(monkeypatch)
    monkeypatch.setattr(sw, "decode_step", _stand_in(sw, 0.0, "off_steps"))
    for n in range(1, 21):
        sw.step(False, None, SimpleNamespace(seq_lens=[0] * n), None, None)
    assert sw.slow_steps == 20
    assert [entry[2] for entry in sw.slow_step_log] == list(range(5, 21))  # the last 16, oldest first


def test_a_slow_extend_step_s_line_says_which_allocator_calls_it_made(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """On CUDA an extend step reads the allocators' counts before and after; a slow one's line names
    those that moved. Here the counts are a fake (this host has no CUDA): a cudaMalloc retry that
    freed the cache, read as PyTorch would count it."""
    monkeypatch.setattr(switch_mod, "SLOW_STEP_S", 0.05)
    sw = _switch(monkeypatch)
    counts = iter([(0, 10, 2, 0, 3, 0), (1, 12, 7, 0, 3, 0)])  # before, after
    monkeypatch.setattr(switch_mod.step_probe, "counters", lambda: next(counts))
    monkeypatch.setattr(sw, "prefill_step", _stand_in(sw, 0.08, None))
    with caplog.at_level("INFO", logger=switch_mod.__name__):
        sw.step(True, None, SimpleNamespace(seq_lens=[0] * 18), None, None)
    [line] = caplog.messages
    assert re.fullmatch(
        r"specflip: slow prefill_off step at batch 18: \d+ ms on the host "
        r"\(gc \d+ ms; allocator: alloc retries \+1, cudaMalloc \+2, cudaFree \+5\)",
        line,
    ), line
    assert sw.slow_step_log[0][1:3] == ("prefill_off", 18)


def test_a_slow_off_prefill_s_line_splits_its_time_by_the_phases_it_marked(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The switch hands the OFF prefill its probe's `mark`; each phase's time is the gap from the mark
    before. The prefill here is a stand-in that sleeps in its "target" phase (no engine: what is under
    test is the line), and the collector runs for real inside the step."""
    monkeypatch.setattr(switch_mod, "SLOW_STEP_S", 0.05)
    sw = _switch(monkeypatch)

    def collect_cycles() -> None:
        cycles = [[] for _ in range(300_000)]
        for c in cycles:
            c.append(c)  # garbage only the collector frees
        del cycles, c
        gc.collect()

    _marking_off_prefill(monkeypatch, 0.08, kv_phase=collect_cycles)
    with caplog.at_level("INFO", logger=switch_mod.__name__):
        assert sw.step(True, None, SimpleNamespace(seq_lens=[0] * 18), None, None) == "result"
    total, publish, target, kv, rest, gc_ms = map(
        int,
        _the_line(
            caplog,
            r"specflip: slow prefill_off step at batch 18: (\d+) ms on the host \(publish (\d+) ms, "
            r"target (\d+) ms, draft K/V (\d+) ms, rest (\d+) ms; gc (\d+) ms\)",
        ),
    )
    assert target >= 80 and publish <= 5 and abs(total - (publish + target + kv + rest)) <= 3
    assert 1 <= gc_ms <= kv + 1  # the collector's run, inside the K/V phase
    assert sw._probe is None  # no probe outlives its step


def test_the_gc_clock_counts_the_collector_s_runs() -> None:
    step_probe.install_gc_clock()
    step_probe.install_gc_clock()  # once per process however often asked
    assert gc.callbacks.count(step_probe._on_gc) == 1
    before = step_probe.gc_paused_s()
    garbage = [[i] for i in range(200_000)]
    del garbage
    gc.collect()
    assert step_probe.gc_paused_s() > before


def test_allocator_counts_read_as_none_moved_or_absent() -> None:
    assert step_probe.moved((1, 2, 3, 4, 5, 6), (1, 2, 3, 4, 5, 6)) == "allocator: none"
    assert step_probe.moved((0, 0, 0, 0, 0, 0), (0, 0, 0, 0, 1, 0)) == "allocator: cudaHostAlloc +1"
    assert step_probe.moved(None, None) == ""
    assert step_probe.counters() is None  # no CUDA on this host: nothing read, nothing said
    assert step_probe.StepProbe(allocator=True).note(time.perf_counter()).startswith("gc ")


def test_every_prefill_step_s_host_time_is_said_as_means_once_per_batch_of_steps(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Not only slow steps: each kind's mean host time over its last PREFILL_MEANS_EVERY prefill steps,
    split by the phases they marked (OFF prefills: the stand-in sleeps 20 ms in "target"); decode
    steps do not count."""
    monkeypatch.setattr(switch_mod, "PREFILL_MEANS_EVERY", 3)
    sw = _switch(monkeypatch)
    _marking_off_prefill(monkeypatch, 0.02)
    monkeypatch.setattr(sw, "decode_step", _stand_in(sw, 0.0, "off_steps"))
    batch = SimpleNamespace(seq_lens=[0] * 4)
    with caplog.at_level("INFO", logger=switch_mod.__name__):
        for extend in (True, False, True, False, False):
            sw.step(extend, None, batch, None, None)
        assert caplog.messages == []  # two prefills so far, and decode steps never count
        sw.step(True, None, batch, None, None)
    host, publish, target, rest = map(
        float,
        _the_line(
            caplog,
            r"specflip: prefill_off steps' host time, mean of the last 3: ([\d.]+) ms "
            r"\(publish ([\d.]+), target ([\d.]+), rest ([\d.]+) ms\)",
        ),
    )
    assert target >= 20 and publish < 5 and abs(host - (publish + target + rest)) < 0.5
    assert sw.slow_steps == 0  # none was slow: the means are every step's
