"""The ``agent.yaml`` manifest of an agent package."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator

from agentos.errors import ValidationFailed
from agentos.hub.agent_tools import AGENT_TOOLS
from agentos.sandbox.settings import PackageSandbox
from agentos.shared import limits
from agentos.shared.checks import CheckSpec
from agentos.shared.models import Name, SemVer, StrictModel, load_yaml_model

MANIFEST = "agent.yaml"

Runtime = Literal[
    "shell", "python", "claude-code", "gemini-cli", "codex", "ollama", "langchain", "crewai"
]
# The runtimes whose program is an MCP client AgentOS can hand its tools to.
MCP_RUNTIMES = ("claude-code", "gemini-cli", "codex")
_ENTRY_CALLABLE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


# Variables an agent never gets, whatever its package lists: where AgentOS's state is.
KEPT_FROM_AGENTS = ("AGENTOS_STATE_URL",)


class GuardianOverrides(StrictModel):
    """A package's own guardian policy; each key given replaces the workspace's."""

    interval: float | None = Field(default=None, ge=0.05)  # seconds between its checks
    stuck_after: float | None = Field(default=None, gt=0)  # silence before a nudge
    nudge: str | None = None  # the text typed into its terminal
    max_restarts: int | None = Field(default=None, ge=0)
    kill_after: float | None = Field(default=None, gt=0)  # silence before it is stopped


class Manifest(StrictModel):
    name: Name  # lowercase letters, digits and '-' (at most 64); unique in the hub
    version: SemVer  # a semantic version
    description: str = Field(min_length=1)
    runtime: Runtime  # how it is started (agentos.runtimes)
    # shell: a script; python, langchain, crewai: "module:callable"; CLI runtimes: a prompt
    entry: str = Field(min_length=1)
    capabilities: list[str] = Field(default_factory=list)  # free words, shown by hub show
    model: str | None = None  # ollama, langchain, crewai; the CLI runtimes: their --model
    env: list[str] = Field(default_factory=list)  # variables passed through; nothing else is
    timeout: int = Field(default=600, gt=0)  # seconds an attempt may take
    checks: list[CheckSpec] = Field(default_factory=list)  # checks every run of it must pass
    # False: it only verifies (runs the tests, reports) and changes nothing. In a run it
    # starts after the agents that change code, on their integrated work, and is not retried.
    changes: bool = True
    paths: list[str] = Field(default_factory=list)  # what the agent works on (sparse checkout)
    guardian: GuardianOverrides | None = None
    sandbox: PackageSandbox | None = None  # what it needs beyond the sandbox's defaults
    # AgentOS's MCP tools its CLI is given during a run (claude-code, gemini-cli, codex):
    # names from AGENT_TOOLS.
    mcp: list[str] = Field(default_factory=list)

    @field_validator("mcp")
    @classmethod
    def _agent_tools(cls, value: list[str], info: ValidationInfo) -> list[str]:
        runtime = info.data.get("runtime")
        if value and runtime is not None and runtime not in MCP_RUNTIMES:
            raise ValueError(
                f"the {runtime} runtime starts no MCP client (only "
                + ", ".join(MCP_RUNTIMES)
                + " do)"
            )
        for name in value:
            if name not in AGENT_TOOLS:
                raise ValueError(
                    f"{name!r} is not a tool an agent may be given; they are: "
                    + ", ".join(AGENT_TOOLS)
                )
        return list(dict.fromkeys(value))

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: list[str]) -> list[str]:
        for name in value:
            if not _ENV_NAME.match(name):
                raise ValueError(f"{name!r} is not an environment variable name")
        return value

    @field_validator("entry")
    @classmethod
    def _safe_entry(cls, value: str) -> str:
        if value.startswith("/") or ".." in Path(value).parts:
            raise ValueError(f"{value!r} must be a path or module inside the package")
        return value

    @property
    def ref(self) -> str:
        return f"{self.name}@{self.version}"

    def passed(self, environ: Mapping[str, str]) -> dict[str, str]:
        """The variables of ``environ`` its agent gets: those it lists in ``env``, but
        AgentOS's own state URL (its password, and the database every record and receipt is
        in): no package gets it by listing it."""
        given = [n for n in self.env if n in environ and n not in KEPT_FROM_AGENTS]
        return {n: environ[n] for n in given}

    def check_entry(self, package_dir: Path, *, file: Path) -> None:
        """Check that ``entry`` names something present in the package."""
        if self.runtime in ("python", "langchain", "crewai"):
            if not _ENTRY_CALLABLE.match(self.entry):
                raise ValidationFailed(
                    f"{self.runtime} entry must be 'module:callable', not {self.entry!r}",
                    file=file,
                    field="entry",
                )
            module = self.entry.split(":")[0].replace(".", "/")
            if not (
                (package_dir / f"{module}.py").is_file()
                or (package_dir / module / "__init__.py").is_file()
            ):
                raise ValidationFailed(
                    f"module {self.entry.split(':')[0]!r} not found in the package",
                    file=file,
                    field="entry",
                )
        elif self.runtime != "ollama" and not (package_dir / self.entry).is_file():
            raise ValidationFailed(
                f"{self.entry!r} not found in the package", file=file, field="entry"
            )


def load_manifest(package_dir: Path) -> Manifest:
    """Read and fully validate the manifest of the package in ``package_dir``."""
    path = package_dir / MANIFEST
    manifest = load_yaml_model(Manifest, path, limits.MANIFEST)
    manifest.check_entry(package_dir, file=path)
    return manifest
