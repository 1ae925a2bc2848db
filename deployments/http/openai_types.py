"""The building blocks of specflip's request models (`deployments.http.openai_models`) and the one
place pydantic's errors become the app's 400s.

The models are strict pydantic v2 models (`Strict`): JSON's types as they are (no "1" for 1, no 1
for true), unknown fields refused by name, plus what OpenAI's schema and SDKs send that strict
pydantic alone would refuse (`Int`, `Num`, `Served`, `Tagged`: `Annotated` metadata, so that
`Annotated[int, Int(1, 128)]` is an int to a type checker and a ranged integer to pydantic):

- an integral number is an integer (`Int`: JSON Schema's rule, 4.0 is the integer 4);
- `null` in a field OpenAI makes nullable is the default (`X | None = None`, dropped from the
  normalized dict); a field declared `X = Field(None)` is optional but not nullable;
- `Served`: a value OpenAI's schema allows that this app does not serve is refused with why;
- `Tagged`: a union told apart by the value's JSON kind, then by a tag property (`role`, `type`),
  each branch tagged `~name` in pydantic's error locations (dropped from the path).

`problem_of` turns pydantic's first error into a `Problem`: HTTP status, one line naming the field
the way the client wrote it (`messages[0].content[1].type`), that field as `param`.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Iterator, Mapping
from types import UnionType
from typing import Annotated, Any, ClassVar, Literal, Union, get_args, get_origin

from annotated_types import GroupedMetadata
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    Tag,
    ValidationError,
    WithJsonSchema,
)
from pydantic_core import CoreSchema, PydanticCustomError, core_schema

__all__ = [
    "INT64",
    "Int",
    "Num",
    "Problem",
    "Refused",
    "Served",
    "Strict",
    "Tagged",
    "first_error",
    "kind_of",
    "problem_of",
    "short",
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


@dataclasses.dataclass(frozen=True)
class Num(GroupedMetadata):
    """`Annotated[float, Num(low, high)]`: a number (integers too) within [low, high]
    (`exclusive_low`: (low, high])."""

    low: float | None = None
    high: float | None = None
    exclusive_low: bool = False
    integer: ClassVar[bool] = False

    def __iter__(self) -> Iterator[Any]:
        if self.integer:
            yield BeforeValidator(_integral)
        yield AfterValidator(self._check)
        schema: dict[str, Any] = {"type": "integer" if self.integer else "number"}
        if self.low is not None:
            schema["exclusiveMinimum" if self.exclusive_low else "minimum"] = self.low
        if self.high is not None:
            schema["maximum"] = self.high
        yield WithJsonSchema(schema)

    def _check(self, value: Any) -> Any:
        low, high, exclusive = self.low, self.high, self.exclusive_low
        below = low is not None and (value < low or (exclusive and value == low))
        if below or (high is not None and value > high):
            if low is not None and high is not None:
                raise _refuse(f"must be in {'(' if exclusive else '['}{low}, {high}], got {value}")
            bound = (f"> {low}" if exclusive else f">= {low}") if low is not None else f"<= {high}"
            raise _refuse(f"must be {bound}, got {value}")
        return value


class Int(Num):
    """`Annotated[int, Int(low, high)]`: an integer within [low, high]; an integral number (4.0) is one."""

    integer: ClassVar[bool] = True


# -- served in part -----------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, eq=False)  # hashed by identity: `schema` may be a dict
class Served:
    """`Annotated[T, Served(ok, why, schema)]`: of the values T takes (what OpenAI's schema allows),
    this app serves those `ok` takes (None: none); others are refused with `why`. /openapi.json
    shows the values served (`schema`: a JSON schema, or the names of the union members served:
    models by name, "string"), why, and OpenAI's own schema of the field as `x-openai`."""

    ok: Callable[[Any], bool] | None
    why: str
    schema: dict[str, Any] | tuple[str, ...] | None = None

    @classmethod
    def only(cls, value: Any, why: str) -> Served:
        """Serves `value` alone."""
        return cls(lambda v: bool(v == value), why, {"const": value})

    @classmethod
    def members(cls, kinds: Any, why: str) -> Served:
        """Serves the union's members of `kinds` (a type, or a union of types)."""
        names = tuple("string" if k is str else k.__name__ for k in get_args(kinds) or (kinds,))
        return cls(lambda v: isinstance(v, kinds), why, names)

    def _check(self, value: Any) -> Any:
        if self.ok is None or not self.ok(value):
            raise _refuse(f"{short(value)} is not supported: {self.why}")
        return value

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        return core_schema.no_info_after_validator_function(self._check, handler(source))

    def __get_pydantic_json_schema__(self, core: CoreSchema, handler: GetJsonSchemaHandler) -> dict[str, Any]:
        openai = handler(core)
        if self.ok is None or self.schema is None:
            schema: dict[str, Any] = {"not": {}}
        elif isinstance(self.schema, tuple):
            kept = [b for b in openai.get("oneOf", []) if _member(b) & set(self.schema)]
            schema = kept[0] if len(kept) == 1 else {"anyOf": kept}
        else:
            schema = dict(self.schema)
        return {**schema, "description": self.why, "x-openai": openai}


def _member(branch: dict[str, Any]) -> set[str]:
    """A union branch's names: its JSON type, or the parts of its reference, among them its model's
    name (pydantic's references are not final yet: `#/$defs/<module>__FunctionTool-Input__1`)."""
    if "$ref" in branch:
        return set(re.split(r"__|-|/", str(branch["$ref"])))
    return {str(branch.get("type"))}


# -- unions -------------------------------------------------------------------------------------
_KINDS = {"str": "a string", "list": "a list", "dict": "an object"}


@dataclasses.dataclass(frozen=True)
class Tagged:
    """`Annotated[str | list[TextPart] | TextPart | ImagePart, Tagged("type")]`: a dict goes to the
    model whose Literal field `tag` takes `value[tag]` (the only model when `tag` is None), a string
    to the str (or Literal) member, a list to the list member. Anything else is refused naming the
    field (or its tag), whatever its type: an object or a list where a tag belongs is a 400, not a
    500."""

    tag: str | None = None

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        tag, kinds, objects = self.tag, {}, {}
        for member in get_args(source) if get_origin(source) in (Union, UnionType) else (source,):
            bare = get_args(member)[0] if get_origin(member) is Annotated else member
            if isinstance(bare, type) and issubclass(bare, BaseModel):
                objects[get_args(bare.model_fields[tag].annotation)[0] if tag else bare.__name__] = member
            elif bare is str or get_origin(bare) in (list, Literal):
                kinds["list" if get_origin(bare) is list else "str"] = member
            else:  # a JSON kind the picker cannot tell apart (an object that is not a model, a number)
                raise TypeError(f"Tagged: no branch for member {member!r}: a model, str, a Literal or a list")
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
        by_tag = Discriminator(pick, custom_error_type=error_type, custom_error_message=tags or "none")
        return handler(Annotated[Union[tuple(branches)], by_tag])  # noqa: UP007 - a runtime union


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
