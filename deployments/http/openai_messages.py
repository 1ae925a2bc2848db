"""The parts of OpenAI's chat request bodies as strict pydantic models (`deployments.http.openai_types`):
messages (a union on `role`) and their content parts (a union on `type`), tools, tool choices,
response formats (and SGLang's `structural_tag`). Written from OpenAI's API reference and its
Python SDK's request types (tests/deployments/test_openai_request.py checks the field lists).

Each message comes out normalized for the chat template: its content one string (text and
refusal parts joined with a space, as SGLang does for string templates; none or null as ""), an
assistant's `refusal` as its content when it has none, a deprecated `function_call` as a tool call.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, model_validator

from deployments.http.openai_types import Served, Strict, Tagged, unset

__all__ = [
    "CACHE_HINT",
    "ChatMessage",
    "FunctionDefinition",
    "FunctionTool",
    "JsonSchemaSpec",
    "NamedToolChoice",
    "ResponseFormat",
    "StructuralTag",
    "TextContent",
    "Tool",
    "ToolChoice",
]

NAME = Annotated[str, Field(pattern=r"^[a-zA-Z0-9_-]{1,64}$")]
CACHE_HINT = "A prompt-cache hint: accepted, no effect (the engine caches every prefix itself)."
_TEXT_ONLY = "this model takes text only"


class _Breakpoint(Strict):
    mode: Literal["explicit"]


# -- content parts ------------------------------------------------------------------------------
class TextPart(Strict):
    type: Literal["text"]
    text: str
    prompt_cache_breakpoint: _Breakpoint = unset(exclude=True, description=CACHE_HINT)


class RefusalPart(Strict):
    type: Literal["refusal"]
    refusal: str


class _ImageUrl(Strict):
    url: str
    detail: Literal["auto", "low", "high"] = unset()


class ImagePart(Strict):
    type: Literal["image_url"]
    image_url: _ImageUrl


class _InputAudio(Strict):
    data: str
    format: Literal["wav", "mp3"]


class AudioPart(Strict):
    type: Literal["input_audio"]
    input_audio: _InputAudio


class _File(Strict):
    file_data: str = unset()
    file_id: str = unset()
    filename: str = unset()


class FilePart(Strict):
    type: Literal["file"]
    file: _File


_TEXT_PARTS = Annotated[list[Annotated[TextPart, Tagged("type")]], Field(min_length=1)]
TextContent = Annotated[str | _TEXT_PARTS, Tagged()]
_USER_PART = Annotated[TextPart | ImagePart | AudioPart | FilePart, Tagged("type")]
_USER_PARTS = list[Annotated[_USER_PART, Served.members(TextPart, _TEXT_ONLY)]]
UserContent = Annotated[str | Annotated[_USER_PARTS, Field(min_length=1)], Tagged()]
_ASSISTANT_PARTS = list[Annotated[TextPart | RefusalPart, Tagged("type")]]
AssistantContent = Annotated[str | Annotated[_ASSISTANT_PARTS, Field(min_length=1)], Tagged()]


def _text_of(content: Any) -> str:
    """A message's content as one string: text and refusal parts joined (SGLang's join)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return " ".join(p.text if isinstance(p, TextPart) else p.refusal for p in content)


# -- messages -----------------------------------------------------------------------------------
class _Message(Strict):
    @model_validator(mode="after")
    def _content_as_text(self) -> Any:
        self.__dict__["content"] = _text_of(self.__dict__.get("content"))  # each role has a content
        return self


class SystemMessage(_Message):
    role: Literal["system"]
    content: TextContent
    name: str = unset()


class DeveloperMessage(_Message):
    role: Literal["developer"]
    content: TextContent
    name: str = unset()


class UserMessage(_Message):
    role: Literal["user"]
    content: UserContent
    name: str = unset()


class _CallFunction(Strict):
    name: str
    arguments: str


class FunctionToolCall(Strict):
    id: str
    type: Literal["function"]
    function: _CallFunction


class _CustomCall(Strict):
    name: str
    input: str


class CustomToolCall(Strict):
    id: str
    type: Literal["custom"]
    custom: _CustomCall


