"""Benchmark: the cost of one routing decision of specflip's request router at 8 and 64 replicas.

    python -m loadtests.bench.routing_cost                 # writes the "## routing decision cost" section
    python -m loadtests.bench.routing_cost --calls 20000 --out docs/benchmarks.md

Times `SpecFlipRouter.choose_replicas` (the coroutine Serve awaits once per routing attempt) on a
router built outside Serve (`ray_compat.standalone_request_router`) over stand-in candidates that
carry the routing stats replicas publish (half ON, half OFF, random loads), for both request
classes and for the stale-stats fallback (power of two). Each call classifies the request (a
parsed body plus the header mapping, as on the ingress path), parses every candidate's stats,
matches the prompt in the prefix tree, ranks. Ray's own queue probing within a rank is not
included: it is the same for every router. The prefix cases use 4,000-character prompts that
share one of 50 system prompts, with 1,000 such prompts already routed (the tree populated);
`on_request_routed` is what runs after each decision (it inserts the prompt into the tree).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from deployments.ray_compat import standalone_request_router
from deployments.routing.router import SpecFlipRouter
from loadtests.markdown import table, write_section
from loadtests.metrics import percentile
from policy.routing import ReplicaStats
from policy.types import SpecMode

__all__ = ["Timing", "main", "time_choose_replicas"]


@dataclass(frozen=True)
class Timing:
    replicas: int
    case: str
    calls: int
    per_call_s: tuple[float, ...]  # per batch of calls, divided by the batch size


def _fleet(n: int, now: float, stale: bool, rng: random.Random, replica_id: Any) -> list[Any]:
    out = []
    for i in range(n):
        stats = ReplicaStats(
            mode=SpecMode.ON if i % 2 == 0 else SpecMode.OFF,
            running=rng.randrange(0, 64),
            waiting=rng.randrange(0, 8),
            accept_length=2.8,
            step_s=0.012,
            at=now - (60.0 if stale and i == 0 else 0.1),
        )
        out.append(
            SimpleNamespace(
                replica_id=replica_id(f"r{i:04d}"),
                routing_stats=stats.to_routing_stats(),
                max_ongoing_requests=256,
            )
        )
    return out


CASES = (
    "interactive",
    "batch",
    "stale stats (power of two)",
    "interactive, 4k-char prompt, prefix known",
    "on_request_routed, 4k-char prompt",
)


def _request(cls: str, prompt: str = "hello", request_id: str = "r") -> Any:
    from ray.serve.request_router import PendingRequest

    body = SimpleNamespace(model="m", prompt=prompt, max_tokens=128, stream=True, priority=None)
    headers = {"content-type": "application/json", "x-specflip-class": cls}
    metadata = SimpleNamespace(internal_request_id=request_id)
    return PendingRequest(args=[body, SimpleNamespace(headers=headers)], kwargs={}, metadata=metadata)  # type: ignore[arg-type]


def _long_prompt(rng: random.Random, systems: list[str]) -> str:
    tail = "".join(rng.choice("abcdefghij klmnop\n") for _ in range(1000))
    return (rng.choice(systems) + tail)[:4000]


def time_choose_replicas(n: int, case: str, calls: int, batch: int = 200) -> Timing:
    router, replica_id = standalone_request_router(SpecFlipRouter)
    rng = random.Random(n)
    candidates = _fleet(n, time.time(), case == "stale stats (power of two)", rng, replica_id)
    prefixed = "4k-char" in case
    systems = ["".join(rng.choice("ABCDEFGH ijk\n") for _ in range(3000)) for _ in range(50)]

    async def run() -> list[float]:
        if prefixed:  # 1,000 prompts already routed: the tree holds them
            for i in range(1000):
                routed = _request("interactive", _long_prompt(rng, systems), f"warm-{i}")
                router.on_request_routed(routed, rng.choice(candidates).replica_id, None)
        prompt = _long_prompt(rng, systems) if prefixed else "hello"
        request = _request("batch" if case == "batch" else "interactive", prompt)  # its future needs a loop
        target = candidates[0].replica_id
        per_call = []
        for _ in range(max(1, calls // batch)):
            t0 = time.perf_counter()
            for _ in range(batch):
                if case.startswith("on_request_routed"):
                    router.on_request_routed(request, target, None)
                else:
                    await router.choose_replicas(candidates, request)
            per_call.append((time.perf_counter() - t0) / batch)
        return per_call

    return Timing(n, case, calls, tuple(asyncio.run(run())))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--replicas", type=int, nargs="+", default=[8, 64])
    p.add_argument("--calls", type=int, default=20000, help="calls per (replicas, case)")
    p.add_argument("--out", default="docs/benchmarks.md", help="markdown file whose section is replaced")
    args = p.parse_args(argv)
    load_before = os.getloadavg()
    timings = [time_choose_replicas(n, c, args.calls) for n in args.replicas for c in CASES]
    load_after = os.getloadavg()
    rows = []
    for t in timings:
        rows.append(
            [
                t.replicas,
                t.case,
                t.calls,
                f"{(percentile(t.per_call_s, 50) or 0) * 1e6:.1f}",
                f"{(percentile(t.per_call_s, 90) or 0) * 1e6:.1f}",
            ]
        )
        print(f"{t.replicas:>4} replicas  {t.case:<28} median {rows[-1][3]} us/call", flush=True)
    stamp = time.strftime("%Y-%m-%d %H:%M")
    body = (
        "## routing decision cost\n\n"
        f"`SpecFlipRouter.choose_replicas` per call (classify, parse every candidate's stats, match the "
        "prompt in the prefix tree, rank) and `on_request_routed` (records the decision, inserts the prompt). "
        f"Written by `python -m loadtests.bench.routing_cost --calls {args.calls}` on {stamp} "
        f"(CPython {platform.python_version()}, {os.cpu_count()} CPUs, load average "
        f"{' '.join(f'{x:.1f}' for x in load_before)} before / {' '.join(f'{x:.1f}' for x in load_after)} "
        "after; other jobs share this machine). Candidates are stand-ins carrying published stats, "
        "half ON, half OFF; Serve's queue probing inside a rank is not included (the same for any "
        "router). Prefix cases: 4,000-character prompts sharing one of 50 system prompts, 1,000 routed "
        "before timing. Median and p90 over batches of 200 calls.\n\n"
        + table(["replicas", "request", "calls", "median us", "p90 us"], rows, "rlrrr")
    )
    write_section(Path(args.out), body)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
