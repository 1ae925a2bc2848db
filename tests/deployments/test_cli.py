"""The `specflip` command line: argument and config errors exit 2 with one line; delegation is lazy."""

from __future__ import annotations

import importlib.util
import socket
import time
from pathlib import Path

import pytest

from deployments.cli import build_parser, main
from tests.deployments.conftest import free_port


def _one_line_error(
    capsys: pytest.CaptureFixture[str], argv: list[str], expected: str, code: int = 2
) -> None:
    with pytest.raises(SystemExit) as exited:
        raise SystemExit(main(argv))
    assert exited.value.code == code
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and expected in err, err


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], "the following arguments are required: command"),
        (["serve"], "the following arguments are required: --config"),
        (["serve", "--config", "x.yaml", "--port", "eighty"], "invalid int value: 'eighty'"),
        (["models"], "the following arguments are required: models_command"),
        (["models", "build"], "the following arguments are required: --out"),
        (["launch"], "invalid choice: 'launch'"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], expected: str
) -> None:
    _one_line_error(capsys, argv, expected)


def test_bad_config_file_exits_2_with_the_reason(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    _one_line_error(capsys, ["serve", "--config", str(tmp_path / "nope.yaml")], "nope.yaml: cannot read")
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: {path: /t}\npolicy: {high: 2, low: 3}\n")
    _one_line_error(capsys, ["serve", "--config", str(bad)], "policy: need 0 <= low < high")


def test_demo_rejects_nonsense_load_before_building_anything(capsys: pytest.CaptureFixture[str]) -> None:
    _one_line_error(
        capsys, ["demo", "--high-clients", "0"], "--high-clients and every --phase-s must be positive"
    )


def test_parser_defaults() -> None:
    args = build_parser().parse_args(["demo"])
    assert (args.port, tuple(args.phase_s), args.high_clients, args.keep_serving) == (
        8000,
        (20.0, 35.0, 25.0),
        12,
        False,
    )
    assert build_parser().parse_args(["bench", "--", "--rates", "1,2"]).args == ["--", "--rates", "1,2"]
    evaluate = build_parser().parse_args(["models", "eval", "--pair", "p", "--", "--prompts", "4"])
    assert evaluate.args == ["--", "--prompts", "4"]


def test_bench_and_eval_delegate_lazily_or_say_they_are_missing(capsys: pytest.CaptureFixture[str]) -> None:
    if importlib.util.find_spec("loadtests.sweep") is None:
        _one_line_error(capsys, ["bench", "--", "--help"], "loadtests.sweep.main is not available", code=1)
    else:
        with pytest.raises(SystemExit) as exited:  # the sweep's own argparse answers --help
            main(["bench", "--", "--help"])
        assert exited.value.code == 0
    if importlib.util.find_spec("loadtests.bench.accept_length") is None:
        _one_line_error(
            capsys,
            ["models", "eval", "--pair", "/nowhere"],
            "loadtests.bench.accept_length.main is not available",
            code=1,
        )
    else:  # evaluate's own check answers before any engine starts
        _one_line_error(capsys, ["models", "eval", "--pair", "/nowhere"], "no model pair in /nowhere", code=2)


def test_a_held_port_exits_2_before_ray_starts(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        config = tmp_path / "c.yaml"
        config.write_text("model: {path: /nonexistent-model}\nserve: {host: 127.0.0.1}\n")
        t0 = time.monotonic()
        _one_line_error(
            capsys,
            ["serve", "--config", str(config), "--port", str(port)],
            f"cannot serve on 127.0.0.1:{port}",
        )
        assert time.monotonic() - t0 < 30  # refused up front: no Ray, no engine


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("path: pair/target\n  draft_path: pair/draft", "model.path {d}/pair/target does not exist; "
         "build it first: specflip models build --out {d}/pair"),
        ("path: {d}\n  draft_path: {d}/shapes/eagle3-8b\n", "model.draft_path {d}/shapes/eagle3-8b does not "
         "exist; build it first: specflip models shapes --out {d}/shapes"),
        ("path: /nonexistent/llama", "model.path /nonexistent/llama does not exist; point model.path at a model "
         "directory"),
        ("path: empty", "model.path {d}/empty has no config.json (not a model directory)"),
    ],
)  # fmt: skip
def test_missing_model_files_exit_2_with_the_path_and_the_build_command_before_ray_starts(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, model: str, expected: str
) -> None:
    import ray

    (tmp_path / "config.json").write_text("{}")  # the target of the draft case is there
    (tmp_path / "empty").mkdir()
    config = tmp_path / "c.yaml"
    config.write_text(f"model:\n  {model.format(d=tmp_path)}\nserve: {{host: 127.0.0.1}}\n")
    t0 = time.monotonic()
    argv = ["serve", "--config", str(config), "--port", str(free_port())]
    _one_line_error(capsys, argv, expected.format(d=tmp_path))
    assert time.monotonic() - t0 < 30 and not ray.is_initialized()  # refused up front: no Ray, no engine