class _AudioRef(Strict):
    id: str


_TOOL_CALL = Annotated[
    FunctionToolCall | CustomToolCall,
    Tagged("type"),
    Served.members(FunctionToolCall, "custom tool calls are not supported: this app calls function tools"),
]


class AssistantMessage(_Message):
    role: Literal["assistant"]
    content: AssistantContent | None = None
    refusal: str | None = None
    name: str = unset()
    audio: Annotated[_AudioRef, Served(None, "this app keeps no audio answers")] | None = None
    tool_calls: list[_TOOL_CALL] = unset()
    function_call: _CallFunction | None = Field(None, description="Deprecated; taken as a tool call.")
    reasoning_content: str | None = Field(None, json_schema_extra={"x-sglang": True})

    @model_validator(mode="after")
    def _as_said(self) -> AssistantMessage:
        self.__dict__["content"] = _text_of(self.content) or self.refusal or ""
        self.refusal = None
        call, self.function_call = self.function_call, None
        if call is not None and not self.tool_calls:
            self.tool_calls = [FunctionToolCall(id=f"call_{call.name}", type="function", function=call)]
        return self


class ToolMessage(_Message):
    role: Literal["tool"]
    content: TextContent
    tool_call_id: str


class FunctionMessage(_Message):
    role: Literal["function"]
    content: str | None
    name: str


ChatMessage = Annotated[
    SystemMessage | DeveloperMessage | UserMessage | AssistantMessage | ToolMessage | FunctionMessage,
    Tagged("role"),
]


# -- tools --------------------------------------------------------------------------------------
class FunctionDefinition(Strict):
    name: NAME
    description: str = unset()
    parameters: dict[str, Any] = unset(description="A JSON schema.")
    strict: bool | None = None


class FunctionTool(Strict):
    type: Literal["function"]
    function: FunctionDefinition


class _CustomDefinition(Strict):
    name: str
    description: str = unset()
    format: dict[str, Any] = unset()


class CustomTool(Strict):
    type: Literal["custom"]
    custom: _CustomDefinition


Tool = Annotated[
    FunctionTool | CustomTool,
    Tagged("type"),
    Served.members(FunctionTool, "custom tools are not supported: send function tools"),
]


class _FunctionName(Strict):
    name: str


class NamedToolChoice(Strict):
    type: Literal["function"]
    function: _FunctionName


class _AllowedTools(Strict):
    mode: Literal["auto", "required"]
    tools: list[dict[str, Any]]


class AllowedToolsChoice(Strict):
    type: Literal["allowed_tools"]
    allowed_tools: _AllowedTools


class CustomToolChoice(Strict):
    type: Literal["custom"]
    custom: _FunctionName


_TOOL_MODES = Literal["none", "auto", "required"]
ToolChoice = Annotated[
    _TOOL_MODES | NamedToolChoice | AllowedToolsChoice | CustomToolChoice,
    Tagged("type"),
    Served.members(
        str | NamedToolChoice,
        "allowed_tools and custom tool choices are not supported: send 'none', 'required' or a named function",
    ),
]


# -- response formats (and SGLang's structural_tag) ----------------------------------------------
class TextFormat(Strict):
    type: Literal["text"]


class JsonObjectFormat(Strict):
    type: Literal["json_object"]


class JsonSchemaSpec(Strict):
    name: NAME
    description: str = unset()
    schema_: dict[str, Any] = unset(alias="schema", description="None: any JSON.")
    strict: bool | None = None

    @model_validator(mode="after")
    def _any_json(self) -> JsonSchemaSpec:
        if self.schema_ is None:
            self.schema_ = {}  # no schema: any JSON
        return self


class JsonSchemaFormat(Strict):
    type: Literal["json_schema"]
    json_schema: JsonSchemaSpec


class StructuralTag(Strict):
    """SGLang's, not OpenAI's: passed to SGLang as it is."""

    model_config = ConfigDict(extra="allow", json_schema_extra={"x-sglang": True})
    type: Literal["structural_tag"]


ResponseFormat = Annotated[TextFormat | JsonObjectFormat | JsonSchemaFormat | StructuralTag, Tagged("type")]
