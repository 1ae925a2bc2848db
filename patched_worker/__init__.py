"""Everything that touches SGLang internals: the speculation switch, its install path, the CPU shim.

Importing this package imports no SGLang or torch (the CPU boot hook imports it at
interpreter start-up); the names below load on first use.
"""

from __future__ import annotations

import importlib

_LAZY = {
    "SGLANG_VERSION": "patched_worker.version",
    "SpecFlipControlTimeout": "patched_worker.errors",
    "SpeculationRpcError": "patched_worker.errors",
    "UnsupportedSetup": "patched_worker.errors",
    "SpecFlipEngine": "patched_worker.engine",
    "cpu_engine_kwargs": "patched_worker.engine",
    "SpeculationState": "patched_worker.state",
    "Strategy": "patched_worker.state",
    "SwitchConfig": "patched_worker.state",
    "install": "patched_worker.install",
}
__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'patched_worker' has no attribute {name!r}")
