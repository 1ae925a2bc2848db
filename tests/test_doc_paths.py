"""Every repo path and module a doc names exists: README.md, loadtests/README.md, docs/*.md, k8s/*.md.

What counts as a name of the repo (tests/test_readme.py checks the README's commands and that it
links every doc; this checks what the docs point at):
- a link's target `[text](target)`, relative to the markdown file (web links and anchors aside);
- a path in backticks or in a fenced code block that starts at a top-level entry of the repo
  (`deployments/examples/cpu-tiny.yaml`, `docs/gpu/`): relative to the repo root;
- a path in backticks that starts elsewhere (`cpu/`, `bench/serve_overhead.py`, written under the
  folder the text is about): some tracked path must end with it;
- in a table row whose first cell is a folder (`deployments/http/`), a file or path in backticks
  that does not start at the top (`guard.py`, `cpu/`): inside that folder;
- a dotted module of the repo (`deployments.http.limits`, `loadtests.bench.soak`,
  `deployments.app:build_app`, `deployments.config.DIRECT_STREAMING_ENV`): the module exists, and
  the first name after it is a submodule or a name its top level defines (any name, where the module
  has a `__getattr__`). `policy.<x>` counts only where `policy/<x>` is a module: `policy.tick_s`
  is a config key.
Brace lists expand (`calibration.{md,json}`); `<placeholders>` are not names. Outputs, user paths
and paths outside the repo are not in it: NOT_IN_REPO lists them, each with its reason.
Static, no engine: a few hundred milliseconds.
"""

from __future__ import annotations

import ast
import fnmatch
import functools
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted(
    {
        ROOT / "README.md",
        ROOT / "loadtests" / "README.md",
        *(ROOT / "docs").glob("*.md"),
        *(ROOT / "k8s").glob("*.md"),
    }
)
PACKAGES = ("deployments", "policy", "patched_worker", "loadtests", "tests")

# Paths the docs name that a clone does not hold: what a run writes, a user's own files, or
# what lies beside the repository.
NOT_IN_REPO = {
    "models/": "the tiny pair and the dummy 8B are built there on first use (git-ignored)",
    "out/": "benchmark and sweep results are written there (git-ignored)",
    ".gpu-jit/": "the GPU runs' compiled-kernel cache, carried between sessions (git-ignored)",
    "../shared/": "KubeRay's CRDs beside the repository ($SPECFLIP_KUBERAY_CRDS; tests/k8s/manifests.py)",
}

EXTENSIONS = {"py", "md", "yaml", "yml", "json", "jsonl", "csv", "sh", "toml", "txt", "png", "svg", "log", "lua"}  # fmt: skip
_TICKS = re.compile(r"`([^`\n]+)`")
_LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
_PATH = re.compile(r"^[\w.$-]+(?:/[\w.*-]+)*/(?:[\w*-]+\.\w+|[\w*.-]+)?$")  # a/b/c.ext, a/b/
_MODULE = re.compile(rf"^(?:{'|'.join(PACKAGES)})(?:\.\w+)+(?::\w+)?$")
_WORD = re.compile(r"[\w./$:{},-]+")
_ROW = re.compile(r"^\s*\| `([\w/.-]+/)`")  # a table row about a folder


@functools.cache
def _tracked() -> frozenset[str]:
    """Tracked files and their folders (a folder ends with /), relative to the root."""
    files = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    folders = {"/".join(f.split("/")[:i]) + "/" for f in files for i in range(1, f.count("/") + 1)}
    return frozenset({*files, *folders})


def _top_level() -> set[str]:
    return {p.split("/")[0] for p in _tracked()}


def _is_file_or_folder(word: str) -> bool:
    """a/, x.py, a/x.yaml: not a dotted name such as usage.specflip or a host such as nvidia.com/gpu"""
    return word.endswith("/") or word.rsplit(".", 1)[-1] in EXTENSIONS and "." in word


def _not_in_repo(path: str) -> str | None:
    """The NOT_IN_REPO entry the path falls under, if any."""
    return next((p for p in NOT_IN_REPO if path.startswith(p) or path == p.rstrip("/")), None)


def _exists(path: str) -> bool:
    """Tracked (a file only here, or git-ignored, is not in a clone); a glob must match something."""
    path = path.removeprefix("./")
    if "*" in path:
        return any(fnmatch.fnmatch(p.rstrip("/"), path.rstrip("/")) for p in _tracked())
    return path in _tracked() or path.rstrip("/") + "/" in _tracked()


