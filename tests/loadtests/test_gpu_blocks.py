"""docs/gpu/blocks/*.env, the GPU blocks' settings, checked on CPU before a lease is spent on them: every
name one the chain reads, the config loads, every step's arguments pass that step's own checks
(`--dry-run`: nothing starts), the transitions' plans made from a sweep like the one the block would
leave, and every sweep run long enough at the fastest rate the committed H200 sweeps saw at its level."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from loadtests.bench import (
    client_sweep,
    client_transition,
    engine_arrivals,
    step_costs,
    sweep_csv,
    transition_plan,
)
from loadtests.bench.sweep_plan import pairs

ROOT = Path(__file__).resolve().parents[2]
BLOCKS = sorted((ROOT / "docs" / "gpu" / "blocks").glob("*.env"))
CHAIN_NAMES = set(re.findall(r"\bCHAIN_[A-Z_]+\b", (ROOT / "docs" / "gpu" / "serving_chain.sh").read_text()))
OTHER_NAMES = {"SPECFLIP_GPU_ATTENTION"}  # the GPU correctness test's attention backend
MIN_RUN_S = {"transition-open.env": 60.0}  # its sweep: the minute-long steady runs; the rest 20 s


def _settings(block: Path, closed_run: Path) -> dict[str, str]:
    """The block's assignments as the chain sources them (from the repo root, `set -a`)."""
    names = re.findall(r"^([A-Z_]+)=", block.read_text(), flags=re.M)
    script = f"set -a -u; CLOSED_RUN={shlex.quote(str(closed_run))}; . {shlex.quote(str(block))}; "
    script += "; ".join(f'printf "%s\\0" "${name}"' for name in names)
    done = subprocess.run(["bash", "-c", script], cwd=ROOT, capture_output=True, text=True, check=True)
    return dict(zip(names, done.stdout.split("\0")[:-1], strict=True))


def _sweep(path: Path, levels: list[int]) -> Path:
    """A sweep.csv with on and off rows at the levels (ON faster at the lowest, OFF at the others)."""
    path.mkdir(parents=True, exist_ok=True)
    rows = "".join(
        f"tree,on,{c},0,{100.0 * c}\ntree,off,{c},0,{(70.0 if c == min(levels) else 190.0) * c}\n"
        for c in levels
    )
    (path / "sweep.csv").write_text("shape,variant,concurrency,repeat,output_tok_s\n" + rows)
    return path


def _best_rates() -> dict[int, float]:
    """The fastest output tok/s any variant reached at each level in the committed H200 sweeps."""
    best: dict[int, float] = {}
    for r in sweep_csv.read(sorted((ROOT / "docs" / "gpu").glob("h200-*/sweep.csv"))):
        c = int(r["concurrency"])
        best[c] = max(best.get(c, 0.0), float(r["output_tok_s"]))
    return best


def test_there_are_blocks() -> None:
    assert {b.name for b in BLOCKS} >= {"prefill-fix.env", "transition-closed.env", "transition-open.env"}


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b.name)
def test_every_step_of_the_block_passes_its_own_checks(
    block: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    s = _settings(block, _sweep(tmp_path / "closed-run", [2, 256]))
    assert set(s) <= CHAIN_NAMES | OTHER_NAMES, set(s) - CHAIN_NAMES - OTHER_NAMES
    config = str(ROOT / s["CHAIN_CONFIG"])
    from deployments.config import load_config

    load_config(config)
    runs = {
        "CHAIN_SWEEP": client_sweep.main,
        "CHAIN_ARRIVALS": engine_arrivals.main,
        "CHAIN_FIT": step_costs.main,
    }
    for name, main in runs.items():
        if s.get(name):
            assert main(["--config", config, *shlex.split(s[name]), "--dry-run"]) == 0, (
                name,
                capsys.readouterr(),
            )
    for workload in ("closed", "open"):
        if not s.get(f"CHAIN_{workload.upper()}"):
            continue
        phases: list[str] = []
        if plan := s.get(f"CHAIN_{workload.upper()}_PLAN"):
            own = [
                "--sweep",
                str(_sweep(tmp_path / "own", [2, 256])),
            ]  # the block's own sweep, when it ran one
            args = [
                "--workload",
                workload,
                "--config",
                config,
                *(own if s.get("CHAIN_SWEEP") else []),
                *shlex.split(plan),
            ]
            capsys.readouterr()
            assert transition_plan.main(args) == 0, capsys.readouterr()
            phases = ["--phases", capsys.readouterr().out.splitlines()[0].removeprefix("--phases ")]
        args = [
            "--config",
            config,
            "--workload",
            workload,
            *shlex.split(s[f"CHAIN_{workload.upper()}"]),
            *phases,
        ]
        assert client_transition.main([*args, "--dry-run"]) == 0, capsys.readouterr()
    if s.get("CHAIN_GPU_TESTS"):
        collected = subprocess.run(
            [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *shlex.split(s["CHAIN_GPU_TESTS"])],
            cwd=ROOT, capture_output=True, text=True,
        )  # fmt: skip
        assert collected.returncode == 0 and "1 test collected" in collected.stdout, collected.stdout[-2000:]


@pytest.mark.parametrize(
    "block", [b for b in BLOCKS if "--shape tree" in b.read_text()], ids=lambda b: b.name
)
def test_every_sweep_run_lasts_long_enough_at_the_fastest_rate_seen(block: Path, tmp_path: Path) -> None:
    """A point is a whole client run of >= 20 s (a minute for the steady flip runs): sized so that even
    the fastest variant at its level, at the best rate an H200 reached there, takes that long."""
    s = _settings(block, tmp_path)
    args = client_sweep.build_parser().parse_args(["--config", "x", *shlex.split(s["CHAIN_SWEEP"])])
    best, floor = _best_rates(), MIN_RUN_S.get(block.name, 20.0)
    for c, n in pairs(args.prompts).items():
        assert c in best, f"no committed H200 rate at c={c}: size {block.name} by hand"
        assert n * args.output_len / best[c] >= floor, (block.name, c, n, best[c])
