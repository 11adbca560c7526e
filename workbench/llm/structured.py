"""Structured output: how a pydantic model is requested, and how a reply becomes one.

Three request modes (setting ``SVC_KNOWLEDGE_LLM_STRUCTURED_OUTPUT``):

``json_schema`` (default)
    ``response_format={"type": "json_schema", "json_schema": {"name", "schema", "strict"}}``;
    ``strict`` is true when the schema allows it (every property required), the schema is made
    strict-compatible (``additionalProperties: false``, no ``default``).
``json_object``
    ``response_format={"type": "json_object", "schema": <grammar schema>}`` (llama-cpp-python's
    server turns it into a grammar; it answers HTTP 500 to ``json_schema``) and the schema,
    named, in the system prompt. The schema's ``title`` is the structure name.
``tool``
    one function tool named after the structure, forced by ``tool_choice``; its arguments are
    the JSON.

All functions here are pure. :func:`parse_reply` strips ``<think>…</think>`` preambles and code
fences, decodes leniently (raw newlines inside strings are accepted) and validates; it raises
:class:`StructuredOutputError`, or :class:`SchemaEchoError` when the reply is a JSON schema
instead of data.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from workbench.errors import SchemaEchoError, StructuredOutputError

MODES = ("json_schema", "json_object", "tool")

# Keywords grammar engines (llama.cpp's json-schema-to-grammar) ignore or reject.
_UNSUPPORTED = {
    "default",
    "examples",
    "discriminator",
    "readOnly",
    "writeOnly",
    "deprecated",
    "$schema",
    "$id",
    "$comment",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "contentEncoding",
    "contentMediaType",
}
_GRAMMAR_FORMATS = {"date", "time", "date-time", "uuid"}
_MAX_ENUM_RANGE = 100
_SCHEMA_KEYS = {"properties", "$defs", "$schema", "definitions"}

_THINK = re.compile(r"<think(?:ing)?>.*?</think(?:ing)?>", re.DOTALL | re.IGNORECASE)
_FENCE = re.compile(r"^```[a-zA-Z0-9_-]*\s*\n?(.*?)\n?```\s*$", re.DOTALL)

StructureT = TypeVar("StructureT", bound=BaseModel)  # the response model a call asks for


# --- schemas ---------------------------------------------------------------------------------
def model_schema(model: type[BaseModel]) -> dict[str, Any]:
    """Pydantic's JSON schema of ``model`` with every ``$ref`` inlined."""
    return inline_refs(model.model_json_schema())


