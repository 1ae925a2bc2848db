"""The real app under a benchmark client's lockstep waves: a steady load above the
policy's `high` whose gaps between waves drop each replica's load to 0 for a moment. The shipped
defaults (the package's shared app: the CPU default policy with `persist_s`, `on_persist_s` and
`on_persist_max_s` at their field defaults; its dwell_s 1 s only makes flapping easier) turn every
replica OFF at the first waves and keep it OFF. With `on_persist_s` 0 a policy tick inside a gap
turned the replica back ON and the next wave ran ON: 23 flips per replica in the 30-s steady phase
when tried. A slow client's gaps outlast `on_persist_s` (on the H200: 2.2-3.4 s at c=256); the
policy learns them from the gaps it saw and holds OFF through the next ones."""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Callable

import pytest

from deployments.local import LocalApp, wait_until
from tests.deployments.conftest import MODEL

pytestmark = pytest.mark.serve
USERS = 12  # ~6 requests in flight per replica during a wave: above high (4)
MAX_TOKENS = 160  # every request the same length (ignore_eos): a wave finishes together, 2-3 s
GAP_S = 0.5  # the client's pause between two waves
SLOW_GAP_S = 4.5  # a slow client's pause: longer than on_persist_s (3 s), shorter than on_persist_max_s / 2
STEADY_S = 30.0
PROMPTS = ["def add(a, b):", "class Stack:", "for i in range(", "import os\n\ndef"]


def _wave(app: LocalApp, pool: concurrent.futures.ThreadPoolExecutor) -> None:
    """USERS requests at once; returns when the last one is answered (a lockstep closed loop)."""

    def one(i: int) -> None:
        body = {
            "model": MODEL,
            "prompt": PROMPTS[i % len(PROMPTS)],
            "max_tokens": MAX_TOKENS,
            "temperature": 0,
            "ignore_eos": True,
        }
        assert app.client.completion(body)["usage"]["completion_tokens"] == MAX_TOKENS

    for f in [pool.submit(one, i) for i in range(USERS)]:
        f.result(timeout=120)


