"""Stormbreaker check definitions, as written in agent.yaml, a card or agentos.yaml.

The gate that runs them lives in :mod:`agentos.stormbreaker`.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from agentos._models import StrictModel

CHECK_KINDS = ("run", "file_exists", "file_contains", "no_changes_outside", "max_diff_lines")


class FileContains(StrictModel):
    path: str = Field(min_length=1)
    pattern: str = Field(min_length=1)


class CheckSpec(StrictModel):
    """One check: a shell command (exit 0 passes) or one built-in kind."""

    name: str = Field(min_length=1)
    run: str | None = None
    timeout: float = Field(default=300, gt=0)
    cwd: str | None = None
    file_exists: str | None = None
    file_contains: FileContains | None = None
    no_changes_outside: list[str] | None = None
    max_diff_lines: int | None = Field(default=None, ge=0)

    @property
    def kind(self) -> str:
        return next(k for k in CHECK_KINDS if getattr(self, k) is not None)

    @model_validator(mode="after")
    def _exactly_one_kind(self) -> CheckSpec:
        found = [k for k in CHECK_KINDS if getattr(self, k) is not None]
        if len(found) != 1:
            raise ValueError(f"a check needs exactly one of {', '.join(CHECK_KINDS)}")
        return self
