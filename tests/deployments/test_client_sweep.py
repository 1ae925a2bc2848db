"""`loadtests.bench.client_sweep` on CPU, the GPU chain's sweep step in small: SGLang's own benchmark
client, imported once, against the shared app's variants by override (`--target`) and against SGLang's
own plain server with the same engine arguments. Asserts what the chain's results say (the issue's
sweep.csv columns, every run complete and refereed, flips only for the app, the status trace and the
mode plot) and that the app's overrides are put back; not speed."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from loadtests.bench.client_sweep import CSV_FIRST

from .conftest import ROOT, TOKEN

pytestmark = [pytest.mark.serve, pytest.mark.engine]


def test_client_sweep_runs_the_app_variants_and_sglangs_server(
    app: Any, model_pair: Any, tmp_path: Path
) -> None:
    cfg = yaml.safe_load((ROOT / "deployments" / "examples" / "cpu-tiny-1replica.yaml").read_text())
    cfg["model"].update(path=model_pair.target, draft_path=model_pair.draft)
    config = tmp_path / "cpu.yaml"
    config.write_text(yaml.safe_dump(cfg))
    out = tmp_path / "sweep"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SPECFLIP_CONTROL_TOKEN": TOKEN}
    cmd = [
        sys.executable, "-m", "loadtests.bench.client_sweep", "--config", str(config), "--target", app.base,
        "--shape", "chain", "--variants", "off,dynamic,raw_plain", "--concurrency", "2", "--prompts", "2=4",
        "--input-len", "12", "--output-len", "6", "--out", str(out),
    ]  # fmt: skip
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    with (out / "sweep.csv").open() as fh:
        reader = csv.DictReader(fh)
        assert tuple(reader.fieldnames or ())[: len(CSV_FIRST)] == CSV_FIRST
        rows = {r["variant"]: r for r in reader}
    assert set(rows) == {"off", "dynamic", "raw_plain"}
    for variant, r in rows.items():
        assert (r["shape"], r["concurrency"], r["repeat"]) == ("chain", "2", "0"), r
        assert int(r["completed"]) == int(r["prompts"]) == 4, r
        assert float(r["output_tok_s"]) > 0 and float(r["tpot_p50_ms"]) > 0, r
        assert (r["flips"] == "") is (variant == "raw_plain"), r  # flips are the app's
    # the app's replicas count the tokens they generated: the referee saw the app's runs
    assert float(rows["off"]["engine_tok_s"]) > 0 and float(rows["dynamic"]["engine_tok_s"]) > 0
    assert float(rows["off"]["on_fraction"]) == 0.0  # held OFF by override throughout
    with (out / "status.csv").open() as fh:
        status = list(csv.DictReader(fh))
    assert {r["variant"] for r in status} == {"off", "dynamic"}
    assert (out / "modes.png").stat().st_size > 0
    assert {r["override"] for r in app.client.replicas()} == {"auto"}  # put back as found
