"""The `specflip` subcommands that drive tooling: `demo` (the CPU demo: the tiny pair, 2 replicas, a
low -> high -> low load and its report), `models` (build the tiny pair, write the 8B shapes,
measure a pair's accept length) and `bench` (the load-test sweep, `loadtests.sweep`; needs the
`bench` extra). `deployments.cli` finds them through the `specflip.commands` entry point, so the
product's CLI imports no tooling; what each subcommand needs is imported when it runs.
"""

from __future__ import annotations

import argparse
import importlib
import os
from typing import Any

from deployments.cli import CommandUnavailable, block_until_interrupted, progress
from deployments.config import ConfigError

__all__ = ["register"]


def register(sub: Any, parser_class: type[argparse.ArgumentParser]) -> None:
    """Add the tooling subcommands to `specflip`'s subparsers (nested ones of `parser_class`)."""
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
    demo.set_defaults(func=_demo)

    models = sub.add_parser("models", help="tiny model pairs for tests and demos")
    models.set_defaults(func=_models)
    msub = models.add_subparsers(dest="models_command", required=True, parser_class=parser_class)
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
    bench.set_defaults(func=_bench)


def _demo(args: argparse.Namespace) -> int:
    from deployments.defaults import cpu_demo_config, default_pair_dir
    from loadtests.models.build import PairSpec, build_pair

    if args.high_clients < 1 or min(args.phase_s) <= 0:
        raise ConfigError("--high-clients and every --phase-s must be positive")
    pair_dir = os.path.abspath(args.pair_dir or default_pair_dir())  # replicas run in other directories
    paths = build_pair(pair_dir, PairSpec(seed=args.seed), log=progress)
    config = cpu_demo_config((paths.target, paths.draft), serve={"port": args.port})
    from deployments.local import run_local
    from loadtests.demo.drive import drive, format_report
    from loadtests.sim.trace import Phase

    low, high, low2 = args.phase_s
    phases = (
        Phase("low", low, users=1),
        Phase("high", high, users=args.high_clients),
        Phase("low again", low2, users=1),
    )
    with run_local(config, host="127.0.0.1", log=progress) as app:
        report = drive(app, phases, log=progress)
        print(format_report(report), flush=True)
        if args.keep_serving:
            progress(f"still serving at {app.base} (OpenAI API under /v1); Ctrl-C stops")
            block_until_interrupted()
        progress("shutting down")
    return 0


def _models(args: argparse.Namespace) -> int:
    if args.models_command == "build":
        from loadtests.models.build import PairSpec, build_pair

        paths = build_pair(args.out, PairSpec(seed=args.seed), log=progress)
        progress(f"pair ready: target {paths.target}, draft {paths.draft}")
        return 0
    if args.models_command == "shapes":
        from loadtests.models.dummy8b import write_shapes

        target, draft = write_shapes(args.out, args.tokenizer_from)
        progress(f"8B shapes (load_format dummy): target {target}, draft {draft}")
        return 0
    evaluate: Any = _lazy("loadtests.bench.accept_length", "main")
    result = evaluate(["--pair", args.pair, *_passthrough(args.args)])
    return result if isinstance(result, int) else 0


def _bench(args: argparse.Namespace) -> int:
    sweep: Any = _lazy("loadtests.sweep.run", "main")
    result = sweep(_passthrough(args.args))
    return result if isinstance(result, int) else 0


def _passthrough(argv: list[str]) -> list[str]:
    return argv[1:] if argv[:1] == ["--"] else argv


def _lazy(module: str, name: str) -> object:
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as err:
        raise CommandUnavailable(
            f"{module}.{name} is not available in this install ({err}); "
            "install the bench extra: pip install 'specflip[bench]'"
        ) from None
