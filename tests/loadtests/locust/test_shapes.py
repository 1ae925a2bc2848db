"""Load shapes tick by tick (users over run time) and Poisson pacing."""

from __future__ import annotations

import random
import statistics

import pytest

from loadtests.locust.shapes import PoissonPacer, ShapeError, parse_shape


def ticks(spec: str, until: float, step: float = 0.5) -> list[tuple[float, tuple[int, float] | None]]:
    sched = parse_shape(spec)
    return [(i * step, sched.tick(i * step)) for i in range(int(until / step) + 1)]


def test_fixed_concurrency_holds_then_stops() -> None:
    assert ticks("fixed:users=4,duration=2", 2.5) == [
        (0.0, (4, 4.0)),
        (0.5, (4, 4.0)),
        (1.0, (4, 4.0)),
        (1.5, (4, 4.0)),
        (2.0, None),
        (2.5, None),
    ]


def test_steps_climb_one_level_per_step() -> None:
    got = [u for _, u in ticks("steps:users=1/2/4,step=1", 3.0, 1.0)]
    assert got == [(1, 4.0), (2, 4.0), (4, 4.0), None]  # spawn/stop rate: the largest level


def test_transition_low_high_low_with_named_phases() -> None:
    sched = parse_shape("transition:low=2,high=8,low_s=2,high_s=3,tail_s=2")
    users = [sched.tick(float(t)) for t in range(8)]
    assert users == [(2, 8.0), (2, 8.0), (8, 8.0), (8, 8.0), (8, 8.0), (2, 8.0), (2, 8.0), None]
    assert [(p.name, start, end) for p, start, end in sched.bounds()] == [
        ("low", 0.0, 2.0),
        ("high", 2.0, 5.0),
        ("low2", 5.0, 7.0),
    ]
    assert sched.duration == 7.0 and sched.max_users == 8 and sched.rate is None


def test_spawn_rate_can_be_set() -> None:
    assert parse_shape("transition:low=1,high=9,low_s=1,high_s=1,tail_s=1,spawn_rate=2").tick(1.0) == (9, 2.0)


def test_poisson_keeps_a_pool_and_splits_the_rate() -> None:
    sched = parse_shape("poisson:rate=6,users=12,duration=10")
    assert sched.tick(0.0) == (12, 12.0) and sched.tick(9.99) == (12, 12.0) and sched.tick(10.0) is None
    assert sched.rate == 6 and sched.rate_per_user == pytest.approx(0.5)


@pytest.mark.parametrize(
    "spec",
    [
        "",
        "ramp:users=2",
        "fixed:users=2",
        "fixed:users=0,duration=5",
        "fixed:users=2,duration=-1",
        "fixed:users=2,duration=5,colour=red",
        "steps:step=5",
        "steps:users=a/b,step=1",
        "transition:low=8,high=2,low_s=1,high_s=1,tail_s=1",
        "poisson:rate=0,users=2,duration=1",
        "fixed:users",
    ],
)
def test_bad_specs_say_what_is_wrong(spec: str) -> None:
    with pytest.raises(ShapeError):
        parse_shape(spec)


class FixedGaps(random.Random):
    def __init__(self, gaps: list[float]) -> None:
        super().__init__(0)
        self.gaps = list(gaps)

    def expovariate(self, lambd: float) -> float:
        return self.gaps.pop(0)


def test_pacer_counts_from_scheduled_starts_and_counts_late_arrivals() -> None:
    pacer = PoissonPacer(1.0, FixedGaps([1.0, 0.5, 2.0, 1.0]), now=0.0)
    assert pacer.wait(0.0) == 1.0  # next start at 1.0
    assert pacer.wait(3.0) == 0.0 and pacer.late == 1  # scheduled 1.5, busy until 3.0: starts at once
    assert pacer.wait(3.0) == pytest.approx(0.5)  # scheduled 3.5, counted from 1.5 not from 3.0
    assert pacer.wait(3.5) == pytest.approx(1.0) and pacer.late == 1


def test_pool_of_idle_pacers_is_a_poisson_process_at_the_rate() -> None:
    rate, users, horizon = 4.0, 8, 2000.0
    rng = random.Random(7)
    arrivals: list[float] = []
    for _ in range(users):
        pacer, now = PoissonPacer(rate / users, rng, now=0.0), 0.0
        while now < horizon:
            now += pacer.wait(now)
            arrivals.append(now)
    arrivals = sorted(a for a in arrivals if a < horizon)
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:], strict=False)]
    assert len(arrivals) / horizon == pytest.approx(rate, rel=0.05)
    # exponential inter-arrival times: coefficient of variation ~1 (a constant pacing would give 0)
    assert statistics.pstdev(gaps) / statistics.mean(gaps) == pytest.approx(1.0, abs=0.05)
