"""`specflip` command line: `serve` here; `demo`, `models` and `bench` from the tooling
(loadtests.commands), found through the `specflip.commands` entry point so that this module
imports no tooling (tests/test_layers.py holds every serving module to that).

Exit codes: 0 ok; 1 the work failed; 2 bad config or arguments (a one-line reason on stderr).
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from importlib.metadata import entry_points
from typing import Any, NoReturn

from deployments.config import ConfigError

__all__ = [
    "COMMANDS_GROUP",
    "CommandUnavailable",
    "block_until_interrupted",
    "build_parser",
    "main",
    "progress",
]

# entry-point group of further subcommands (loadtests.commands): `register(subparsers, parser_class)`
COMMANDS_GROUP = "specflip.commands"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2
        self.exit(2, f"{self.prog}: {message}\n")


Registrar = Callable[[Any, type[argparse.ArgumentParser]], None]


def build_parser(commands: Sequence[Registrar] | None = None) -> argparse.ArgumentParser:
    """`specflip`'s parser: `serve`, plus the subcommands `commands` register (default: those of
    the `specflip.commands` entry points of the installed package)."""
    parser = _Parser(
        prog="specflip",
        description="Ray Serve + SGLang EAGLE-3 with per-replica speculation flipped by load.",
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    serve = sub.add_parser("serve", help="run the app from a config file until Ctrl-C")
    serve.add_argument("--config", required=True, help="specflip YAML config")
    serve.add_argument("--host", help="bind address (default: serve.host of the config)")
    serve.add_argument("--port", type=int, help="HTTP port (default: serve.port of the config)")
    serve.set_defaults(func=_serve)
    if commands is None:  # the tooling's subcommands, where installed
        commands = [entry.load() for entry in entry_points(group=COMMANDS_GROUP)]
    for register in commands:
        register(sub, _Parser)
    return parser


def progress(line: str) -> None:
    print(f"specflip: {line}", flush=True)


def block_until_interrupted() -> None:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with contextlib.suppress(KeyboardInterrupt):
        while not stop.wait(1.0):
            pass


def _serve(args: argparse.Namespace) -> int:
    # Ctrl-C stops even when started by a script's `... &` (it inherits SIGINT ignored: no KeyboardInterrupt)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from deployments.config import load_config

    config = load_config(args.config)
    from deployments.local import run_local

    with run_local(config, host=args.host, port=args.port, log=progress) as app:
        progress(
            f"serving {config.model.id}: OpenAI API at {app.base}/v1, status {app.base}/specflip/status, "
            f"metrics {app.base}/metrics; Ctrl-C stops"
        )
        block_until_interrupted()
        progress("shutting down")
    return 0


class CommandUnavailable(RuntimeError):
    """A subcommand whose modules this install lacks (exit 1, one line saying what to install)."""


def main(argv: Sequence[str] | None = None, commands: Sequence[Registrar] | None = None) -> int:
    """Run `specflip` (`commands`: see build_parser; `python -m loadtests` passes the tooling's
    own, for a source checkout that is on the path but not installed)."""
    args = build_parser(commands).parse_args(argv)
    try:
        return int(args.func(args))
    except ConfigError as err:
        print(f"specflip: {err}", file=sys.stderr)
        return 2
    except CommandUnavailable as err:
        print(f"specflip: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Ctrl-C before the app was up: run_local has already cleaned up
        print("specflip: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
