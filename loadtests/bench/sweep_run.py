"""One client run of `loadtests.bench.client_sweep` as it lands in sweep.csv and results.json."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CSV_FIRST", "SweepRun"]

CSV_FIRST: tuple[str, ...] = ("shape", "variant", "concurrency", "repeat")
CSV_FIRST += ("output_tok_s", "ttft_p50_ms", "tpot_p50_ms", "flips")  # the columns the sweep's readers expect


@dataclass(frozen=True)
class SweepRun:
    """One client run at one level against one variant."""

    shape: str
    variant: str
    concurrency: int
    repeat: int
    output_tok_s: float
    ttft_p50_ms: float | None
    tpot_p50_ms: float | None
    flips: int | None  # flips of the app's replicas' desired mode inside the run (None: a raw server)
    engine_flips: int | None  # of those, the flips their engines applied (the engines' own count)
    ttft_p99_ms: float | None
    tpot_p99_ms: float | None
    # SGLang's ITL: per token for a server reporting an accept length (raw_eagle, sglang_adaptive),
    # per chunk for the rest; across variants compare chunk_itl_*, the same for every variant
    itl_p50_ms: float | None
    itl_p99_ms: float | None
    chunk_itl_p50_ms: float | None  # gap between streamed chunks that carried text, every variant alike
    chunk_itl_p99_ms: float | None
    duration_s: float
    prompts: int
    completed: int
    output_tokens: int
    engine_tok_s: float | None  # the referee: the engine's own decode tokens over the run
    on_fraction: float | None  # share of status samples with speculation ON (app runs)
    engine_running: float | None  # mean running batch over the run (the engine's decode lines)
    engine_queued: float | None  # mean requests waiting for a prefill (the same lines)
    # from the 0.5-s samples of every variant alike (the app's /specflip/status, SGLang's /v1/loads):
    sampled_running: float | None  # mean running requests
    full_fraction: float | None  # share of samples with >= 90% of the level running
    idle_fraction: float | None  # share of samples with nothing running or waiting (between waves)
    refill_s: float | None  # mean seconds from an emptied engine to a full wave again (control.refill_gaps)
    # CPU over the whole run (sweep_profile.RunCpu): the process in front of the engine (the app's
    # replica, SGLang's HTTP + tokenizer process), per output token and in cores, and the scheduler's
    front_cpu_us_per_token: float | None
    front_cpu_cores: float | None
    scheduler_cpu_cores: float | None
    # the app's way to its replica (None for a raw server): Ray's ingress request router (LLMRouter),
    # which HAProxy asks for a replica per request, and Serve's HAProxy
    router_cpu_cores: float | None
    haproxy_cpu_cores: float | None
    # this process: SGLang's client, with the 0.5-s status poller (near one core, the client is the limit)
    client_cpu_cores: float | None
    started: float  # epoch seconds