def inline_refs(schema: dict[str, Any]) -> dict[str, Any]:
    """Replace every local ``#/$defs/X`` reference by its definition; drop ``$defs``."""
    defs = {**schema.get("definitions", {}), **schema.get("$defs", {})}

    def walk(node: Any, seen: tuple[str, ...]) -> Any:
        if isinstance(node, list):
            return [walk(item, seen) for item in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.rsplit("/", 1)[-1] in defs:
            name = ref.rsplit("/", 1)[-1]
            if name in seen:
                raise ValueError(f"recursive schema reference {name!r} cannot be inlined")
            merged = {**defs[name], **{k: v for k, v in node.items() if k != "$ref"}}
            return walk(merged, (*seen, name))
        return {k: walk(v, seen) for k, v in node.items() if k not in ("$defs", "definitions")}

    inlined: dict[str, Any] = walk(copy.deepcopy(schema), ())
    return inlined


def grammar_schema(schema: dict[str, Any], max_items: int | None = 64) -> dict[str, Any]:
    """A schema grammar engines compile and honour: refs inlined, small integer ranges as
    ``enum``, ignored keywords removed, objects closed, arrays bounded.

    String lengths are left unbounded above on purpose: a grammar compiler expands
    ``maxLength`` N into N nested optional rules, and inside a bounded array llama.cpp
    refuses the product ("number of rules that are going to be repeated multiplied by the new
    repetition exceeds sane defaults") and its server dies. A reply that runs on is stopped
    by ``max_tokens`` (``finish_reason`` ``length``: retried once with more room, then a
    truncation error) and a string over the model's limit fails validation."""

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [walk(item) for item in node]
        if not isinstance(node, dict):
            return node
        out = {k: walk(v) for k, v in node.items() if k not in _UNSUPPORTED}
        if out.get("format") not in _GRAMMAR_FORMATS:
            out.pop("format", None)
        kind = out.get("type")
        if kind == "object" and "properties" in out:
            out.setdefault("additionalProperties", False)  # no rambling extra keys
        if kind == "integer":
            _integer_range_to_enum(out)
        elif kind == "number":
            out.pop("minimum", None)
            out.pop("maximum", None)
        elif kind == "string":
            out.pop("maxLength", None)
        elif kind == "array" and max_items is not None and "maxItems" not in out:
            out["maxItems"] = max_items
        return out

    closed: dict[str, Any] = walk(inline_refs(schema))
    return closed


def _integer_range_to_enum(node: dict[str, Any]) -> None:
    low, high = node.pop("minimum", None), node.pop("maximum", None)
    if "enum" in node or low is None or high is None:
        return
    if 0 <= high - low <= _MAX_ENUM_RANGE:
        node["enum"] = list(range(int(low), int(high) + 1))


def strict_schema(schema: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """``(schema for OpenAI strict mode, strict possible)``. Strict needs every property of
    every object required; the returned schema closes objects and drops ``default``."""
    possible = True

    def walk(node: Any) -> Any:
        nonlocal possible
        if isinstance(node, list):
            return [walk(item) for item in node]
        if not isinstance(node, dict):
            return node
        out = {k: walk(v) for k, v in node.items() if k != "default"}
        if out.get("type") == "object" and "properties" in out:
            out.setdefault("additionalProperties", False)
            if set(out.get("required", [])) != set(out["properties"]):
                possible = False
        return out

    result: dict[str, Any] = walk(inline_refs(schema))
    return (result if possible else inline_refs(schema)), possible


# --- requests --------------------------------------------------------------------------------
def schema_instruction(name: str, schema: dict[str, Any]) -> str:
    return (
        f"Respond with one JSON object named {name} that conforms to this JSON schema. "
        "Output the data only, not the schema, with no commentary:\n"
        + json.dumps(schema, separators=(",", ":"))
    )


def with_system_instruction(messages: list[dict[str, Any]], text: str) -> list[dict[str, Any]]:
    """Append ``text`` to the system message (after the stable prompt), or add one."""
    out = [dict(m) for m in messages]
    for msg in out:
        if msg.get("role") == "system":
            content = msg.get("content")
            if isinstance(content, list):
                msg["content"] = [*content, {"type": "text", "text": text}]
            else:
                msg["content"] = f"{content or ''}\n\n{text}".lstrip()
            return out
    return [{"role": "system", "content": text}, *out]


def request_options(
    mode: str, messages: list[dict[str, Any]], response_model: type[BaseModel]
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """``(messages, extra create() kwargs)`` asking for ``response_model`` in ``mode``.

    The schema work is cached per (mode, model): the returned kwargs share it, read-only."""
    instruction, extra = _structured_parts(mode, response_model)
    if instruction is not None:
        messages = with_system_instruction(messages, instruction)
    return messages, dict(extra)


@functools.lru_cache(maxsize=256)
def _structured_parts(
    mode: str, response_model: type[BaseModel]
) -> tuple[str | None, dict[str, Any]]:
    name = response_model.__name__
    if mode == "json_schema":
        schema, strict = strict_schema(model_schema(response_model))
        fmt = {
            "type": "json_schema",
            "json_schema": {"name": name, "schema": schema, "strict": strict},
        }
        return None, {"response_format": fmt}
    if mode not in MODES:
        raise ValueError(f"structured output mode must be one of {', '.join(MODES)}, not {mode!r}")
    schema = grammar_schema(model_schema(response_model))
    schema["title"] = name
    if mode == "json_object":
        return (
            schema_instruction(name, schema),
            {"response_format": {"type": "json_object", "schema": schema}},
        )
    tool = {
        "type": "function",
        "function": {"name": name, "description": f"Record the {name}.", "parameters": schema},
    }
    return None, {"tools": [tool], "tool_choice": {"type": "function", "function": {"name": name}}}


# --- replies ---------------------------------------------------------------------------------
def clean_reply(text: str) -> str:
    """Remove ``<think>…</think>`` reasoning (also an unclosed leading one) and code fences."""
    text = _THINK.sub("", text or "")
    if "</think>" in text.lower():
        text = text[text.lower().rindex("</think>") + len("</think>") :]
    text = text.strip()
    match = _FENCE.match(text)
    if match:
        return match.group(1).strip()
    start = text.find("```")
    if start >= 0:
        inner = _FENCE.match(text[start:].strip())
        if inner:
            return inner.group(1).strip()
    return text


def decode_json(text: str) -> Any:
    """Lenient decoding: raw control characters in strings; leading/trailing prose."""
    decoder = json.JSONDecoder(strict=False)
    try:
        return decoder.decode(text)
    except json.JSONDecodeError as first:
        starts = [i for i in (text.find("{"), text.find("[")) if i >= 0]
        if not starts:
            raise first from None
        try:
            value, _ = decoder.raw_decode(text, min(starts))
        except json.JSONDecodeError:
            raise first from None
        return value


def looks_like_schema(data: Any) -> bool:
    """A JSON schema rather than data: schema keywords at the top level."""
    if not isinstance(data, dict):
        return False
    if _SCHEMA_KEYS & data.keys():
        return True
    return data.get("type") == "object"


def required_fields(model: type[BaseModel]) -> list[str]:
    return [name for name, f in model.model_fields.items() if f.is_required()]


def schema_echo_detail(data: Any, model: type[BaseModel]) -> str | None:
    """Why ``data`` is a schema rather than data of ``model``, or None when it is not.

    A schema-shaped reply is an echo when a required field is missing, or when no field of the
    model is present at all (a model whose fields all have defaults would otherwise accept
    the schema as empty data)."""
    if not looks_like_schema(data):
        return None
    structure = model.__name__
    missing = [f for f in required_fields(model) if f not in data]
    if missing:
        return (
            f"the reply is a JSON schema instead of data: the required field "
            f"`{missing[0]}` of {structure} is missing"
        )
    fields = [_alias(name, info) for name, info in model.model_fields.items()]
    if fields and not any(f in data for f in fields):
        return (
            f"the reply is a JSON schema instead of data: the field `{fields[0]}` of "
            f"{structure} is missing"
        )
    return None


def _without_nul(data: Any) -> Any:
    """``data`` with every NUL character (``\\u0000`` in the JSON) dropped from its strings:
    a database server cannot store one, and no name or fact means one."""
    if isinstance(data, str):
        return data.replace("\x00", "")
    if isinstance(data, list):
        return [_without_nul(item) for item in data]
    if isinstance(data, dict):
        return {_without_nul(k): _without_nul(v) for k, v in data.items()}
    return data


def _alias(name: str, info: FieldInfo) -> str:
    return info.alias or name


def parse_reply(text: str | None, response_model: type[StructureT]) -> StructureT:
    """Validate a reply into ``response_model`` or raise a structured-output error."""
    structure = response_model.__name__
    cleaned = clean_reply(text or "")
    if not cleaned:
        raise StructuredOutputError(structure, "the reply is empty (expected a JSON object)")
    try:
        data = decode_json(cleaned)
    except json.JSONDecodeError as exc:
        raise StructuredOutputError(
            structure,
            f"the reply is not valid JSON ({exc.msg} at char {exc.pos}): {_excerpt(cleaned)}",
        ) from None
    data = _unwrap(_without_nul(data), structure)
    echo = schema_echo_detail(data, response_model)
    if echo:
        raise SchemaEchoError(structure, echo)
    try:
        return response_model.model_validate(data)
    except ValidationError as exc:
        raise StructuredOutputError(structure, _validation_detail(exc)) from None


def _unwrap(data: Any, structure: str) -> Any:
    """``{"NodeResolutions": {...}}`` → ``{...}`` (small models like to name the object)."""
    if isinstance(data, dict) and len(data) == 1:
        ((key, value),) = data.items()
        if key == structure and isinstance(value, dict):
            return value
    return data


def _validation_detail(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:3]:
        loc = ".".join(str(p) for p in err.get("loc", ())) or "(root)"
        parts.append(f"{loc}: {err.get('msg')}")
    more = exc.error_count() - len(parts)
    suffix = f" (+{more} more)" if more > 0 else ""
    return "the reply does not conform: " + "; ".join(parts) + suffix


def _excerpt(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + "…"
