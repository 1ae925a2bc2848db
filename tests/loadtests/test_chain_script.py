"""docs/gpu/serving_chain.sh's own mechanics, with no step to run (no engine, seconds): the settings of a
block file (CHAIN_BLOCK), a block that needs a setting it was not given refused before anything runs, and
a chain script rewritten on disk while it runs (a device command copies the working tree onto the host
again) running on to its end."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHAIN = ROOT / "docs" / "gpu" / "serving_chain.sh"


def _env(tmp: Path, **settings: str) -> dict[str, str]:
    """A bare host's environment, a config whose model folder exists (no shapes step) and no steps."""
    model = tmp / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text("{}")
    cfg = yaml.safe_load((ROOT / "deployments" / "examples" / "h200-dummy8b-tree.yaml").read_text())
    cfg["model"].update(path=str(model), draft_path=str(model))
    (tmp / "tree.yaml").write_text(yaml.safe_dump(cfg))
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHAIN_") and k != "PYTHONPATH"}
    env.update(
        CHAIN_RESULTS=str(tmp / "results"),
        CHAIN_CONFIG=str(tmp / "tree.yaml"),
        CHAIN_RAWVSAPP="skip",
        CHAIN_ENV_SH=str(tmp / "no-bundle-here"),
        CHAIN_JIT=str(tmp / "no-jit-here"),
        PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    )
    return {**env, **settings}


def _run(script: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(script), str(ROOT)], env=env, capture_output=True, text=True, timeout=120
    )


def test_a_block_files_settings_replace_the_environments(tmp_path: Path) -> None:
    env = _env(tmp_path, CHAIN_SWEEP="--shape tree")
    other = tmp_path / "other.yaml"
    other.write_text((tmp_path / "tree.yaml").read_text())
    block = tmp_path / "block.env"
    block.write_text(f"# a block\nCHAIN_CONFIG={other}\nCHAIN_SWEEP=\n")  # another config, no sweep
    done = _run(CHAIN, {**env, "CHAIN_BLOCK": str(block)})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert f"settings from {block}: CHAIN_CONFIG CHAIN_SWEEP" in done.stdout
    progress = (tmp_path / "results" / "progress.log").read_text()
    assert f"config {other}," in progress and "all done" in progress
    assert "sweep: start" not in progress


def test_the_open_block_without_the_closed_run_is_refused_before_anything_runs(tmp_path: Path) -> None:
    env = _env(tmp_path, CHAIN_BLOCK=str(ROOT / "docs" / "gpu" / "blocks" / "transition-open.env"))
    env.pop("CLOSED_RUN", None)
    done = _run(CHAIN, env)
    assert done.returncode != 0 and "set CLOSED_RUN to the committed run folder" in done.stderr, done.stderr
    assert not (tmp_path / "results").exists()


def test_a_chain_rewritten_on_disk_while_it_runs_runs_to_its_end(tmp_path: Path) -> None:
    """The host's copy of the chain is overwritten in place mid-run (here by the file the chain sources
    once it has copied the code): every byte `exit 7`. The chain runs from its own copy: rc 0."""
    script = tmp_path / "serving_chain.sh"
    script.write_bytes(CHAIN.read_bytes())
    size = script.stat().st_size
    rewrite = tmp_path / "rewrite.sh"
    rewrite.write_text(f"yes 'exit 7' | head -c {size} > {script}\n")
    copies = tmp_path / "tmp"  # where the chain puts its own copy
    copies.mkdir()
    done = _run(script, _env(tmp_path, CHAIN_ENV_SH=str(rewrite), TMPDIR=str(copies)))
    assert script.read_text().startswith("exit 7\nexit 7")  # it was rewritten
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "all done" in (tmp_path / "results" / "progress.log").read_text()
    assert not list(copies.glob("serving_chain.*"))  # the copy removed once running
