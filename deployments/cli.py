"""`specflip` command line: serve, demo, models build/shapes/eval, bench.

Exit codes: 0 ok; 1 the work failed; 2 bad config or arguments (a one-line reason on stderr).

`serve` is the product. The other subcommands drive tooling, which this module imports inside
the subcommand's function only, never at the top: `demo` (loadtests.demo, and the model builder
for the tiny pair), `models` (patched_worker.models, loadtests.bench.accept_length), `bench`
(loadtests.sweep, which needs the `bench` extra: Locust, matplotlib). tests/test_layers.py holds
every other serving module to importing none of them.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Any, NoReturn

from deployments.config import ConfigError

__all__ = ["build_parser", "main"]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2
        self.exit(2, f"{self.prog}: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="specflip",
        description="Ray Serve + SGLang EAGLE-3 with per-replica speculation flipped by load.",
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    serve = sub.add_parser("serve", help="run the app from a config file until Ctrl-C")
    serve.add_argument("--config", required=True, help="specflip YAML config")
    serve.add_argument("--host", help="bind address (default: serve.host of the config)")
    serve.add_argument("--port", type=int, help="HTTP port (default: serve.port of the config)")

    demo = sub.add_parser("demo", help="2 CPU replicas of the tiny pair, a low->high->low load, a report")
    demo.add_argument("--pair-dir", help="tiny pair directory, built if missing (default ./models/tiny)")
    demo.add_argument("--seed", type=int, default=0, help="seed of the tiny pair build")
    demo.add_argument("--port", type=int, default=8000, help="HTTP port")
    demo.add_argument(
        "--phase-s",
        type=float,
        nargs=3,
        metavar=("LOW", "HIGH", "LOW2"),
        default=(20.0, 35.0, 25.0),
        help="seconds of each load phase",
    )
    demo.add_argument("--high-clients", type=int, default=12, help="concurrent clients in the high phase")
    demo.add_argument("--keep-serving", action="store_true", help="leave the app running after the report")

    models = sub.add_parser("models", help="tiny model pairs for tests and demos")
    msub = models.add_subparsers(dest="models_command", required=True, parser_class=_Parser)
    build = msub.add_parser("build", help="build (or reuse) a trained target + EAGLE-3 draft pair")
    build.add_argument("--out", required=True, help="output directory")
    build.add_argument("--seed", type=int, default=0)
    shapes = msub.add_parser(
        "shapes", help="Llama-3.1-8B-shaped target + EAGLE-3 draft configs (random weights, GPU benchmarks)"
    )
    shapes.add_argument("--out", required=True, help="output directory (target-8b/ and eagle3-8b/)")
    shapes.add_argument(
        "--tokenizer-from", help="tokenizer directory to pad to the 8B vocabulary (e.g. models/tiny/target)"
    )
    evaluate = msub.add_parser("eval", help="measure a pair's accept length on the real engine")
    evaluate.add_argument("--pair", required=True, help="pair directory (with target/ and draft/)")
    evaluate.add_argument(
        "args", nargs=argparse.REMAINDER, help="more arguments of loadtests.bench.accept_length"
    )

    bench = sub.add_parser("bench", help="load-test sweep (loadtests.sweep); arguments pass through")
    bench.add_argument("args", nargs=argparse.REMAINDER, help="arguments of loadtests.sweep")
    return parser


def _progress(line: str) -> None:
    print(f"specflip: {line}", flush=True)


def _block_until_interrupted() -> None:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        while not stop.wait(1.0):
            pass
    except KeyboardInterrupt:
        pass


def _serve(args: argparse.Namespace) -> int:
    from deployments.config import load_config

    config = load_config(args.config)
    from deployments.local import run_local

    with run_local(config, host=args.host, port=args.port, log=_progress) as app:
        _progress(
            f"serving {config.model.id}: OpenAI API at {app.base}/v1, status {app.base}/specflip/status, "
            f"metrics {app.base}/metrics; Ctrl-C stops"
        )
        _block_until_interrupted()
        _progress("shutting down")
    return 0


def _demo(args: argparse.Namespace) -> int:
    from deployments.defaults import cpu_demo_config, default_pair_dir
    from patched_worker.models.build import PairSpec, build_pair

    if args.high_clients < 1 or min(args.phase_s) <= 0:
        raise ConfigError("--high-clients and every --phase-s must be positive")
    pair_dir = os.path.abspath(args.pair_dir or default_pair_dir())  # replicas run in other directories
    paths = build_pair(pair_dir, PairSpec(seed=args.seed), log=_progress)
    config = cpu_demo_config((paths.target, paths.draft), serve={"port": args.port})
    from deployments.local import run_local
    from loadtests.demo import drive, format_report
    from policy.sim.trace import Phase

    low, high, low2 = args.phase_s
    phases = (
        Phase("low", low, users=1),
        Phase("high", high, users=args.high_clients),
        Phase("low again", low2, users=1),
    )
    with run_local(config, host="127.0.0.1", log=_progress) as app:
        report = drive(app, phases, log=_progress)
        print(format_report(report), flush=True)
        if args.keep_serving:
            _progress(f"still serving at {app.base} (OpenAI API under /v1); Ctrl-C stops")
            _block_until_interrupted()
        _progress("shutting down")
    return 0


def _models(args: argparse.Namespace) -> int:
    if args.models_command == "build":
        from patched_worker.models.build import PairSpec, build_pair

        paths = build_pair(args.out, PairSpec(seed=args.seed), log=_progress)
        _progress(f"pair ready: target {paths.target}, draft {paths.draft}")
        return 0
    if args.models_command == "shapes":
        from patched_worker.models.shapes import write_shapes

        target, draft = write_shapes(args.out, args.tokenizer_from)
        _progress(f"8B shapes (load_format dummy): target {target}, draft {draft}")
        return 0
    evaluate: Any = _lazy("loadtests.bench.accept_length", "main")
    result = evaluate(["--pair", args.pair, *_passthrough(args.args)])
    return result if isinstance(result, int) else 0


def _bench(args: argparse.Namespace) -> int:
    sweep: Any = _lazy("loadtests.sweep", "main")
    result = sweep(_passthrough(args.args))
    return result if isinstance(result, int) else 0


def _passthrough(argv: list[str]) -> list[str]:
    return argv[1:] if argv[:1] == ["--"] else argv


def _lazy(module: str, name: str) -> object:
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as err:
        hint = (
            "; install the bench extra: pip install 'specflip[bench]'"
            if module.startswith("loadtests")
            else ""
        )
        raise _Unavailable(f"{module}.{name} is not available in this install ({err}){hint}") from None


class _Unavailable(RuntimeError):
    pass


_COMMANDS = {"serve": _serve, "demo": _demo, "models": _models, "bench": _bench}


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return _COMMANDS[args.command](args)
    except ConfigError as err:
        print(f"specflip: {err}", file=sys.stderr)
        return 2
    except _Unavailable as err:
        print(f"specflip: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Ctrl-C before the app was up: run_local has already cleaned up
        print("specflip: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
