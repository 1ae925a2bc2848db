"""Pydantic fields from the settings a policy dataclass declares (`policy.types.setting`): the
app config's `policy` and `routing` sections take each such field's type, default and description
from the dataclass, so every setting is declared once."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

from pydantic import Field

from policy.types import SETTING

__all__ = ["setting_fields", "setting_names"]


def setting_names(config_cls: type) -> tuple[str, ...]:
    """Names of the fields of dataclass `config_cls` declared as settings."""
    return tuple(f.name for f in dataclasses.fields(config_cls) if SETTING in f.metadata)


def setting_fields(config_cls: type) -> dict[str, Any]:
    """`create_model` field definitions (type, default, description) of those fields."""
    hints = typing.get_type_hints(config_cls)
    return {
        f.name: (hints[f.name], Field(default=f.default, description=f.metadata[SETTING]))
        for f in dataclasses.fields(config_cls)
        if SETTING in f.metadata
    }
