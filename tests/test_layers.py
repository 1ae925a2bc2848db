"""The import graph is the architecture (docs/architecture.md, "Layers"): serving code never imports
the tooling, the tooling depends on the product, not the reverse, and inside `deployments/` each
folder is one process's part of a request's way and imports only what lies below it.

Serving = every module of deployments/, policy/ and patched_worker/. Tooling = loadtests/, one
folder per tool (TOOL_FOLDERS: the Locust harness, the sweep, raw-vs-app, calibration, benchmarks,
the fleet simulator, model building, the demo) beside the CLI's tooling subcommands and the few
modules several tools share (TOOLING_TOP). Every import counts, including those inside functions and
under TYPE_CHECKING, and so do module names passed as strings (importlib). The CLI reaches the
tooling's subcommands through the `specflip.commands` entry point only.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("deployments", "policy", "patched_worker")
TOOLING = ("loadtests",)
# loadtests/: one folder per tool (docs/architecture.md, "Tooling"), and at the top only the package,
# the CLI's subcommands and the modules several tools share
TOOL_FOLDERS = ("locust", "sweep", "rawvsapp", "calibrate", "bench", "sim", "models", "demo")
TOOLING_TOP = ("__init__", "__main__", "commands", "metrics", "markdown", "servers")
_MODULE_NAME = re.compile(r"^(loadtests|deployments)(\.\w+)+$")  # a module named in a string


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_tooling(module: str) -> bool:
    return any(module == t or module.startswith(t + ".") for t in TOOLING)


PRODUCT_MODULES = sorted(_module(p) for pkg in PRODUCT for p in (ROOT / pkg).rglob("*.py"))
SERVING = PRODUCT_MODULES


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
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and _MODULE_NAME.match(node.value.split(":")[0])
        ):
            found.append(
                (node.value.split(":")[0], node.lineno, False)
            )  # importlib.import_module("...") and the like
    return found


# deployments/: folder -> the folders and modules of deployments/ it must not import. The floor
# (config, its settings, the Ray compat layer, the CPU default, the HTTP client) sits under every
# folder; the top (app, local, cli) assembles them.
FLOOR = ("deployments.config", "deployments.ray_compat", "deployments.defaults",
         "deployments.client", "deployments.routing.settings")  # fmt: skip
FORBIDDEN = {
    # the LLMRouter process: ranks replicas from their stats, holds no API and no engine
    "deployments.routing": (
        "deployments.http",
        "deployments.replica",
        "deployments.app",
        "deployments.local",
    ),
    # the API edge: request checks, refusals, handlers; reaches the engine only through the server it is handed
    "deployments.http": (
        "deployments.replica",
        "deployments.routing.router",
        "deployments.routing.journal",
        "deployments.app",
        "deployments.local",
    ),
    # the replica process around its engine: takes the class from the request, never the router's
    # code or counts (what it served is its own metric)
    "deployments.replica": (
        "deployments.routing.router",
        "deployments.routing.journal",
        "deployments.app",
        "deployments.local",
    ),
}


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def _folder_of(module: str) -> str | None:
    if module in FLOOR:
        return "floor"
    return next((f for f in FORBIDDEN if _under(module, f)), None)


def test_the_layers_cover_the_packages() -> None:
    assert {"deployments.app", "deployments.replica.server", "policy.rules", "patched_worker.install"} <= set(
        SERVING
    )
    assert not any(_under(m, "loadtests") for m in SERVING)
    folders = {_folder_of(m) for m in SERVING if _under(m, "deployments")}
    assert folders == {None, "floor", "deployments.http", "deployments.replica", "deployments.routing"}


@pytest.mark.parametrize("module", SERVING)
def test_serving_module_imports_no_tooling(module: str) -> None:
    bad = sorted({f"{name} (line {line})" for name, line, _ in _imports(module) if _is_tooling(name)})
    assert not bad, f"{module} (serving) imports tooling: {bad}"


@pytest.mark.parametrize("module", [m for m in SERVING if _folder_of(m) is not None])
def test_each_deployments_folder_imports_only_what_lies_below_it(module: str) -> None:
    folder = _folder_of(module)
    if folder == "floor":
        banned: tuple[str, ...] = tuple(f for f in FORBIDDEN) + ("deployments.app", "deployments.local")
        allowed = FLOOR
    else:
        assert folder is not None
        banned, allowed = FORBIDDEN[folder], ()
    bad = sorted(
        {f"{name} (line {line})" for name, line, _ in _imports(module)
         if any(_under(name, b) for b in banned) and not any(_under(name, a) for a in allowed)}
    )  # fmt: skip
    assert not bad, f"{module} ({folder}) imports {bad}"


@pytest.mark.parametrize("module", [m for m in SERVING if _folder_of(m) not in (None, "floor")])
def test_no_folder_imports_a_floor_module_that_imports_the_folder(module: str) -> None:
    """The floor lies under every folder, but deployments.config imports the routing folder's
    settings: a routing module that imported the config back would make the two import each other
    (the router takes the policy actor's namespace from its kwargs instead)."""
    folder = _folder_of(module)
    assert folder is not None
    bad = set()
    for name, line, _ in _imports(module):
        floor = next((f for f in FLOOR if _under(name, f)), None)
        if floor is not None and any(_under(n, folder) for n, _, _ in _imports(floor)):
            bad.add(f"{floor} (line {line}), which imports {folder}")
    assert not bad, f"{module} imports {sorted(bad)}"


def test_no_two_serving_modules_share_a_name_unless_one_concept_in_two_layers() -> None:
    """Where a name repeats, the folder says the layer: the engine's and the replica's `engine`, the
    HTTP edge's and the engine's `errors` and `control`, the API's and the policy's `metrics`."""
    same_concept = {"engine", "errors", "control", "metrics", "state", "__init__"}
    by_name: dict[str, list[str]] = {}
    for m in SERVING:
        path = ROOT / (m.replace(".", "/") + ".py")
        name = path.stem if path.exists() else "__init__"
        by_name.setdefault(name, []).append(m)
    repeated = {n: ms for n, ms in by_name.items() if len(ms) > 1 and n not in same_concept}
    assert not repeated, repeated


def test_the_cli_gets_the_tooling_subcommands_from_the_entry_point() -> None:
    from importlib.metadata import entry_points

    from deployments.cli import COMMANDS_GROUP, build_parser

    assert [e.value for e in entry_points(group=COMMANDS_GROUP)] == ["loadtests.commands:register"]
    commands = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert {"serve", "demo", "models", "bench"} <= set(commands)


def test_the_walk_sees_imports_inside_functions_and_by_name(tmp_path: Path) -> None:
    """A fake module with each kind of import the checks must catch (failure injection)."""
    fake = tmp_path / "fake_serving_module.py"
    fake.write_text(
        "import importlib\n"
        "from loadtests import sim\n\n"
        "def late():\n"
        "    from loadtests.sweep import main\n"
        "    import loadtests.sim.run\n"
        "    from deployments.routing.router import SpecFlipRouter\n"
        "    cls = 'deployments.routing.router:SpecFlipRouter'\n"
        "    return importlib.import_module('loadtests.models.build'), main, sim, cls\n"
    )
    found = {(name, top) for name, _, top in _imports_in(fake)}
    assert {
        ("loadtests", True),
        ("loadtests.sim", True),
        ("loadtests.sweep", False),
        ("loadtests.sweep.main", False),
        ("loadtests.sim.run", False),
        ("loadtests.models.build", False),
        ("deployments.routing.router", False),
    } <= found
    assert any(_under(n, "deployments.routing.router") for n, _ in found)


def test_loadtests_holds_one_folder_per_tool_and_only_shared_modules_at_the_top() -> None:
    """A new tool gets its folder; a module at the top is one that several tools import."""
    top = ROOT / "loadtests"
    modules = {p.stem for p in top.glob("*.py")}
    folders = {p.parent.name for p in top.glob("*/__init__.py")}
    assert modules == set(TOOLING_TOP), f"loadtests/ top-level modules: {sorted(modules - set(TOOLING_TOP))}"
    assert folders == set(TOOL_FOLDERS)


@pytest.mark.parametrize("folder", TOOL_FOLDERS)
def test_each_tool_folder_says_what_it_is_for_and_what_it_exports(folder: str) -> None:
    tree = ast.parse((ROOT / "loadtests" / folder / "__init__.py").read_text())
    assert ast.get_docstring(tree), f"loadtests/{folder}/__init__.py has no docstring"
    names = {t.id for n in tree.body if isinstance(n, ast.Assign | ast.AnnAssign)
             for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)}  # fmt: skip
    assert "__all__" in names, f"loadtests/{folder}/__init__.py has no __all__"


@pytest.mark.parametrize("module", [m for m in TOOLING_TOP if m not in ("__init__", "__main__", "commands")])
def test_a_shared_module_is_shared(module: str) -> None:
    """A top-level module of loadtests/ earns its place by being imported from two tool folders or more."""
    users = set()
    for folder in TOOL_FOLDERS:
        for path in (ROOT / "loadtests" / folder).rglob("*.py"):
            if any(_under(name, f"loadtests.{module}") for name, _, _ in _imports_in(path)):
                users.add(folder)
    assert len(users) >= 2, f"loadtests.{module} is imported from {sorted(users)} only: move it there"


def test_the_architecture_doc_has_a_row_for_every_tool_folder() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    missing = [f for f in TOOL_FOLDERS if f"| `loadtests/{f}/` |" not in text]
    assert not missing, f"docs/architecture.md's tooling table has no row for {missing}"
