"""The building blocks of specflip's request models (`deployments.http.openai_models`) and the one
place pydantic's errors become the app's 400s.

The models are strict pydantic v2 models (`Strict`): JSON's types as they are (no "1" for 1, no 1
for true), unknown fields refused by name, plus what OpenAI's schema and SDKs send that strict
pydantic alone would refuse:

- an integral number is an integer (`integer()`: JSON Schema's rule, 4.0 is the integer 4);
- `null` in a field OpenAI makes nullable is the default (`X | None = None`, dropped from the
  normalized dict); a field declared `X = Field(None)` is optional but not nullable;
- `served(...)`: a value OpenAI's schema allows that this app does not serve is refused with why;
- `tagged(...)`: a union told apart by the value's JSON kind, then by a tag property (`role`,
  `type`), each branch tagged `~name` in pydantic's error locations (dropped from the path).

`problem_of` turns pydantic's first error into a `Problem`: HTTP status, one line naming the field
the way the client wrote it (`messages[0].content[1].type`), that field as `param`.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Union

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    GetJsonSchemaHandler,
    Tag,
    ValidationError,
    WithJsonSchema,
)
from pydantic_core import PydanticCustomError

__all__ = [
    "INT64",
    "Problem",
    "Refused",
    "Strict",
    "first_error",
    "integer",
    "kind_of",
    "number",
    "problem_of",
    "served",
    "short",
    "tagged",
    "unset",
]

INT64 = (-(2**63), 2**63 - 1)
_REASON = "specflip"  # the error type of every refusal raised here: its message is the reason
_TAGGED = "tagged"  # error type prefix of a tagged union's refusal: tagged|<tag>|<kinds>


@dataclasses.dataclass(frozen=True)
class Problem:
    status: int
    message: str
    param: str | None = None


class Refused(Exception):
    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.message)
        self.problem = problem


class Strict(BaseModel):
    """JSON types strictly, unknown fields refused; `schema_`-style names by their alias."""

    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)


def unset(**field: Any) -> Any:
    """An optional field that is not nullable: absent is None, an explicit null is refused (the
    default is not validated). Typed Any so that `name: str = unset()` reads as what it takes."""
    return Field(None, **field)


def kind_of(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    names: dict[type, str] = {str: "a string", list: "a list", dict: "an object"}
    return names.get(type(value), type(value).__name__)


def short(value: Any) -> str:
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json", by_alias=True, exclude_none=True)
    return json.dumps(value, ensure_ascii=False, default=str)[:40]


def _refuse(reason: str) -> PydanticCustomError:
    return PydanticCustomError(_REASON, "{reason}", {"reason": reason})


# -- numbers ------------------------------------------------------------------------------------
def _integral(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _bounds(low: float | None, high: float | None, exclusive_low: bool) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        below = low is not None and (value < low or (exclusive_low and value == low))
        if below or (high is not None and value > high):
            if low is not None and high is not None:
                raise _refuse(f"must be in {'(' if exclusive_low else '['}{low}, {high}], got {value}")
            bound = (f"> {low}" if exclusive_low else f">= {low}") if low is not None else f"<= {high}"
            raise _refuse(f"must be {bound}, got {value}")
        return value

    return check


def _range_schema(kind: str, low: float | None, high: float | None, exclusive_low: bool) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": kind}
    if low is not None:
        schema["exclusiveMinimum" if exclusive_low else "minimum"] = low
    if high is not None:
        schema["maximum"] = high
    return schema


def integer(low: int | None = None, high: int | None = None) -> Any:
    """An integer within [low, high]; an integral number (4.0) is one."""
    return Annotated[
        int,
        BeforeValidator(_integral),
        AfterValidator(_bounds(low, high, False)),
        WithJsonSchema(_range_schema("integer", low, high, False)),
    ]


def number(low: float | None = None, high: float | None = None, *, exclusive_low: bool = False) -> Any:
    """A number (integers too) within [low, high] (`exclusive_low`: (low, high])."""
    return Annotated[
        float,
        AfterValidator(_bounds(low, high, exclusive_low)),
        WithJsonSchema(_range_schema("number", low, high, exclusive_low)),
    ]


# -- served in part -----------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, eq=False)  # hashed by identity: `served` may be a dict
class _ServedSchema:
    """A served field's JSON schema: the values served (`served`: a schema; the names of the union
    members served; None: no value), why, and OpenAI's own schema of the field as `x-openai`."""

    served: dict[str, Any] | tuple[str, ...] | None
    why: str

    def __get_pydantic_json_schema__(self, core_schema: Any, handler: GetJsonSchemaHandler) -> dict[str, Any]:
        openai = handler(core_schema)
        if self.served is None:
            schema: dict[str, Any] = {"not": {}}
        elif isinstance(self.served, tuple):
            kept = [b for b in openai.get("oneOf", []) if _member(b) & set(self.served)]
            schema = kept[0] if len(kept) == 1 else {"anyOf": kept}
        else:
            schema = dict(self.served)
        return {**schema, "description": self.why, "x-openai": openai}


