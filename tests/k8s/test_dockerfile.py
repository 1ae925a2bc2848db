"""k8s/Dockerfile is consistent with the project and the manifests (no Docker daemon here to build it).

What a build would catch late, checked from the files: the base is a pinned CUDA devel image
with Python 3.12, every COPY source exists and survives k8s/Dockerfile.dockerignore, the copied
tree is what `pip install .` needs (pyproject's packages, readme, force-included files), the
project is installed with its pins, the probe lands where the RayService runs it, and the image
does not run as root.
"""

from __future__ import annotations

import fnmatch
import re
import tomllib
from typing import Any

import pytest
from packaging.specifiers import SpecifierSet

from tests.k8s.manifests import K8S, REPO, gpu_group, rayservice


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in (K8S / "Dockerfile").read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = pending + line
        pending = ""
        op, _, args = full.partition(" ")
        out.append((op.upper(), args.strip()))
    assert not pending, "Dockerfile ends inside a continued line"
    return out


def _pyproject() -> dict[str, Any]:
    with open(REPO / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


def _args_default(name: str) -> str:
    for op, args in instructions():
        if op == "ARG" and args.startswith(f"{name}="):
            return args.split("=", 1)[1]
    raise AssertionError(f"no ARG {name}")


def _copies() -> list[tuple[str, str]]:
    copies = []
    for op, args in instructions():
        if op == "COPY":
            *sources, dest = [a for a in args.split() if not a.startswith("--")]
            copies += [(s, dest) for s in sources]
    return copies


def _included(path: str) -> bool:
    """Whether k8s/Dockerfile.dockerignore lets `path` into the build context (last match wins)."""
    included = True
    for line in (K8S / "Dockerfile.dockerignore").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = line.lstrip("!").rstrip("/")
        if pattern == "**" or fnmatch.fnmatch(path, pattern) or path.startswith(pattern + "/"):
            included = negate
    return included


def test_base_is_a_pinned_cuda_devel_image_with_python_312() -> None:
    base = _args_default("BASE_IMAGE")
    assert re.fullmatch(r"nvidia/cuda:13\.\d+\.\d+-devel-ubuntu24\.04", base), base
    runs = " ".join(a for op, a in instructions() if op == "RUN")
    assert "python3.12-venv" in runs and "python3.12-dev" in runs and "python3.12 -m venv /opt/venv" in runs
    requires = SpecifierSet(_pyproject()["project"]["requires-python"])
    assert requires.contains("3.12"), f"the image runs Python 3.12; pyproject requires {requires}"


def test_every_copy_source_exists_and_is_in_the_build_context() -> None:
    for src, _ in _copies():
        assert (REPO / src).exists(), f"COPY {src}: not in the repository"
        assert _included(src), f"COPY {src}: excluded by k8s/Dockerfile.dockerignore"


@pytest.mark.parametrize(
    "path",
    [
        ".venv/bin/python",
        "models/target/config.json",
        "out/results.csv",
        ".gpu-bundle/part1/x.whl",
        ".git/HEAD",
    ],
)
def test_dockerignore_keeps_large_local_trees_out_of_the_context(path: str) -> None:
    assert not _included(path)


def test_copied_tree_is_what_pip_install_needs() -> None:
    pyproject = _pyproject()
    copied = {src.rstrip("/") for src, _ in _copies()}
    wheel = pyproject["tool"]["hatch"]["build"]["targets"]["wheel"]
    needed = {"pyproject.toml", pyproject["project"]["readme"], *wheel["packages"]}
    needed |= {p.split("/")[0] for p in wheel.get("force-include", {})}
    assert needed <= copied, f"not copied: {sorted(needed - copied)}"


def test_project_is_installed_with_its_pins() -> None:
    runs = [a for op, a in instructions() if op == "RUN"]
    assert any(
        "pip install -r /tmp/requirements.txt" in r and "['project']['dependencies']" in r for r in runs
    )
    assert any(re.search(r"pip install \.(\s|$)", r) for r in runs), "the project itself: pip install ."
    deps = " ".join(_pyproject()["project"]["dependencies"])
    for pin in ("sglang==0.5.17", "torch==2.11.0", "ray[serve]==2.60.0", "fastapi>=0.133,<0.137"):
        assert pin in deps, f"pyproject lost the pin {pin}; the image follows pyproject"


def test_probe_is_where_the_rayservice_runs_it() -> None:
    (c,) = gpu_group(rayservice())["template"]["spec"]["containers"]
    command = c["livenessProbe"]["exec"]["command"]
    python, script = command[0], command[-2]
    assert ("k8s/probe.py", script) in _copies()
    assert python == "/opt/venv/bin/python"
    env = dict(
        a.split("=", 1) for op, args in instructions() if op == "ENV" for a in args.split() if "=" in a
    )
    assert env["PATH"].startswith("/opt/venv/bin:"), "ray, serve and python come from the venv"


def test_image_runs_as_a_non_root_user() -> None:
    users = [a for op, a in instructions() if op == "USER"]
    assert users and users[-1] not in ("root", "0")
