"""The one SGLang release this package patches; every patch checks it before touching SGLang."""

from __future__ import annotations

from importlib import metadata

__all__ = ["SGLANG_VERSION", "UnsupportedSGLangVersion", "installed_sglang_version", "check_sglang_version"]

SGLANG_VERSION = "0.5.17"


class UnsupportedSGLangVersion(RuntimeError):
    """The installed SGLang is not the release the patch was written against."""


def installed_sglang_version() -> str | None:
    try:
        return metadata.version("sglang")
    except metadata.PackageNotFoundError:
        return None


def check_sglang_version() -> str:
    found = installed_sglang_version()
    if found != SGLANG_VERSION:
        raise UnsupportedSGLangVersion(
            f"specflip patches SGLang {SGLANG_VERSION} exactly, found {found or 'no sglang'}: "
            f"run `pip install sglang=={SGLANG_VERSION}` (or a specflip release that supports {found})"
        )
    return found
