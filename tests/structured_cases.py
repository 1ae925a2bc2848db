"""Constraints the structured-output tests use on the engine and over HTTP: a JSON schema, a regex
and an EBNF grammar the tiny pair can satisfy (and the EBNF as a regex, to check outputs)."""

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 8},
        "size": {"type": "integer", "minimum": 0, "maximum": 999},
        "kind": {"enum": ["list", "dict", "set"]},
    },
    "required": ["name", "size", "kind"],
    "additionalProperties": False,
}
REGEX = r"(def|class) [a-z_]{2,12}\((self)?\):"
EBNF = """root ::= ("def " | "class ") name "(" args "):"
name ::= [a-z_]{2,12}
args ::= "" | "self" | "self, " [a-z]{1,6}"""
EBNF_AS_REGEX = r"(def|class) [a-z_]{2,12}\((|self|self, [a-z]{1,6})\):"
