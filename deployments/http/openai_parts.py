"""The parts of OpenAI's chat and completions request bodies, as schemas (`deployments.http.schema`):
messages and their content parts, tools, tool choices, response formats (and SGLang's
`structural_tag`), with the small helpers the request schemas (`deployments.http.openai_request`)
are written in. What the app serves of each is its `Served` node's served part; the reason for the
rest is the node's `why`.
"""

from __future__ import annotations

from typing import Any

from deployments.http.schema import Array, Boolean, Never, Node, Object, OneOf, Prop, Served, Text

__all__ = [
    "ASSISTANT_CONTENT",
    "CACHE_HINT",
    "CUSTOM_TOOL",
    "FUNCTION_DEFINITION",
    "FUNCTION_TOOL",
    "JSON_SCHEMA",
    "MESSAGE",
    "NAME",
    "RESPONSE_FORMAT",
    "STRUCTURAL_TAG",
    "TEXT",
    "TEXT_CONTENT",
    "TEXT_PART",
    "TOOL_CHOICE",
    "USER_CONTENT",
    "kind",
    "obj",
    "opt",
    "req",
]

NAME = Text(pattern=r"[a-zA-Z0-9_-]{1,64}")
TEXT = Text()
JSON_SCHEMA = Object(open=True)


def kind(*names: str) -> Prop:
    return Prop(Text(enum=names), required=True)


def obj(props: dict[str, Prop], **kw: Any) -> Object:
    return Object(props=props, **kw)


def req(node: Node) -> Prop:
    return Prop(node, required=True)


def opt(node: Node, doc: str = "", *, ignored: bool = False, extra: bool = False) -> Prop:
    """An optional field where null means the default."""
    return Prop(node, nullable=True, doc=doc, ignored=ignored, extra=extra)


# -- messages ---------------------------------------------------------------------------------
CACHE_HINT = "A prompt-cache hint: accepted, no effect (the engine caches every prefix itself)."
TEXT_PART = obj(
    {
        "type": kind("text"),
        "text": req(TEXT),
        "prompt_cache_breakpoint": Prop(obj({"mode": kind("explicit")}), ignored=True, doc=CACHE_HINT),
    }
)
REFUSAL_PART = obj({"type": kind("refusal"), "refusal": req(TEXT)})
_IMAGE_PART = obj(
    {
        "type": kind("image_url"),
        "image_url": req(obj({"url": req(TEXT), "detail": Prop(Text(enum=("auto", "low", "high")))})),
    }
)
_AUDIO_PART = obj(
    {
        "type": kind("input_audio"),
        "input_audio": req(obj({"data": req(TEXT), "format": req(Text(enum=("wav", "mp3")))})),
    }
)
_FILE_PART = obj(
    {
        "type": kind("file"),
        "file": req(obj({"file_data": Prop(TEXT), "file_id": Prop(TEXT), "filename": Prop(TEXT)})),
    }
)
_TEXT_ONLY = "this model takes text only"
TEXT_CONTENT = OneOf((TEXT, Array(OneOf((TEXT_PART,), tag="type"), min_items=1)))
USER_CONTENT = OneOf(
    (
        TEXT,
        Array(
            Served(
                OneOf((TEXT_PART, _IMAGE_PART, _AUDIO_PART, _FILE_PART), tag="type"), TEXT_PART, _TEXT_ONLY
            ),
            min_items=1,
        ),
    )
)
ASSISTANT_CONTENT = OneOf((TEXT, Array(OneOf((TEXT_PART, REFUSAL_PART), tag="type"), min_items=1)))

_CALL_FUNCTION = obj({"name": req(TEXT), "arguments": req(TEXT)})
FUNCTION_TOOL_CALL = obj({"id": req(TEXT), "type": kind("function"), "function": req(_CALL_FUNCTION)})
_CUSTOM_TOOL_CALL = obj(
    {
        "id": req(TEXT),
        "type": kind("custom"),
        "custom": req(obj({"name": req(TEXT), "input": req(TEXT)})),
    }
)
_NAMED = {"name": Prop(TEXT)}

