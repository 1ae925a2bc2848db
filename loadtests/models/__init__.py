"""Tiny model pairs built locally (no hub): a trained Llama target and an EAGLE-3 draft
trained on the target's own aux hidden states, in the layout SGLang 0.5.17's
`llama_eagle3` loader reads. For tests, demos and benchmarks; users pass real paths.
Tooling: serving code never imports it (`specflip models` and `specflip demo` do, inside their
subcommands). The accept-length measurement is loadtests.bench.accept_length."""

from loadtests.models.build import PairSpec, build_pair

__all__ = ["PairSpec", "build_pair"]
