"""SGLang's own HTTP server with the engine arguments a specflip config gives its replicas.

    python -m loadtests.rawvsapp.raw_sglang --config deployments/examples/cpu-tiny.yaml --port 30000
    python -m loadtests.rawvsapp.raw_sglang --config my.yaml --port 30000 --speculation off   # no draft

The baseline the app is measured against (`loadtests.rawvsapp`): what a user would run
instead of specflip. The keyword arguments `deployments.replica.engine.engine_kwargs` builds for a
replica are turned into `python -m sglang.launch_server` flags through SGLang's own argument
parser (so a renamed or removed flag fails here, loudly), printed, and SGLang's
`launch_server` module runs with them in this process. `--speculation off` drops the draft
(every `speculative_*` argument, nothing else): a plain engine, the comparison for a replica
whose speculation is OFF. Differences from a
replica: SGLang's server warm-up request runs (its default); `replicas.env` of the config
(e.g. `SGLANG_SIMULATE_ACC_LEN`) is set in this process before SGLang is imported; SGLang logs at its
default level (info), whose decode-batch lines `loadtests.rawvsapp.referee` reads.
"""

from __future__ import annotations

import argparse
import os
import runpy
import shlex
import sys
from typing import Any

__all__ = ["launch_argv", "main"]


def launch_argv(kwargs: dict[str, Any]) -> list[str]:
    """`sglang.launch_server` flags for sglang.Engine keyword arguments."""
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    by_dest = {a.dest: a for a in parser._actions if a.option_strings}
    argv: list[str] = []
    for key, value in kwargs.items():
        action = by_dest.get(key)
        if action is None:
            raise SystemExit(f"raw_sglang: SGLang {_version()} has no launch_server flag for {key!r}")
        flag = next(o for o in action.option_strings if o.startswith("--"))
        if isinstance(action, argparse.BooleanOptionalAction):
            argv.append(flag if value else "--no-" + flag[2:])
        elif action.nargs == 0:  # a switch (store_true and SGLang's deprecated-alias variants)
            if bool(value) != (action.const is False):
                argv.append(flag)
        elif isinstance(value, list | tuple):
            argv += [flag, *(str(v) for v in value)]
        elif value is not None:
            argv += [flag, str(value)]
    return argv


def _version() -> str:
    import sglang

    return str(sglang.__version__)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m loadtests.rawvsapp.raw_sglang", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--config", required=True, help="specflip YAML config")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--speculation", choices=["on", "off"], default="on", help="off: serve without the draft")
    p.add_argument("extra", nargs=argparse.REMAINDER, help="more launch_server flags after --")
    args = p.parse_args(argv)

    from deployments.config import Device, load_config

    config = load_config(args.config)
    os.environ.update(config.replicas.env)
    if config.engine.device is Device.CPU:
        from patched_worker.cpu.shim import enable

        enable()
    from deployments.replica.engine import engine_kwargs

    kw = engine_kwargs(config)
    if args.speculation == "off":  # the same engine arguments without the draft (attention backend kept)
        kw = {k: v for k, v in kw.items() if not k.startswith("speculative_")}
    kw.pop("skip_server_warmup", None)  # a user's server warms up: SGLang's default
    # SGLang's default log level: its scheduler's decode-batch lines (one per 40 steps) are the
    # engine's own throughput count that loadtests.rawvsapp.referee reads (replicas log at "error")
    kw["log_level"] = "info"
    kw.update(host=args.host, port=args.port, served_model_name=config.model.id)
    flags = launch_argv(kw) + [a for a in args.extra if a != "--"]
    print("raw_sglang: python -m sglang.launch_server " + shlex.join(flags), flush=True)
    sys.argv = ["sglang.launch_server", *flags]
    runpy.run_module("sglang.launch_server", run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