def _member(branch: dict[str, Any]) -> set[str]:
    """A union branch's names: its JSON type, or the parts of its reference, among them its model's
    name (pydantic's references are not final yet: `#/$defs/<module>__FunctionTool-Input__1`)."""
    if "$ref" in branch:
        return set(re.split(r"__|-|/", str(branch["$ref"])))
    return {str(branch.get("type"))}


def served(
    annotation: Any,
    ok: Callable[[Any], bool] | None,
    why: str,
    schema: dict[str, Any] | tuple[str, ...] | None = None,
) -> Any:
    """`annotation` (what OpenAI's schema allows) of which this app serves the values `ok` takes
    (None: none); others are refused with `why`. `schema`: the served values for /openapi.json (a
    JSON schema, or the names of the union members served: models by name, "string")."""

    def check(value: Any) -> Any:
        if ok is None or not ok(value):
            raise _refuse(f"{short(value)} is not supported: {why}")
        return value

    return Annotated[annotation, AfterValidator(check), _ServedSchema(None if ok is None else schema, why)]


# -- unions -------------------------------------------------------------------------------------
_KINDS = {"str": "a string", "list": "a list", "dict": "an object"}


def tagged(tag: str | None = None, objects: Mapping[str, Any] | None = None, **kinds: Any) -> Any:
    """A union: a dict goes to `objects[value[tag]]` (the only one when `tag` is None), a string to
    `kinds["str"]`, a list to `kinds["list"]`. Anything else is refused naming the field (or its
    tag), whatever its type: an object or a list where a tag belongs is a 400, not a 500."""
    objects = dict(objects or {})
    branches = [Annotated[member, Tag(f"~{name}")] for name, member in {**kinds, **objects}.items()]
    what = [_KINDS[k] for k in kinds] + (["an object"] if objects else [])

    def pick(value: Any) -> str | None:
        if isinstance(value, dict | BaseModel) and objects:
            if tag is None:
                return f"~{next(iter(objects))}"
            found = value.get(tag) if isinstance(value, dict) else getattr(value, tag, None)
            return f"~{found}" if isinstance(found, str) and found in objects else None
        kind = "str" if isinstance(value, str) else "list" if isinstance(value, list) else None
        return f"~{kind}" if kind in kinds else None

    error_type = f"{_TAGGED}|{tag or ''}|{' or '.join(what)}"
    tags = ", ".join(repr(name) for name in objects)
    return Annotated[
        Union[tuple(branches)],  # noqa: UP007 - a runtime union of the branches
        Discriminator(pick, custom_error_type=error_type, custom_error_message=tags or "none"),
    ]


