"""`python -m loadtests.rawvsapp` end to end on CPU: SGLang's own server and the app on both data
paths (the Serve ingress and direct streaming), one replica of the tiny pair each, the same Locust
client, profiles of the serving processes, and the report. Asserts what the report says, not speed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from loadtests.rawvsapp import main

pytestmark = [pytest.mark.serve, pytest.mark.engine, pytest.mark.slow]

EXAMPLE = Path(__file__).resolve().parents[2] / "deployments" / "examples" / "cpu-tiny-1replica.yaml"


def _config(tmp: Path, pair, data_path: str) -> Path:  # noqa: ANN001 - the model_pair fixture
    cfg = yaml.safe_load(EXAMPLE.read_text())
    cfg["model"].update(path=pair.target, draft_path=pair.draft)
    cfg["serve"]["data_path"] = data_path
    path = tmp / f"{data_path}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_raw_sglang_and_both_data_paths_side_by_side(tmp_path: Path, model_pair) -> None:  # noqa: ANN001
    ingress, direct = _config(tmp_path, model_pair, "ingress"), _config(tmp_path, model_pair, "direct")
    out = tmp_path / "out"
    argv = ["--config", str(ingress), "--app", f"ingress={ingress}", "--app", f"direct={direct}",
            "--speculation", "off", "--concurrency", "1,2", "--stream", "yes", "--duration", "5",
            "--warmup", "2", "--output-len", "24", "--profile-at", "2", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0

    points = json.loads((out / "results.json").read_text())["points"]
    assert {(p["target"], p["concurrency"]) for p in points} == {
        (t, c) for t in ("raw", "ingress", "direct") for c in (1, 2)
    }
    for p in points:
        assert p["requests"] > 0 and p["errors"] == 0, p
        assert p["output_tok_s"] > 0 and p["ttft_p50_ms"] > 0 and p["chunks_s"] > 0

    report = (out / "report.md").read_text()
    for target in ("ingress", "direct"):
        assert f"## {target} vs raw, speculation off, streaming" in report
        assert f"- {target}, speculation off: TTFT p50 overhead at c=1 <= 5 ms:" in report
        assert f"- {target}, speculation off: no first-token stall after the switch" in report
    assert "Client ceiling: not calibrated" in report
    # every process on each path was found and sampled (py-spy may be refused by the host: then the
    # error column says so, and the processes are still listed with their CPU use)
    assert "### raw, speculation off, c=2 (streaming)" in report
    assert "| http+tokenizer |" in report and "| scheduler |" in report
    assert "### ingress, speculation off, c=2 (streaming)" in report
    assert "| proxy |" in report and "| ingress |" in report and "| replica |" in report
    assert "### direct, speculation off, c=2 (streaming)" in report
    assert "| haproxy |" in report and "| router |" in report
