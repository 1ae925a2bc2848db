"""Real SGLang engines on CPU, shared by every test of this package (one start each per session)."""

from __future__ import annotations

import os

import pytest
import torch

from patched_worker.cpu import shim

if not torch.cuda.is_available():
    shim.enable()  # CPU host: real engine through the shim; set before anything imports sgl_kernel


# every shared engine, plain and speculative alike: JSON-constrained output without free whitespace (the
# tiny model would otherwise pad a JSON object with newlines until max_new_tokens); nothing else changes
SHARED_KWARGS = {"constrained_json_disable_any_whitespace": True}


class Engines:
    """Starts each engine configuration once, on first use; shuts all down at session end."""

    def __init__(self, pair):
        self.pair = pair
        self._engines: dict[tuple, object] = {}

    def plain(self):
        return self._get(("plain",))

    def spec(self, topk: int, steps: int, draft_tokens: int, **switch):
        return self._get(("spec", topk, steps, draft_tokens, tuple(sorted(switch.items()))))

    def spec_chunked(self, topk: int, steps: int, draft_tokens: int, chunk: int):
        """A speculative engine that prefills at most `chunk` tokens per step (a longer prompt is cut)."""
        return self._get(("spec-chunked", topk, steps, draft_tokens, (), chunk))

    def spec_overlap(self, topk: int, steps: int, draft_tokens: int):
        """A speculative engine with SGLang's overlap scheduler on (the GPU default; off on CPU otherwise)."""
        return self._get(("spec-overlap", topk, steps, draft_tokens, ()))

    def _get(self, key):
        if key not in self._engines:
            import sglang

            from patched_worker.engine import SpecFlipEngine, cpu_engine_kwargs
            from patched_worker.state import SwitchConfig

            if key[0] == "plain":
                self._engines[key] = sglang.Engine(
                    **cpu_engine_kwargs(self.pair.target, None, **SHARED_KWARGS)
                )
            else:
                kind, topk, steps, n, switch, *chunk = key
                extra = {"chunked_prefill_size": chunk[0]} if chunk else {}
                if kind == "spec-overlap":
                    os.environ[shim.OVERLAP_ENV] = "1"  # read while the engine's server args resolve
                try:
                    # the tests measure `cold` as the counter-example, as benchmarks do
                    engine = SpecFlipEngine(
                        switch=SwitchConfig(**{"allow_cold": True, **dict(switch)}),
                        **cpu_engine_kwargs(
                            self.pair.target,
                            self.pair.draft,
                            steps=steps,
                            topk=topk,
                            draft_tokens=n,
                            **SHARED_KWARGS,
                            **extra,
                        ),
                    )
                finally:
                    os.environ.pop(shim.OVERLAP_ENV, None)
                assert engine.server_args.disable_overlap_schedule is (kind != "spec-overlap")
                self._engines[key] = engine
        return self._engines[key]

    def close(self):
        for e in self._engines.values():
            e.shutdown()
        self._engines.clear()


@pytest.fixture(scope="session")
def engines(model_pair):
    e = Engines(model_pair)
    yield e
    e.close()


@pytest.fixture(scope="session")
def prompts(model_pair):
    """The engine tests' held-out prompts of mixed lengths (helpers.LENGTHS)."""
    from tests.patched_worker.helpers import mixed_prompts

    return mixed_prompts(model_pair)


@pytest.fixture(scope="session")
def reference(engines, prompts):
    """The plain engine's greedy outputs for `prompts` (helpers.NEW_TOKENS each): the reference every
    speculative run of those prompts must equal token for token. Computed once per session."""
    from tests.patched_worker.helpers import NEW_TOKENS, greedy

    outs = engines.plain().generate(input_ids=prompts, sampling_params=greedy(NEW_TOKENS))
    return [o["output_ids"] for o in outs]