class _Watch:
    """Samples /specflip/status in the background: (seconds, replica, mode, running + waiting)."""

    def __init__(self, app: LocalApp, every_s: float = 0.15) -> None:
        self.samples: list[tuple[float, str, str, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(app, every_s), daemon=True)

    def _run(self, app: LocalApp, every_s: float) -> None:
        while not self._stop.is_set():
            t = time.monotonic()
            for r in app.client.replicas():
                self.samples.append((t, r["replica_id"], r["mode"], r["running"] + r["waiting"]))
            self._stop.wait(every_s)

    def __enter__(self) -> _Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def _waves_until(
    app: LocalApp, pool: concurrent.futures.ThreadPoolExecutor, done: Callable[[], bool], gap_s: float = GAP_S
) -> int:
    waves = 0
    while not done():
        _wave(app, pool)
        waves += 1
        time.sleep(gap_s)
    return waves


def _all_off_within(app: LocalApp, seconds: float) -> Callable[[], bool]:
    until = time.monotonic() + seconds

    def all_off() -> bool:
        if time.monotonic() > until:
            raise AssertionError(f"the waves did not turn every replica OFF: {app.client.replicas()}")
        return all(r["mode"] == r["desired_mode"] == "off" for r in app.client.replicas())

    return all_off


def _steady_waves(
    app: LocalApp, pool: concurrent.futures.ThreadPoolExecutor, gap_s: float
) -> tuple[int, list[tuple[float, str, str, int]], dict[str, int]]:
    """STEADY_S of waves `gap_s` apart, the status sampled: (waves, samples, each replica's flips in it)."""
    before = {r["replica_id"]: r["flips"] for r in app.client.replicas()}
    with _Watch(app) as watch:
        until = time.monotonic() + STEADY_S
        waves = _waves_until(app, pool, lambda: time.monotonic() > until, gap_s)
    after = {r["replica_id"]: r["flips"] for r in app.client.replicas()}
    return waves, watch.samples, {rid: after[rid] - n for rid, n in before.items()}


def _back_on_within(app: LocalApp, seconds: float) -> None:
    wait_until(
        lambda: {r["mode"] for r in app.client.replicas()} == {"on"},
        seconds,
        why="replicas back ON after the waves",
    )


def _longest_idle_s(samples: list[tuple[float, str, str, int]]) -> float:
    """The longest stretch over which one replica's sampled load stayed 0 (a gap between waves)."""
    longest, since = 0.0, dict[str, float]()
    for t, rid, _, load in samples:
        if load > 0:
            since.pop(rid, None)
            continue
        longest = max(longest, t - since.setdefault(rid, t))
    return longest


def test_a_steady_load_in_lockstep_waves_turns_each_replica_off_once_and_keeps_it_off(app: LocalApp) -> None:
    policy = app.config.policy
    assert (
        policy.persist_s == 0 and policy.on_persist_s >= 3 * GAP_S
    )  # the shipped defaults, not a tuned band
    assert app.client.send_override("auto", "*").status_code == 200
    wait_until(
        lambda: {r["mode"] for r in app.client.replicas()} == {"on"}, 30, why="all replicas ON at rest"
    )

    with concurrent.futures.ThreadPoolExecutor(USERS) as pool:
        # the first decision: every replica turns OFF within a few waves
        _waves_until(app, pool, _all_off_within(app, 45))
        # the steady phase: the same waves, with the same gaps
        waves, samples, later = _steady_waves(app, pool, GAP_S)

    # the test can fail: waves with gaps happened, and a replica reported the dip (load <= low) in them
    assert waves >= 5, waves
    dips = [s for s in samples if s[3] <= policy.low]
    assert dips, f"no report caught a gap between waves (load <= {policy.low:g}): {samples[:20]}"
    on_samples = [s for s in samples if s[2] == "on"]
    assert all(n == 0 for n in later.values()) and not on_samples, (
        f"flips during {STEADY_S:g} s of steady waves: {later} ({waves} waves, {len(dips)} dips seen); "
        f"first ON samples {on_samples[:5]}"
    )

    _back_on_within(app, policy.on_persist_s + 20)  # load gone: back ON once low load held on_persist_s


def test_a_slow_clients_gaps_longer_than_on_persist_are_learned_and_held_through(app: LocalApp) -> None:
    policy = app.config.policy
    # the shipped defaults: a gap of SLOW_GAP_S outlasts on_persist_s, and twice it fits under the cap
    assert policy.persist_s == 0 and policy.on_persist_s < SLOW_GAP_S <= policy.on_persist_max_s / 2
    assert app.client.send_override("auto", "*").status_code == 200
    wait_until(
        lambda: {r["mode"] for r in app.client.replicas()} == {"on"}, 30, why="all replicas ON at rest"
    )

    with concurrent.futures.ThreadPoolExecutor(USERS) as pool:
        # the first decision, then two slow gaps: the first of them may still turn a replica ON (no gap
        # learned yet), the wave after it ends the gap and the policy keeps its length
        _waves_until(app, pool, _all_off_within(app, 45))
        for _ in range(2):
            time.sleep(SLOW_GAP_S)
            _wave(app, pool)
        time.sleep(SLOW_GAP_S)
        _waves_until(app, pool, _all_off_within(app, 30), SLOW_GAP_S)
        # the steady phase: the same waves, with the same slow gaps
        waves, samples, later = _steady_waves(app, pool, SLOW_GAP_S)

    # the test can fail: the replicas sat idle between waves for longer than on_persist_s, which
    # alone would have turned them ON in every gap
    assert waves >= 3, waves
    idle_s = _longest_idle_s(samples)
    assert idle_s > policy.on_persist_s + 0.5, f"no gap outlasted on_persist_s: longest idle {idle_s:.1f} s"
    on_samples = [s for s in samples if s[2] == "on"]
    assert all(n == 0 for n in later.values()) and not on_samples, (
        f"flips during {STEADY_S:g} s of waves with {SLOW_GAP_S:g}-s gaps: {later} ({waves} waves, "
        f"longest idle {idle_s:.1f} s); first ON samples {on_samples[:5]}"
    )

    # load gone: back ON once the low load has outlasted the learned wait (at most on_persist_max_s)
    _back_on_within(app, policy.on_persist_max_s + 20)
