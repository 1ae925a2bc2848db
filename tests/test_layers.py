"""The import graph is the architecture (docs/architecture.md, "Layers"): serving code never imports
the tooling, and the tooling depends on the product, not the reverse.

Serving = every module of deployments/, policy/ and patched_worker/ except the tooling inside
them: the simulator (policy/sim/) and model building (patched_worker/models/). Tooling =
loadtests/ (load harness, benchmarks, demo, the CLI's tooling subcommands), policy.sim,
patched_worker.models. Every import counts, including those inside functions, and so do module
names passed as strings (importlib). The CLI reaches the tooling's subcommands through the
`specflip.commands` entry point only.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("deployments", "policy", "patched_worker")
TOOLING = ("loadtests", "policy.sim", "patched_worker.models")
_TOOLING_NAME = re.compile(r"^(loadtests|policy\.sim|patched_worker\.models)(\.\w+)*$")


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_tooling(module: str) -> bool:
    return any(module == t or module.startswith(t + ".") for t in TOOLING)


PRODUCT_MODULES = sorted(_module(p) for pkg in PRODUCT for p in (ROOT / pkg).rglob("*.py"))
SERVING = [m for m in PRODUCT_MODULES if not _is_tooling(m)]


def _imports(module: str) -> list[tuple[str, int, bool]]:
    path = ROOT / (module.replace(".", "/") + ".py")
    return _imports_in(path if path.exists() else ROOT / module.replace(".", "/") / "__init__.py")


def _imports_in(path: Path) -> list[tuple[str, int, bool]]:
    """(imported module or module-name string, line, at module top level) for every import in the file."""
    tree = ast.parse(path.read_text())
    top = {id(n) for n in tree.body} | {id(n) for s in tree.body if isinstance(s, ast.If) for n in s.body}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno, id(node) in top) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found += [(f"{node.module}.{a.name}", node.lineno, id(node) in top) for a in node.names]
            found.append((node.module, node.lineno, id(node) in top))
        elif (
            isinstance(node, ast.Constant) and isinstance(node.value, str) and _TOOLING_NAME.match(node.value)
        ):
            found.append((node.value, node.lineno, False))  # importlib.import_module("...") and the like
    return found


def test_the_layers_cover_the_packages() -> None:
    assert {"deployments.app", "deployments.server", "policy.rules", "patched_worker.install"} <= set(SERVING)
    assert {"policy.sim.run", "patched_worker.models.build"} <= set(PRODUCT_MODULES) - set(SERVING)


@pytest.mark.parametrize("module", SERVING)
def test_serving_module_imports_no_tooling(module: str) -> None:
    bad = sorted({f"{name} (line {line})" for name, line, _ in _imports(module) if _is_tooling(name)})
    assert not bad, f"{module} (serving) imports tooling: {bad}"


def test_the_cli_gets_the_tooling_subcommands_from_the_entry_point() -> None:
    from importlib.metadata import entry_points

    from deployments.cli import COMMANDS_GROUP, build_parser

    assert [e.value for e in entry_points(group=COMMANDS_GROUP)] == ["loadtests.commands:register"]
    commands = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert {"serve", "demo", "models", "bench"} <= set(commands)


@pytest.mark.parametrize("module", PRODUCT_MODULES)
def test_product_packages_never_import_the_load_harness(module: str) -> None:
    """The simulator and model building live in product packages: they may use the product, not loadtests."""
    bad = sorted({name for name, _, _ in _imports(module) if name.split(".")[0] == "loadtests"})
    assert not bad, f"{module} imports {bad}"


def test_the_walk_sees_imports_inside_functions_and_by_name(tmp_path: Path) -> None:
    """A fake module with each kind of import the checks must catch (failure injection)."""
    fake = tmp_path / "fake_serving_module.py"
    fake.write_text(
        "import importlib\n"
        "from policy import sim\n\n"
        "def late():\n"
        "    from loadtests.sweep import main\n"
        "    import policy.sim.run\n"
        "    return importlib.import_module('patched_worker.models.build'), main, policy, sim\n"
    )
    found = {(name, top) for name, _, top in _imports_in(fake) if _is_tooling(name)}
    assert found == {
        ("policy.sim", True),
        ("loadtests.sweep", False),
        ("loadtests.sweep.main", False),
        ("policy.sim.run", False),
        ("patched_worker.models.build", False),
    }
