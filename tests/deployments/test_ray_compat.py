"""Ray's private API is used in one place, checked against the pinned Ray release: the version
check, the list of private imports, and SpecFlipServer's shortcut past SGLangServer.__init__."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import ray

from deployments import ray_compat

ROOT = Path(__file__).resolve().parents[2]


def test_the_installed_ray_is_the_pinned_release() -> None:
    assert ray.__version__ == ray_compat.RAY_VERSION == ray_compat.check_ray_version()
    pins = (ROOT / "pyproject.toml").read_text()
    assert f'"ray[serve]=={ray_compat.RAY_VERSION}"' in pins


def test_another_ray_release_is_refused_with_the_fix_in_one_line() -> None:
    with pytest.raises(ray_compat.UnsupportedRayVersion) as err:
        ray_compat.check_ray_version("2.61.0")
    message = str(err.value)
    assert "\n" not in message and "found 2.61.0" in message
    assert f"pip install 'ray[serve]=={ray_compat.RAY_VERSION}'" in message


def test_private_ray_names_are_imported_only_by_the_compat_module() -> None:
    users = []
    for path in sorted(
        p
        for pkg in ("deployments", "policy", "patched_worker", "loadtests", "k8s")
        for p in (ROOT / pkg).rglob("*.py")
    ):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names.append(node.module)
            if any(n.startswith("ray.") and ("._" in n or n.split(".")[1].startswith("_")) for n in names):
                users.append(str(path.relative_to(ROOT)))
    assert sorted(set(users)) == ["deployments/ray_compat.py"]


def test_sglang_server_reads_no_state_the_shortcut_leaves_unset() -> None:
    assert ray_compat.sglang_server_state_not_set() == set()


def test_the_state_check_notices_a_missing_attribute(monkeypatch: pytest.MonkeyPatch) -> None:
    """Failure injection: drop one attribute from what the shortcut sets, the check names it."""
    monkeypatch.setattr(ray_compat, "_SGLANG_SERVER_STATE", ("_llm_config", "engine_kwargs", "engine"))
    assert ray_compat.sglang_server_state_not_set() == {"_is_paused", "_sleeping_tags"}


def test_the_replicas_app_has_only_specflips_middleware() -> None:
    """A plain FastAPI app (nothing of Ray's OpenAI ingress app: its any-origin CORS with credentials
    and its exception-to-500 middleware are not there to strip)."""
    from deployments.config import SpecFlipConfig
    from deployments.http.edge import edge_app
    from deployments.http.limits import ModelLimits

    config = SpecFlipConfig.parse({"model": {"path": "/models/target"}})
    app = edge_app(config, ModelLimits())
    names = [m.cls.__name__ for m in app.user_middleware]
    assert names == ["RequestCountMiddleware", "CORSMiddleware", "JsonBodyGuard"]
