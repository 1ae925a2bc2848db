"""The serving install (`pip install .`, no extras) has no Locust, gevent or matplotlib, and what it
runs works without them: the app (`serve run deployments.app:...`), `specflip serve` and
`specflip demo`. The `bench` extra brings them; the `test` extra includes `bench` (CI installs `.[test]`)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH_ONLY = ("locust", "gevent", "geventhttpclient", "matplotlib")

# A fresh interpreter in which the bench-only packages cannot be imported (as after `pip install .`).
_BLOCKED = f"""
import importlib.abc, json, sys
BLOCKED = {BENCH_ONLY!r}

class NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{{name}} is not installed (serving install)")
        return None

sys.meta_path.insert(0, NotInstalled())
"""


def _requirement_names(requirements: list[str]) -> set[str]:
    return {re.split(r"[\[<>=!~; ]", r, maxsplit=1)[0].lower() for r in requirements}


def test_serving_dependencies_leave_the_load_harness_to_the_bench_extra() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    serving = _requirement_names(project["dependencies"])
    extras = project["optional-dependencies"]
    assert not serving & set(BENCH_ONLY), serving & set(BENCH_ONLY)
    assert {"locust", "matplotlib"} <= _requirement_names(extras["bench"])
    assert "specflip[bench]" in extras["test"]


def _run_blocked(code: str) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-c", _BLOCKED + code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize(
    ("what", "code"),
    [
        ("the Serve app", "import deployments.app"),
        (
            "the CLI and `specflip demo`'s modules",
            "import deployments.cli, deployments.local, loadtests.demo",
        ),
        (
            "`specflip demo --help`",
            "from deployments.cli import main\ntry:\n    main(['demo', '--help'])\nexcept SystemExit as e:\n"
            "    assert e.code == 0, e.code",
        ),
    ],
)
def test_runs_without_the_bench_packages(what: str, code: str) -> None:
    loaded = "sorted(m for m in sys.modules if m.split('.')[0] in BLOCKED)"
    result = _run_blocked(f"{code}\nimport json, sys\nprint(json.dumps({{'loaded': {loaded}}}))")
    assert result == {"loaded": []}, what


def test_the_blocker_does_block() -> None:
    """Failure injection: the same interpreter set-up refuses a bench-only package."""
    result = _run_blocked(
        "try:\n    import matplotlib\n    ok = True\nexcept ImportError:\n    ok = False\n"
        "import json\nprint(json.dumps({'imported': ok}))"
    )
    assert result == {"imported": False}


def test_bench_without_the_extra_says_how_to_get_it() -> None:
    result = _run_blocked(
        "import contextlib, io, json\n"
        "from deployments.cli import main\n"
        "err = io.StringIO()\n"
        "with contextlib.redirect_stderr(err):\n"
        "    code = main(['bench', '--', '--help'])\n"
        "print(json.dumps({'code': code, 'err': err.getvalue()}))"
    )
    assert result["code"] == 1
    assert "pip install 'specflip[bench]'" in str(result["err"]) and str(result["err"]).count("\n") == 1