MESSAGE = OneOf(
    (
        obj({"role": kind("system"), "content": req(TEXT_CONTENT), **_NAMED}),
        obj({"role": kind("developer"), "content": req(TEXT_CONTENT), **_NAMED}),
        obj({"role": kind("user"), "content": req(USER_CONTENT), **_NAMED}),
        obj(
            {
                "role": kind("assistant"),
                "content": opt(ASSISTANT_CONTENT),
                "refusal": opt(TEXT),
                **_NAMED,
                "audio": opt(Served(obj({"id": req(TEXT)}), Never(), "this app keeps no audio answers")),
                "tool_calls": Prop(
                    Array(
                        Served(
                            OneOf((FUNCTION_TOOL_CALL, _CUSTOM_TOOL_CALL), tag="type"),
                            FUNCTION_TOOL_CALL,
                            "custom tool calls are not supported: this app calls function tools",
                        )
                    )
                ),
                "function_call": opt(_CALL_FUNCTION, "Deprecated; taken as a tool call."),
                "reasoning_content": opt(TEXT, extra=True),
            }
        ),
        obj({"role": kind("tool"), "content": req(TEXT_CONTENT), "tool_call_id": req(TEXT)}),
        obj(
            {
                "role": kind("function"),
                "content": Prop(TEXT, required=True, nullable=True, null_means=""),
                "name": req(TEXT),
            }
        ),
    ),
    tag="role",
)

# -- tools ------------------------------------------------------------------------------------
FUNCTION_DEFINITION = obj(
    {
        "name": req(NAME),
        "description": Prop(TEXT),
        "parameters": Prop(JSON_SCHEMA),
        "strict": opt(Boolean()),
    }
)
FUNCTION_TOOL = obj({"type": kind("function"), "function": req(FUNCTION_DEFINITION)})
CUSTOM_TOOL = obj(
    {
        "type": kind("custom"),
        "custom": req(obj({"name": req(TEXT), "description": Prop(TEXT), "format": Prop(Object(open=True))})),
    }
)
NAMED_TOOL_CHOICE = obj({"type": kind("function"), "function": req(obj({"name": req(TEXT)}))})
_TOOL_MODES = Text(enum=("none", "auto", "required"))
TOOL_CHOICE = Served(
    OneOf(
        (
            _TOOL_MODES,
            NAMED_TOOL_CHOICE,
            obj(
                {
                    "type": kind("allowed_tools"),
                    "allowed_tools": req(
                        obj(
                            {
                                "mode": req(Text(enum=("auto", "required"))),
                                "tools": req(Array(Object(open=True))),
                            }
                        )
                    ),
                }
            ),
            obj({"type": kind("custom"), "custom": req(obj({"name": req(TEXT)}))}),
        ),
        tag="type",
    ),
    OneOf((_TOOL_MODES, NAMED_TOOL_CHOICE), tag="type"),
    "allowed_tools and custom tool choices are not supported: send 'none', 'required' or a named function",
)

# -- response formats (and SGLang's structural_tag) ------------------------------------------------
STRUCTURAL_TAG = Object(props={"type": kind("structural_tag")}, open=True)  # SGLang's; not OpenAI's
RESPONSE_FORMAT = OneOf(
    (
        obj({"type": kind("text")}),
        obj({"type": kind("json_object")}),
        obj(
            {
                "type": kind("json_schema"),
                "json_schema": req(
                    obj(
                        {
                            "name": req(NAME),
                            "description": Prop(TEXT),
                            "schema": Prop(JSON_SCHEMA, doc="None: any JSON."),
                            "strict": opt(Boolean()),
                        }
                    )
                ),
            }
        ),
        STRUCTURAL_TAG,
    ),
    tag="type",
)
