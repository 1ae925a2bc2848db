"""The pure core stays pure: no ray, torch or sglang, neither written in the source nor
pulled in when imported (checked in a fresh interpreter)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Every module of the package but the Ray shell (policy/actor.py), and the fleet simulator that
# runs those rules (loadtests/sim/), must stay importable without Ray.
PURE = sorted(
    ".".join(p.relative_to(ROOT).with_suffix("").parts)
    for folder in ("policy", "loadtests/sim")
    for p in (ROOT / folder).rglob("*.py")
    if p.stem != "__init__" and p.name != "actor.py"
)
FORBIDDEN = ("ray", "torch", "sglang")


def _imported_names(module: str) -> set[str]:
    tree = ast.parse((ROOT / (module.replace(".", "/") + ".py")).read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_the_pure_core_named_by_the_design_is_covered() -> None:
    assert {
        "policy.types",
        "policy.rules",
        "policy.state",
        "loadtests.sim.run",
        "loadtests.sim.model",
    } <= set(PURE)


@pytest.mark.parametrize("module", PURE)
def test_source_imports_nothing_forbidden(module: str) -> None:
    bad = {n for n in _imported_names(module) if n.split(".")[0] in FORBIDDEN}
    assert not bad, f"{module} imports {bad}"


def test_importing_the_pure_modules_loads_no_forbidden_package() -> None:
    code = (
        "import importlib, json, sys\n"
        f"for m in {PURE!r}: importlib.import_module(m)\n"
        f"print(json.dumps(sorted(k for k in sys.modules if k.split('.')[0] in {FORBIDDEN!r})))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []
