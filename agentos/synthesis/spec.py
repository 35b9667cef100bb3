"""A tool's spec (``spec.json``): the function it defines, its typed parameters, what it
returns and what it does; checked strictly, and used to check a call's arguments.

```json
{"function_name": "reverse_string",
 "parameters": [{"name": "s", "type": "str", "description": "the text"}],
 "return_type": "str",
 "docstring": "Return s with its characters in reverse order."}
```

Types are JSON's, named as Python names them: ``str``, ``int``, ``float``, ``bool``,
``list`` (of anything JSON), ``dict`` (a JSON object), ``list[str]``, ``list[int]``,
``list[float]``, ``dict[str, str]``, ``None`` (returns only), and ``any``.
"""

from __future__ import annotations

import json
import keyword
import math
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, field_validator, model_validator

from agentos.errors import BadInput, ValidationFailed
from agentos.shared.models import StrictModel, all_errors

MAX_SPEC = 64 * 1024  # bytes
TYPES = (
    "str",
    "int",
    "float",
    "bool",
    "list",
    "dict",
    "list[str]",
    "list[int]",
    "list[float]",
    "dict[str, str]",
    "any",
)


def _identifier(value: str, what: str) -> str:
    if not value.isidentifier() or keyword.iskeyword(value) or not value.isascii():
        raise ValueError(f"{value!r} is not a Python identifier ({what})")
    if value.startswith("_"):
        raise ValueError(f"{value!r} starts with '_' ({what}: a public name)")
    return value


class Parameter(StrictModel):
    name: str
    type: str
    description: str = ""

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return _identifier(value, "a parameter's name")

    @field_validator("type")
    @classmethod
    def _type(cls, value: str) -> str:
        if value not in TYPES:
            raise ValueError(f"unknown type {value!r} (one of {', '.join(TYPES)})")
        return value


class ToolSpec(StrictModel):
    function_name: str
    parameters: list[Parameter] = Field(max_length=32)
    return_type: str
    docstring: str = Field(min_length=1, max_length=4000)

    @field_validator("function_name")
    @classmethod
    def _function(cls, value: str) -> str:
        return _identifier(value, "the function's name")

    @field_validator("return_type")
    @classmethod
    def _returns(cls, value: str) -> str:
        if value not in (*TYPES, "None"):
            raise ValueError(f"unknown type {value!r} (one of {', '.join(TYPES)}, None)")
        return value

    @model_validator(mode="after")
    def _distinct(self) -> ToolSpec:
        names = [p.name for p in self.parameters]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"parameter {twice[0]!r} is given twice")
        return self

    def signature(self) -> str:
        params = ", ".join(f"{p.name}: {_annotation(p.type)}" for p in self.parameters)
        return f"def {self.function_name}({params}) -> {_annotation(self.return_type)}:"

    def stub(self) -> str:
        """A module defining the function as a stub that raises NotImplementedError."""
        return f"{self.signature()}\n    raise NotImplementedError\n"


def _annotation(type_name: str) -> str:
    return "object" if type_name == "any" else type_name


def load_spec(path: Path) -> ToolSpec:
    """``spec.json`` read and checked; one line naming the file and field."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ValidationFailed("missing: the spec step wrote no spec.json", file=path) from None
    except OSError as exc:
        raise ValidationFailed(f"cannot read: {exc.strerror}", file=path) from None
    if len(data) > MAX_SPEC:
        raise ValidationFailed(f"over {MAX_SPEC} bytes", file=path)
    try:
        raw = json.loads(data)
    except ValueError as exc:
        raise ValidationFailed(f"not JSON ({exc})", file=path) from None
    try:
        return ToolSpec.model_validate(raw)
    except ValidationError as exc:
        field, message = all_errors(exc)[0]
        raise ValidationFailed(message, file=path, field=field) from None


def check_args(spec: ToolSpec, text: str) -> dict[str, Any]:
    """A call's arguments (a JSON object) checked against the spec: every parameter given,
    none unknown, each of its type. One line naming the argument (exit code 2)."""
    try:
        args = json.loads(text)
    except ValueError as exc:
        raise BadInput(f"not JSON ({exc})", field="--args") from None
    if not isinstance(args, dict):
        raise BadInput('the arguments are a JSON object: {"name": value}', field="--args")
    known = {p.name: p for p in spec.parameters}
    for name in args:
        if name not in known:
            raise BadInput(
                f"unknown parameter {name!r} (the tool takes: {', '.join(known) or 'none'})",
                field="--args",
            )
    for p in spec.parameters:
        if p.name not in args:
            raise BadInput(f"missing parameter {p.name!r} ({p.type})", field="--args")
        if not matches(p.type, args[p.name]):
            raise BadInput(
                f"{p.name}: expected {p.type}, got {type(args[p.name]).__name__}",
                field="--args",
            )
    return args


def matches(type_name: str, value: Any) -> bool:
    """Whether a JSON value is of a spec type."""
    if type_name == "any":
        return True
    if type_name == "None":
        return value is None
    if type_name == "bool":
        return isinstance(value, bool)
    if type_name == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if type_name == "float":
        return (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and math.isfinite(float(value))
        )
    if type_name == "str":
        return isinstance(value, str)
    if type_name.startswith("list"):
        inner = type_name[5:-1] if type_name != "list" else "any"
        return isinstance(value, list) and all(matches(inner, v) for v in value)
    if type_name.startswith("dict"):
        return isinstance(value, dict) and (
            type_name == "dict" or all(isinstance(v, str) for v in value.values())
        )
    return False
