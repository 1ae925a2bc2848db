"""SGLang's own benchmark client (`sglang.benchmark.serving`) against a raw SGLang server, refereed
by the server's own log: the second client of `loadtests.rawvsapp`'s agreement table.

The workload matches Locust's as closely as its options allow: prompts sent as token ids
(`--backend sglang --tokenize-prompt`: sent as text, random ids re-tokenize to other lengths; on the
H200 with the tiny pair's tokenizer, 95-token prompts reached the engine as 656-665 tokens), output
lengths uniform over Locust's range and prompt lengths over the same range around `input_len` (its
one range ratio draws both), ignore_eos (the sglang backend's default). The engine's count is its
decode tokens over the client's own duration; the prompt tokens per request the engine saw show
which workload the client actually sent.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from loadtests.rawvsapp.referee import LogReferee

__all__ = ["ClientRun", "run_sglang_client"]


@dataclass(frozen=True)
class ClientRun:
    """SGLang's benchmark client at one level against the plain raw server, with the referee."""

    client: str
    concurrency: int
    prompts: int
    output_tok_s: float
    engine_tok_s: float | None
    duration_s: float
    tpot_p50_ms: float | None
    ttft_p50_ms: float | None
    engine_tokens: int | None = None  # decode tokens the engine's lines count over the run
    engine_prompt_tokens: float | None = None  # prompt tokens per new request, as the engine saw them


def run_sglang_client(
    url: str, referee: LogReferee, c: int, *, input_len: int, output_len: int, spread: float,
    window: float, tokenizer: str, model_id: str, out: Path,
) -> ClientRun | str:  # fmt: skip
    """One run at concurrency `c`: its ClientRun, or a one-line note saying why it failed."""
    prompts = max(4 * c, int(c * window / 8))  # enough waves that ramp-up and tail are small
    out_file, log = out / f"sglang-client-c{c}.jsonl", out / f"sglang-client-c{c}.log"
    cmd = [
        sys.executable, "-m", "sglang.benchmark.serving", "--backend", "sglang", "--tokenize-prompt",
        "--base-url", url, "--dataset-name", "random-ids",
        "--random-input-len", str(round(input_len * (1 + spread))),
        "--random-output-len", str(round(output_len * (1 + spread))),
        "--random-range-ratio", f"{(1 - spread) / (1 + spread):g}",
        "--num-prompts", str(prompts), "--max-concurrency", str(c), "--tokenizer", tokenizer,
        "--model", model_id, "--output-file", str(out_file), "--disable-tqdm", "--seed", "1",
    ]  # fmt: skip
    launched = time.time()
    with log.open("wb") as fh:
        proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, timeout=window * 20 + 120)
    end = time.time()
    if proc.returncode != 0 or not out_file.exists():
        return f"SGLang's client at c={c} failed (exit {proc.returncode}): see {log.name}"
    result = json.loads(out_file.read_text().splitlines()[-1])
    duration = float(result.get("duration") or 0.0)
    tokens = referee.tokens(launched, end)  # the server decodes only for this client then
    return ClientRun(
        "sglang.benchmark.serving", c, prompts, float(result.get("output_throughput") or 0.0),
        tokens / duration if tokens and duration > 0 else None, duration, result.get("median_tpot_ms"),
        result.get("median_ttft_ms"), tokens, referee.prompt_tokens(launched, end),
    )  # fmt: skip