# -- pydantic's errors as the app's 400s --------------------------------------------------------
def _path(loc: tuple[Any, ...], key_last: bool = False) -> str:
    """`('messages', 0, '~user', 'content')` -> `messages[0].content` (union tags dropped;
    `key_last`: the last part is a key of the body, whatever it looks like)."""
    out = ""
    for i, part in enumerate(loc):
        if isinstance(part, int):
            out += f"[{part}]"
        elif part == "[key]" or (str(part).startswith("~") and not (key_last and i == len(loc) - 1)):
            continue
        else:
            out += f".{part}" if out else str(part)
    return out


def _too_short(ctx: Mapping[str, Any]) -> str:
    n = ctx.get("min_length", 1)
    return "must not be empty" if n == 1 else f"needs at least {n} items"


def _reason(error: Mapping[str, Any], hints: Mapping[str, str]) -> str:
    kind, value, ctx = error["type"], error.get("input"), error.get("ctx") or {}
    if kind == _REASON:
        return str(ctx.get("reason", error["msg"]))
    if kind == "extra_forbidden":
        hint = hints.get(_path(error["loc"]), "see /openapi.json for the fields this app accepts")
        return f"is not a field of this request: {hint}"
    if kind in ("int_type", "int_from_float", "int_parsing"):
        number = isinstance(value, int | float) and not isinstance(value, bool)
        return f"must be an integer, got {short(value) if number else kind_of(value)}"
    by_kind: dict[str, Callable[[], str]] = {
        "missing": lambda: "is required",
        "string_type": lambda: f"must be a string, got {kind_of(value)}",
        "float_type": lambda: f"must be a number, got {kind_of(value)}",
        "bool_type": lambda: f"must be true or false, got {short(value)}",
        "list_type": lambda: f"must be a list, got {kind_of(value)}",
        "dict_type": lambda: f"must be an object, got {kind_of(value)}",
        "model_type": lambda: f"must be an object, got {kind_of(value)}",
        "model_attributes_type": lambda: f"must be an object, got {kind_of(value)}",
        "literal_error": lambda: f"must be one of {ctx.get('expected')}; got {short(value)}",
        "too_short": lambda: _too_short(ctx),
        "too_long": lambda: f"has {ctx.get('actual_length')} items: at most {ctx.get('max_length')}",
        "string_too_long": lambda: f"must be at most {ctx.get('max_length')} characters",
        "string_pattern_mismatch": lambda: f"{short(value)} must match {ctx.get('pattern')}",
        "greater_than_equal": lambda: f"must be >= {ctx.get('ge')}, got {value}",
    }
    made = by_kind.get(kind)
    return made() if made is not None else str(error.get("msg", "is not valid"))


def first_error(err: ValidationError) -> Any:
    """The error to answer with: a wrong value before a missing field (a body is read in order)."""
    errors = err.errors(include_url=False)
    return next((e for e in errors if e["type"] != "missing"), errors[0])


def problem_of(error: Mapping[str, Any], hints: Mapping[str, str] | None = None) -> Problem:
    """One of pydantic's errors as a 400 naming the field (`hints`: unknown top-level field ->
    what to send instead)."""
    kind = str(error["type"])
    path = _path(tuple(error["loc"]), key_last=kind == "extra_forbidden")
    if kind.startswith(_TAGGED + "|"):
        _, tag, what = kind.split("|", 2)
        value = error.get("input")
        if tag and isinstance(value, dict) and "an object" in what:
            where = f"{path}.{tag}" if path else tag
            found = value.get(tag)
            tags = error["msg"]
            if found is None:
                return Problem(400, f"{where} is required: one of {tags}"[:500], where)
            return Problem(400, f"{where} must be one of {tags}; got {short(found)}"[:500], where)
        return Problem(400, f"{path or 'body'} must be {what}, got {kind_of(value)}"[:500], path or None)
    return Problem(400, f"{path or 'body'} {_reason(error, hints or {})}"[:500], path or None)
