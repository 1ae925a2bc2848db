"""Locust entry point for specflip load tests (OpenAI streaming chat/completions).

    locust -f loadtests/locust/locustfile.py --headless --host http://127.0.0.1:8000 \\
        --csv out/lt/locust --only-summary --lt-shape fixed:users=4,duration=30 \\
        --lt-api chat --lt-input-len 128 --lt-output-len 128 --lt-out-dir out/lt

Every setting is `--lt-<field>` / `SPECFLIP_LT_<FIELD>` / a JSON file given with
`--lt-config` (loadtests/locust/config.py). The load shape always comes from `--lt-shape`
(Locust's -u/-r/-t are ignored, as for any shape class). Output folder: one
`requests-<pid>.jsonl` line per request, `run_meta.json` (start time, model,
config) and `summary.json` (percentiles, throughput, goodput) at the end.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run by path (locust -f): make `loadtests` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import httpx
from locust import LoadTestShape, events
from locust.runners import MasterRunner, WorkerRunner

from loadtests.locust.config import HELP, LoadConfig, flag_name, load_config
from loadtests.locust.hosts import HostBoundUrls
from loadtests.locust.shapes import Schedule
from loadtests.locust.users import OpenAIStreamUser, RunContext, current_context, set_context
from loadtests.metrics import summarize

__all__ = ["ConfiguredShape", "OpenAIStreamUser", "config_from_options", "discover_model"]

log = logging.getLogger("specflip.loadtests")
_SHAPE_T0: list[float] = []  # epoch time of the shape's run time 0 (set at the first tick)
_PREPARED: list[tuple[LoadConfig, str, str]] = []  # (config, host, model), set at init


@events.init_command_line_parser.add_listener
def _add_options(parser: Any) -> None:
    parser.add_argument(
        "--lt-config",
        env_var="SPECFLIP_LT_CONFIG",
        default="",
        help="JSON file with load-test settings (loadtests/locust/config.py)",
    )
    for f in fields(LoadConfig):
        parser.add_argument(
            flag_name(f.name),
            dest=f"lt_{f.name}",
            env_var=f"SPECFLIP_LT_{f.name.upper()}",
            default=None,
            help=HELP[f.name],
        )


def config_from_options(options: Any) -> LoadConfig:
    overrides = {f.name: getattr(options, f"lt_{f.name}", None) for f in fields(LoadConfig)}
    return load_config(getattr(options, "lt_config", "") or None, overrides)


def discover_model(urls: HostBoundUrls, timeout: float = 30.0) -> str:
    """The first model id served at `/v1/models`."""
    r = httpx.get(urls.url("/v1/models"), timeout=timeout, follow_redirects=False)
    r.raise_for_status()
    data = r.json().get("data") or []
    if not data:
        raise RuntimeError(f"{urls.url('/v1/models')} lists no model: pass --lt-model")
    return str(data[0]["id"])


def _role(environment: Any) -> str:
    """local (one process), master (runs the shape, no users) or worker (users, no shape)."""
    runner = environment.runner
    return (
        "master"
        if isinstance(runner, MasterRunner)
        else "worker"
        if isinstance(runner, WorkerRunner)
        else "local"
    )


@events.init.add_listener
def _on_init(environment: Any, **_: Any) -> None:
    """Prepare everything (model, prompts, output file) before the shape's clock starts."""
    if getattr(environment, "parsed_options", None) is None:
        return  # Locust used as a library: nothing configured here
    cfg = config_from_options(environment.parsed_options)
    host = environment.host or ""
    model = cfg.model or discover_model(HostBoundUrls(host))
    _PREPARED[:] = [(cfg, host, model)]
    if _role(environment) != "master":
        OpenAIStreamUser.network_timeout = cfg.request_timeout_s
        set_context(RunContext.open(cfg, host, model))


@events.test_start.add_listener
def _on_test_start(environment: Any, **_: Any) -> None:
    if _role(environment) == "worker" or not _PREPARED:
        return
    cfg, host, model = _PREPARED[0]  # the process that runs the shape knows when run time 0 was
    meta = {
        "t0": _SHAPE_T0[0] if _SHAPE_T0 else time.time(),
        "host": host,
        "model": model,
        "config": asdict(cfg),
        "phases": [asdict(p) for p in cfg.schedule.phases],
    }
    Path(cfg.out_dir).mkdir(parents=True, exist_ok=True)
    (Path(cfg.out_dir) / "run_meta.json").write_text(json.dumps(meta, indent=2))


@events.test_stop.add_listener
def _on_test_stop(environment: Any, **_: Any) -> None:
    try:
        ctx = current_context()
    except RuntimeError:
        return
    ctx.sink.close()
    if _role(environment) != "local":
        return  # with --processes each worker holds only its share; the sweep reads all JSONL files
    done = [r for r in ctx.records if r.end >= ctx.started]
    if not done:
        log.warning("no request completed")
        return
    t0 = min(r.start for r in done)
    t1 = max(r.end for r in done) + 1e-6
    summary = summarize(done, t0, t1, ctx.config.slo)
    out = {"window": [t0, t1], "slo": asdict(ctx.config.slo), "summary": asdict(summary)}
    (Path(ctx.config.out_dir) / "summary.json").write_text(json.dumps(out, indent=2))
    print(
        f"[locust] ok={summary.ok} err={summary.errors} tok/s={summary.output_tok_s:.1f} "
        f"ttft_p50={summary.ttft_p50_ms or 0:.0f}ms tpot_p50={summary.tpot_p50_ms or 0:.1f}ms "
        f"goodput={summary.goodput_req_s:.2f}req/s",
        flush=True,
    )


class ConfiguredShape(LoadTestShape):
    """Runs the schedule of `--lt-shape`: fixed, steps, transition or poisson."""

    _schedule: Schedule | None = None

    def tick(self) -> tuple[int, float] | None:
        if self._schedule is None:
            assert self.runner is not None
            self._schedule = config_from_options(self.runner.environment.parsed_options).schedule
            _SHAPE_T0[:] = [time.time() - self.get_run_time()]
        return self._schedule.tick(self.get_run_time())
