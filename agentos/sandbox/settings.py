"""How confined agents and checks are: the settings in ``agentos.yaml`` (``sandbox:``) and in
a package's ``agent.yaml`` (``sandbox:``), validated strictly.

Sizes are written like ``512M`` or ``2G`` (K, M, G, T; powers of 1024) or as a number of
bytes; times are seconds.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, field_validator

from agentos.shared.models import StrictModel

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(value: object) -> int:
    """Bytes from ``512M``, ``2G``, ``1.5G`` or a number; ValueError otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a size like 512M or 2G")
    if isinstance(value, int | float):
        size = int(value)
    else:
        match = _SIZE.match(str(value))
        if match is None:
            raise ValueError(f"{value!r} is not a size like 512M or 2G")
        size = int(float(match[1]) * _UNITS[match[2].upper()])
    if size <= 0:
        raise ValueError(f"{value!r} must be more than 0 bytes")
    return size


Size = Annotated[int, BeforeValidator(parse_size)]
Backend = Literal["auto", "bwrap", "unshare", "none"]


class Limits(StrictModel):
    """Resource limits of one agent (all its processes) or one check."""

    memory: Size | None = None  # bytes, for all processes together
    cpu: float | None = Field(default=None, gt=0)  # CPU seconds, per process
    processes: int | None = Field(default=None, gt=0)  # processes and threads at once
    file_size: Size | None = None  # the largest file a process may write
    # All the files an agent writes together: its worktree, its run's files, its /tmp and
    # its home (see agentos.sandbox.disk).
    disk: Size | None = None


class SandboxSettings(Limits):
    """``sandbox:`` in agentos.yaml: the backend, and the defaults of every package."""

    backend: Backend = "auto"
    # With `auto` and neither bwrap nor unshare usable, refuse to run agents (the default)
    # rather than run them unconfined; `false` runs them with limits only, and every
    # receipt says `sandbox: none`.
    required: bool = True
    network: bool = False
    # Paths every agent and check may read besides what they need to run (absolute, or
    # under ~/): a local wheelhouse or package mirror that tox or pip install from offline.
    # The workspace and the main checkout stay hidden whatever is listed here.
    read: list[str] = Field(default_factory=list)
    memory: Size | None = 4 << 30
    cpu: float | None = Field(default=3600, gt=0)
    processes: int | None = Field(default=1024, gt=0)
    file_size: Size | None = 4 << 30
    disk: Size | None = 8 << 30

    @field_validator("read")
    @classmethod
    def _absolute(cls, value: list[str]) -> list[str]:
        for entry in value:
            if not entry.startswith(("/", "~/")) or ".." in entry.split("/"):
                raise ValueError(f"{entry!r} must be an absolute path (or under ~/)")
        return value


class PackageSandbox(Limits):
    """``sandbox:`` in agent.yaml: what this package needs beyond the defaults."""

    # true: the host's network; false: none (loopback inside only); a list of hosts
    # (`api.anthropic.com`, `host:port`, `*.example.com`): only those, through AgentOS's
    # proxy (for a CLI runtime, its model API's host too); None: the workspace's default.
    network: bool | list[str] | None = None
    # Files or directories of the user's home the agent may read (e.g. ~/.claude); each is
    # listed in the receipts. Nothing else of the home is visible.
    read: list[str] = Field(default_factory=list)
    # `empty`: a fresh home for every attempt; `persistent`: one kept per package under
    # the workspace (.agentos/homes/<package>), for tools that keep state in ~.
    home: Literal["empty", "persistent"] = "empty"

    @field_validator("network")
    @classmethod
    def _hosts(cls, value: bool | list[str] | None) -> bool | list[str] | None:
        if isinstance(value, list):
            from agentos.sandbox.egress import parse_host

            for entry in value:
                parse_host(entry)
        return value

    @field_validator("read")
    @classmethod
    def _in_home(cls, value: list[str]) -> list[str]:
        for entry in value:
            rel = entry.removeprefix("~/")
            if entry == rel or not rel or rel.startswith("/") or ".." in rel.split("/"):
                raise ValueError(f"{entry!r} must be a path under ~/, like ~/.claude")
        return value
