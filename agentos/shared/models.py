"""Loading YAML files into pydantic models, with errors that name the file and field."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, TypeVar

from packaging.version import InvalidVersion, Version
from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationError

from agentos.errors import ValidationFailed
from agentos.shared.limits import Limit, read_within
from agentos.shared.yaml import parse_yaml

M = TypeVar("M", bound=BaseModel)

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")
_SEMVER_RE = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$"
)


class StrictModel(BaseModel):
    """Base for every model read from a file a person wrote: unknown fields are errors."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def _check_name(value: str) -> str:
    if not NAME_RE.match(value):
        raise ValueError(f"{value!r} must be lowercase letters, digits and '-' (at most 64)")
    return value


def _check_semver(value: str) -> str:
    if not _SEMVER_RE.match(value):
        raise ValueError(f"{value!r} is not a semantic version (MAJOR.MINOR.PATCH)")
    try:
        Version(value)
    except InvalidVersion:
        raise ValueError(
            f"{value!r}: pre-releases must look like 1.0.0-rc.1, 1.0.0-beta.2 or 1.0.0-alpha"
        ) from None
    return value


Name = Annotated[str, AfterValidator(_check_name)]
SemVer = Annotated[str, AfterValidator(_check_semver)]


def _field_path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(root)"


def all_errors(exc: ValidationError) -> list[tuple[str, str]]:
    """Every (field, message) of a pydantic error, worded for people."""
    out = []
    for err in exc.errors():
        message = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            message = "unknown field"
        elif err["type"] == "missing":
            message = "required field is missing"
        out.append((_field_path(tuple(err["loc"])), message))
    return out


def read_yaml(path: Path, limit: Limit) -> Any:
    """Parse a YAML file of at most ``limit`` bytes (:mod:`agentos.shared.limits`: a larger one is
    refused before it is read); a syntax error or a key given twice becomes a one-line
    :class:`ValidationFailed`."""
    try:
        text = read_within(path, limit).decode("utf-8")
    except FileNotFoundError:
        raise ValidationFailed("file not found", file=path) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValidationFailed(f"cannot read: {exc}", file=path) from None
    return parse_yaml(text, path)


def validate(model: type[M], data: Any, *, file: Path | str) -> M:
    """Validate ``data`` against ``model``; the first problem is raised, naming the field."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ValidationFailed("expected a mapping of fields", file=file, field="(root)")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        field, message = all_errors(exc)[0]
        raise ValidationFailed(message, file=file, field=field) from None


def load_yaml_model(model: type[M], path: Path, limit: Limit) -> M:
    """The ``model`` in YAML file ``path``, of at most ``limit`` bytes."""
    return validate(model, read_yaml(path, limit), file=path)
