"""The gate's check definitions, as written in agent.yaml, a card or agentos.yaml.

The gate that runs them lives in :mod:`agentos.gate.runner`.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from pydantic import Field, field_validator, model_validator

from agentos.shared import patterns
from agentos.shared.models import StrictModel

CHECK_KINDS = (
    "run",
    "tests",
    "file_exists",
    "file_contains",
    "no_changes_outside",
    "max_diff_lines",
)


def _relative_path(value: str) -> str:
    """A path inside the worktree: relative, and never climbing out with ``..``."""
    if value.startswith(("/", "~")) or ".." in PurePosixPath(value).parts:
        raise ValueError(f"{value!r} must be a relative path inside the worktree")
    return value


class FileContains(StrictModel):
    path: str = Field(min_length=1)  # relative to the worktree
    pattern: str = Field(min_length=1)  # a regular expression (RE2), searched line by line

    @field_validator("path")
    @classmethod
    def _inside(cls, value: str) -> str:
        return _relative_path(value)

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        problem = patterns.problem(value, multiline=True)
        if problem is not None:
            raise ValueError(f"{value!r} is not a valid regular expression: {problem}")
        return value


class CheckSpec(StrictModel):
    """One check: a shell command (exit 0 passes) or one built-in kind.

    ``tests`` is the repository's own test command (see :mod:`agentos.gate.repo`): ``[]`` runs
    the whole suite, ``[tests/test_api.py, ...]`` only the tests named, where the
    repository's test runner takes names. Its timeout is the repository's unless the check
    sets one.
    """

    name: str = Field(min_length=1)
    run: str | None = None  # a shell command: exit 0 passes
    tests: list[str] | None = None  # the repository's tests: [] all, or the ones named
    timeout: float = Field(default=300, gt=0)
    cwd: str | None = None  # where `run` runs, relative to the worktree
    file_exists: str | None = None  # a path that must exist
    file_contains: FileContains | None = None  # a file that must match a pattern
    no_changes_outside: list[str] | None = None  # the only paths the work may change
    max_diff_lines: int | None = Field(default=None, ge=0)  # the most lines it may change
    # A command that must change the tree it checks (a formatter): it gets the worktree
    # writable in its sandbox. Others see it read-only and cannot change what they judge.
    writes: bool | None = None  # None: false (and left out of what a check is written as)
    # A `tests` check of a package or card whose work is changing tests (a test writer):
    # the changes it makes to the base's tests are recorded, not refused.
    allow_test_changes: bool | None = None  # None: false

    @field_validator("cwd", "file_exists")
    @classmethod
    def _inside(cls, value: str | None) -> str | None:
        return None if value is None else _relative_path(value)

    @field_validator("tests")
    @classmethod
    def _test_names(cls, value: list[str] | None) -> list[str] | None:
        for name in value or ():
            if not name.strip() or name.startswith("-"):
                raise ValueError(f"{name!r} is not a test path or node id")
            _relative_path(name.split("::")[0])
        return value

    @field_validator("no_changes_outside")
    @classmethod
    def _relative_globs(cls, value: list[str] | None) -> list[str] | None:
        for glob in value or ():
            _relative_path(glob)
        return value

    @property
    def kind(self) -> str:
        return next(k for k in CHECK_KINDS if getattr(self, k) is not None)

    @model_validator(mode="after")
    def _exactly_one_kind(self) -> CheckSpec:
        found = [k for k in CHECK_KINDS if getattr(self, k) is not None]
        if len(found) != 1:
            raise ValueError(f"a check needs exactly one of {', '.join(CHECK_KINDS)}")
        if self.allow_test_changes is not None and self.tests is None:
            raise ValueError("allow_test_changes is for a `tests` check")
        return self