def _ends_a_tracked_path(path: str) -> bool:
    if "*" in path:
        return any(fnmatch.fnmatch(p.rstrip("/"), "*" + path.rstrip("/")) for p in _tracked())
    return any(p == path or p.endswith("/" + path) for p in _tracked())


def _top_names(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def _module_problem(name: str) -> str | None:
    """Why the dotted name is not a module of the repo (and a name in it), or None."""
    parts = name.replace(":", ".").split(".")
    if parts[0] == "policy" and not (ROOT / "policy" / f"{parts[1]}.py").exists():
        return None  # a config key (policy.tick_s), not a module
    here = ROOT / parts[0]
    for i, part in enumerate(parts[1:], start=1):
        if (here / part).is_dir() and (here / part / "__init__.py").exists():
            here = here / part
        elif (here / f"{part}.py").exists():
            names = _top_names(here / f"{part}.py")
            if i + 1 < len(parts) and parts[i + 1] not in names and "__getattr__" not in names:
                return f"{'/'.join([*parts[: i + 1]])}.py defines no {parts[i + 1]}"
            return None
        elif part in _top_names(here / "__init__.py"):
            return None
        else:
            return f"no module {'.'.join(parts[: i + 1])}"
    return None


def _expand(word: str) -> list[str]:
    """a.{md,json} -> a.md, a.json"""
    match = re.search(r"\{([^{}]*)\}", word)
    if match is None:
        return [word]
    return [
        w for alt in match[1].split(",") for w in _expand(word[: match.start()] + alt + word[match.end() :])
    ]


def _names(doc: Path) -> list[tuple[str, str]]:
    """(how it was written, the name) for every candidate in the doc; how is "link", "ticks",
    "code", or the folder of the table row it is in."""
    text = doc.read_text()
    fenced = " ".join(_FENCE.findall(text))
    prose = _FENCE.sub("", text)
    found = [("link", t) for t in _LINK.findall(prose)]
    for line in prose.splitlines():
        row = _ROW.match(line)
        for span in _TICKS.findall(line)[1 if row else 0 :]:
            found += [(row[1] if row else "ticks", w) for w in _expand(span.strip())]
    found += [("code", w) for word in _WORD.findall(fenced) for w in _expand(word.strip(".,;:"))]
    return found


def _problem(doc: Path, how: str, name: str) -> str | None:
    if how == "link":
        target = name.split("#")[0]
        if not target or re.match(r"^[a-z]+:", target):
            return None
        path = (doc.parent / target).resolve()
        inside = path.is_relative_to(ROOT) and _exists(str(path.relative_to(ROOT)))
        return None if inside else f"link to {target}: nothing there"
    word = name.split("::")[0].split(" ")[0]  # pytest node ids: the file
    if _MODULE.match(word):
        return _module_problem(word)
    if "<" in word or "//" in word:
        return None
    rooted = word.removeprefix("./").split("/")[0] in _top_level()
    if (
        how.endswith("/")
        and not rooted
        and re.match(r"^[\w.-]+(/[\w.-]*)*$", word)
        and _is_file_or_folder(word)
    ):
        folders = (
            [how] if how.split("/")[0] in _top_level() else [p for p in _tracked() if p.endswith("/" + how)]
        )
        return (
            None if any(_exists(f + word) for f in folders) else f"{word} (in the row of {how}): not in {how}"
        )
    if not _PATH.match(word) or _not_in_repo(word):
        return None
    if rooted:
        return None if _exists(word) else f"{word}: not in the repo"
    if how == "code":  # a path in a command that starts elsewhere: an argument, a user's file
        return None
    if _is_file_or_folder(word):
        return None if _ends_a_tracked_path(word) else f"{word}: no tracked path ends with it"
    return None


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: str(d.relative_to(ROOT)))
def test_every_path_and_module_the_doc_names_exists(doc: Path) -> None:
    bad = sorted({p for how, name in _names(doc) if (p := _problem(doc, how, name))})
    assert not bad, f"{doc.relative_to(ROOT)} names what the repo does not hold: {bad}"


def test_every_entry_of_the_list_of_paths_not_in_the_repo_is_still_needed() -> None:
    """The exceptions stay few: an entry no doc needs any more goes."""
    used = {
        _not_in_repo(word)
        for doc in DOCS
        for _, name in _names(doc)
        if _PATH.match(word := name.split(" ")[0])
    }
    assert set(NOT_IN_REPO) <= used, set(NOT_IN_REPO) - used
