"""What the sweeps read off the 0.5-s samples of every variant alike: the mean running batch, the
share of samples at a full batch and the share idle between a closed-loop client's waves, and how long
the engine took to hold a wave again after it emptied."""

from __future__ import annotations

import pytest

from loadtests.sweep.control import (
    ReplicaSample,
    flip_count,
    load_fractions,
    mean_running,
    refill_gaps,
    slow_step_count,
)


def _at(t: float, *running_waiting: tuple[int, int]) -> list[ReplicaSample]:
    return [
        ReplicaSample(t=t, replica_id=f"r{i}", mode="off", desired_mode="off", running=r, waiting=w)
        for i, (r, w) in enumerate(running_waiting)
    ]


def test_a_wave_then_a_gap_reads_as_full_then_idle() -> None:
    # one replica at c=8: ramp (4 running, 4 waiting), full (8), full, the gap (nothing), ramp again
    samples = [
        *_at(0.0, (4, 4)),
        *_at(0.5, (8, 0)),
        *_at(1.0, (8, 0)),
        *_at(1.5, (0, 0)),
        *_at(2.0, (1, 7)),
    ]
    assert load_fractions(samples, 8) == pytest.approx((2 / 5, 1 / 5))
    assert mean_running(samples) == pytest.approx((4 + 8 + 8 + 0 + 1) / 5)


def test_replicas_sampled_at_one_time_add_up() -> None:
    # two replicas at c=8 between them: 4 + 4 running is a full batch; idle only if both are
    samples = [*_at(0.0, (4, 0), (4, 0)), *_at(0.5, (0, 0), (0, 1)), *_at(1.0, (0, 0), (0, 0))]
    assert load_fractions(samples, 8) == pytest.approx((1 / 3, 1 / 3))
    assert mean_running(samples) == pytest.approx(8 / 3)


def test_no_samples_say_nothing() -> None:
    assert load_fractions([], 8) is None and mean_running([]) is None and refill_gaps([], 8) == []


def test_refill_gaps_run_from_an_emptied_engine_to_the_next_full_wave() -> None:
    # c=100: the first ramp is not a gap (no full wave before it); a wave (>= 80 held), the engine
    # empties (<= 2) at 2.0, refills through 2.5 and 3.0, holds 85 at 3.5: a 1.5-s gap; the next wave
    # ends at 5.0, the run ends before the engine holds a wave again: no gap counted for it
    loads = [(0.0, 0), (0.5, 40), (1.0, 90), (1.5, 50), (2.0, 2), (2.5, 0), (3.0, 60), (3.5, 85),
             (4.0, 100), (5.0, 1), (5.5, 70)]  # fmt: skip
    samples = [s for t, load in loads for s in _at(t, (min(load, 60), max(0, load - 60)))]
    assert refill_gaps(samples, 100) == pytest.approx([1.5])


def test_refill_gaps_sum_the_replicas_and_skip_dips_that_do_not_empty_the_engine() -> None:
    # two replicas at c=8: dips to 2 + 1 and to 1 + 0 do not empty the engine (2% of 8 is 0.16), the
    # dip to 0 + 0 does: one gap, from 2.0 to the 7 held at 3.0
    samples = [
        *_at(0.0, (4, 0), (4, 0)),
        *_at(0.5, (2, 0), (1, 0)),
        *_at(1.0, (4, 0), (3, 0)),
        *_at(1.5, (1, 0), (0, 0)),
        *_at(2.0, (0, 0), (0, 0)),
        *_at(2.5, (0, 1), (0, 0)),
        *_at(3.0, (3, 1), (2, 1)),
    ]
    assert refill_gaps(samples, 8) == pytest.approx([1.0])


def test_flips_count_each_replicas_growth_from_its_first_sample() -> None:
    # r0 had flipped 3 times before the window and flips twice inside it; r1 flips once
    samples = [
        ReplicaSample(t=t, replica_id=r, mode="off", desired_mode="off", running=0, waiting=0, flips=f)
        for t, r, f in [(0.0, "r0", 3), (0.0, "r1", 0), (0.5, "r0", 4), (0.5, "r1", 1), (1.0, "r0", 5)]
    ]
    assert flip_count(samples) == 2 + 1
    assert flip_count([]) == 0


def test_applied_flips_are_the_engines_own_count_from_the_status() -> None:
    """The policy wanted ON for a moment while the replica idled before a run (2026-12-05, H100: the
    desired mode flipped twice, the engine never): `flips` counts the desire, `engine_flips` what the
    engine took (its `toggles` in `/specflip/status`)."""
    statuses = [
        {
            "replica_id": "r0",
            "mode": "off",
            "desired_mode": "off",
            "flips": 7,
            "engine": {"toggles": 5},
            "last_report_age_s": 2.4,
        },
        {"replica_id": "r0", "mode": "off", "desired_mode": "on", "flips": 8, "engine": {"toggles": 5}},
        {"replica_id": "r0", "mode": "off", "desired_mode": "off", "flips": 9, "engine": {"toggles": 5}},
        {"replica_id": "r0", "mode": "on", "desired_mode": "on", "flips": 10, "engine": {"toggles": 6}},
    ]
    samples = [ReplicaSample.from_status(0.5 * i, d) for i, d in enumerate(statuses)]
    assert flip_count(samples) == 3
    assert flip_count(samples, applied=True) == 1
    # and how old the replica's report was: a stale one reads as a load that did not move
    assert [s.report_age_s for s in samples] == [2.4, None, None, None]
    # a replica whose engine reported nothing yet (no `engine`): no applied flips, not an error
    bare = ReplicaSample.from_status(0.0, {"replica_id": "r1", "flips": 2})
    assert bare.engine_flips == 0 and flip_count([bare], applied=True) == 0


def test_slow_engine_steps_are_counted_per_replica_from_the_status() -> None:
    """The engine's own count of steps slow on the host (`engine.slow_steps`), counted as its growth
    inside the samples, per replica: a replica that had slow steps before the run adds none."""
    statuses = [
        ("r0", 2), ("r1", 5), ("r0", 2), ("r1", 5), ("r0", 4), ("r1", 5),
    ]  # fmt: skip
    samples = [
        ReplicaSample.from_status(0.5 * i, {"replica_id": r, "engine": {"slow_steps": n}})
        for i, (r, n) in enumerate(statuses)
    ]
    assert [s.slow_steps for s in samples] == [2, 5, 2, 5, 4, 5]
    assert slow_step_count(samples) == 2
    assert slow_step_count([ReplicaSample.from_status(0.0, {"replica_id": "r2"})]) == 0
