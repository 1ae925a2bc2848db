"""Structured output with speculation ON, OFF and toggled: valid, and token-identical to the plain engine.

SGLang's xgrammar backend (json_schema, regex, ebnf) on the real engine, CPU, greedy. Each
batch mixes constrained requests of all three kinds with unconstrained ones, so grammar and
grammar-free rows share every step. Also under SGLang's overlap scheduler (the GPU default;
the CPU shim keeps it on for one engine): there the previous step's tokens reach the
grammars only through the scheduler's grammar barrier, which OFF steps must call before
their mask is built (without it this test fails: stale masks, rejected tokens).
"""

from __future__ import annotations

import json
import random
import re

import pytest

from tests.patched_worker.helpers import first_mismatch, greedy, random_schedule, submit_staggered
from tests.structured_cases import EBNF, EBNF_AS_REGEX, REGEX, SCHEMA

pytestmark = pytest.mark.engine

ENGINES = {  # label -> how the shared session engine is reached
    "topk1": lambda engines: engines.spec(1, 3, 4),
    "topk4": lambda engines: engines.spec(4, 3, 8),
    "topk4-overlap": lambda engines: engines.spec_overlap(4, 3, 8),
}
MAX_NEW = 48


def _valid_json(text: str) -> bool:
    try:
        value = json.loads(text)
    except ValueError:
        return False
    return (
        isinstance(value, dict)
        and set(value) == {"name", "size", "kind"}
        and isinstance(value["name"], str)
        and len(value["name"]) <= 8
        and type(value["size"]) is int
        and 0 <= value["size"] <= 999
        and value["kind"] in ("list", "dict", "set")
    )


CONSTRAINTS = {
    "json_schema": (json.dumps(SCHEMA), _valid_json),
    "regex": (REGEX, lambda text: re.fullmatch(REGEX, text) is not None),
    "ebnf": (EBNF, lambda text: re.fullmatch(EBNF_AS_REGEX, text) is not None),
}
PROMPTS = ["def add(a, b):", "class Stack:", "import os\n\ndef", "x = {"]


def _batch() -> list[tuple[str | None, dict]]:
    """(constraint kind or None, generate keywords): every kind on 3 prompts, plus 3 free requests."""
    out: list[tuple[str | None, dict]] = []
    for k, (kind, (spec, _)) in enumerate(CONSTRAINTS.items()):
        for prompt in PROMPTS[k : k + 3]:
            out.append(
                (
                    kind,
                    {
                        "prompt": prompt,
                        "sampling_params": {"max_new_tokens": MAX_NEW, "temperature": 0, kind: spec},
                    },
                )
            )
    out += [(None, {"prompt": p, "sampling_params": greedy(24)}) for p in PROMPTS[:3]]
    return out


BATCH = _batch()


def _generate(engine, delays=None) -> list[dict]:
    return submit_staggered(engine, [kw for _, kw in BATCH], delays or [0.0] * len(BATCH))


def _check(outs: list[dict], label: str) -> None:
    for (kind, _), out in zip(BATCH, outs, strict=True):
        if kind is not None:
            assert CONSTRAINTS[kind][1](out["text"]), f"{label}: {kind} output invalid: {out['text']!r}"
            assert out["meta_info"]["finish_reason"]["type"] == "stop", (label, kind, out["text"])


@pytest.fixture(scope="module")
def plain_outs(engines) -> list[dict]:
    outs = _generate(engines.plain())
    _check(outs, "plain")
    return outs


def test_the_constraints_change_the_output(engines, plain_outs):
    """Without its constraint the same prompt gives invalid text: an ignored grammar would be caught."""
    constrained = [(kind, kw["prompt"]) for kind, kw in BATCH if kind is not None]
    free = engines.plain().generate(prompt=[p for _, p in constrained], sampling_params=greedy(MAX_NEW))
    kinds = [kind for kind, _ in constrained]
    for kind in CONSTRAINTS:
        texts = [o["text"] for k, o in zip(kinds, free, strict=True) if k == kind]
        assert not all(CONSTRAINTS[kind][1](t) for t in texts), f"{kind}: unconstrained text already valid"


def _apply_mode(engine, enabled: bool) -> None:
    engine.set_speculation(enabled)
    engine.generate(input_ids=[[1, 2, 3]], sampling_params=greedy(2))  # applies the pending mode


@pytest.mark.parametrize("label", list(ENGINES))
def test_structured_output_equals_plain_with_speculation_on_off_and_toggled(engines, plain_outs, label):
    engine = ENGINES[label](engines)
    engine.set_strategy("warm_kv")
    want = [o["output_ids"] for o in plain_outs]
    for enabled, mode in ((True, "on"), (False, "off")):
        _apply_mode(engine, enabled)
        before = engine.get_speculation_state()
        outs = _generate(engine)
        after = engine.get_speculation_state()
        _check(outs, mode)
        got = [o["output_ids"] for o in outs]
        assert first_mismatch(got, want) is None, (mode, first_mismatch(got, want))
        ran, idle = ("on_steps", "off_steps") if enabled else ("off_steps", "on_steps")
        assert getattr(after, ran) > getattr(before, ran) and getattr(after, idle) == getattr(before, idle), (
            mode
        )
    _apply_mode(engine, True)
    before = engine.get_speculation_state()
    for seed in range(3):
        rng = random.Random(f"structured-{label}-{seed}")
        engine.schedule_flips(random_schedule(rng, horizon=40))
        outs = _generate(engine, [rng.choice([0.0, 0.0, 0.1, 0.3]) for _ in BATCH])
        _check(outs, f"toggled seed {seed}")
        got = [o["output_ids"] for o in outs]
        assert first_mismatch(got, want) is None, (seed, first_mismatch(got, want))
    after = engine.get_speculation_state()
    assert after.toggles - before.toggles >= 6 and after.resyncs > before.resyncs
