"""Real SGLang engines on CPU, shared by every test of this package (one start each per session)."""

from __future__ import annotations

import pytest
import torch

from patched_worker.cpu import shim

if not torch.cuda.is_available():
    shim.enable()  # CPU host: real engine through the shim; set before anything imports sgl_kernel


class Engines:
    """Starts each engine configuration once, on first use; shuts all down at session end."""

    def __init__(self, pair):
        self.pair = pair
        self._engines: dict[tuple, object] = {}

    def plain(self):
        return self._get(("plain",))

    def spec(self, topk: int, steps: int, draft_tokens: int, **switch):
        return self._get(("spec", topk, steps, draft_tokens, tuple(sorted(switch.items()))))

    def _get(self, key):
        if key not in self._engines:
            import sglang

            from patched_worker.engine import SpecFlipEngine, cpu_engine_kwargs
            from patched_worker.state import SwitchConfig

            if key[0] == "plain":
                self._engines[key] = sglang.Engine(**cpu_engine_kwargs(self.pair.target, None))
            else:
                _, topk, steps, n, switch = key
                self._engines[key] = SpecFlipEngine(
                    switch=SwitchConfig(**dict(switch)),
                    **cpu_engine_kwargs(self.pair.target, self.pair.draft, steps=steps, topk=topk, draft_tokens=n))
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
