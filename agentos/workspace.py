"""Workspaces: where the hub, the cards, the receipts and AgentOS's state live.

A workspace is found from ``--workspace``, then ``AGENTOS_HOME``, then the nearest
parent directory holding ``.agentos/``. When none is found and AgentOS runs from its
own checkout, the checkout is the workspace (the embedded default).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from agentos._models import StrictModel, load_yaml_model
from agentos.checks import CheckSpec
from agentos.errors import BadInput, NotFound
from agentos.sandbox._settings import SandboxSettings

STATE_DIR = ".agentos"
SETTINGS_FILE = "agentos.yaml"
_PACKAGE_DIR = Path(__file__).resolve().parent


# --- agentos.yaml -------------------------------------------------------------------------


class ReceiptSettings(StrictModel):
    redact: bool = False


Axis = Literal["goal", "constraints", "scope", "context", "success"]


class InterviewSettings(StrictModel):
    threshold: float = Field(default=0.4, ge=0, le=1)
    floors: dict[Axis, float] = Field(default_factory=dict)
    weights: dict[Axis, float] = Field(default_factory=dict)
    rewrite_model: str | None = None  # an Ollama model that proposes clearer rewrites

    @model_validator(mode="after")
    def _in_unit_range(self) -> InterviewSettings:
        for table in (self.floors, self.weights):
            for axis, value in table.items():
                if not 0 <= value <= 1:
                    raise ValueError(f"{axis}: {value} is outside 0..1")
        return self


class RunSettings(StrictModel):
    retries: int = Field(default=2, ge=0, le=20)
    guardian: bool = True
    timeout: int = Field(default=1800, gt=0)
    # The agent (NAME or NAME@VERSION) that takes requests no routing card matches.
    default_agent: str | None = Field(default=None, pattern=r"^[a-z0-9][a-z0-9-]*(@\S+)?$")
    # What lands on the target branch: one squashed commit per agent, or one for the run.
    squash: Literal["agent", "run"] = "agent"
    # Kept branches of finished runs (and the hidden refs of merged ones) older than this
    # many days are removed by `agentos runs prune` and `agentos gc --branches`.
    keep_days: float = Field(default=14, ge=0)


class GuardianSettings(StrictModel):
    interval: float = Field(default=60, ge=0.05)
    stuck_after: float = Field(default=300, gt=0)
    nudge: str = "Are you stuck? Continue with the task."
    max_restarts: int = Field(default=1, ge=0)
    kill_after: float = Field(default=900, gt=0)


class RepoSettings(StrictModel):
    """How one repository is tested: ``repos:`` in agentos.yaml, or its own .agentos.yaml.

    Every field is optional; what is not set is detected (see :mod:`agentos.repos`)."""

    test: str | None = Field(default=None, min_length=1)  # shell command, run in the tree
    python: str | None = Field(default=None, min_length=1)  # relative to the repository
    env: dict[str, str] = Field(default_factory=dict)
    timeout: float | None = Field(default=None, gt=0)  # seconds for the test check


class Settings(StrictModel):
    receipts: ReceiptSettings = ReceiptSettings()
    interview: InterviewSettings = InterviewSettings()
    run: RunSettings = RunSettings()
    checks: list[CheckSpec] = Field(default_factory=list)
    guardian: GuardianSettings = GuardianSettings()
    sandbox: SandboxSettings = SandboxSettings()
    # repository path (~ expanded; relative to the workspace) -> how it is tested
    repos: dict[str, RepoSettings] = Field(default_factory=dict)


# --- the workspace ------------------------------------------------------------------------


@dataclass(frozen=True)
class Workspace:
    root: Path

    @property
    def hub_dir(self) -> Path:
        return self.root / "hub"

    @property
    def cards_dir(self) -> Path:
        return self.root / "routing_cards"

    @property
    def receipts_dir(self) -> Path:
        return self.root / "receipts"

    @property
    def state_dir(self) -> Path:
        return self.root / STATE_DIR

    @property
    def state_db(self) -> Path:
        return self.state_dir / "state.db"

    @property
    def knowledge_db(self) -> Path:
        return self.state_dir / "knowledge.db"

    @property
    def logs_dir(self) -> Path:
        return self.state_dir / "logs"

    @property
    def worktrees_dir(self) -> Path:
        return self.state_dir / "worktrees"

    @property
    def settings_file(self) -> Path:
        return self.root / SETTINGS_FILE

    @cached_property
    def settings(self) -> Settings:
        if not self.settings_file.exists():
            return Settings()
        return load_yaml_model(Settings, self.settings_file)

    def ensure(self) -> Workspace:
        """Create the directories every command may write to."""
        for d in (self.hub_dir, self.cards_dir, self.receipts_dir, self.state_dir, self.logs_dir):
            d.mkdir(parents=True, exist_ok=True)
        return self


def bundled_dir(name: str) -> Path:
    """The bundled ``hub`` or ``routing_cards``: in the wheel, or in the source checkout."""
    packaged = _PACKAGE_DIR / "_bundled" / name
    if packaged.is_dir():
        return packaged
    return _PACKAGE_DIR.parent / name


def checkout_root() -> Path | None:
    """The source checkout AgentOS runs from, when it runs from one."""
    root = _PACKAGE_DIR.parent
    if (root / "pyproject.toml").is_file() and (root / "hub").is_dir():
        return root
    return None


WorkspaceOrigin = Literal["--workspace", "AGENTOS_HOME", ".agentos", "checkout"]


@dataclass(frozen=True)
class Located:
    """A workspace, how it was found, and ``cwd``: the directory the search started from (the
    workspace itself when ``--workspace`` or ``AGENTOS_HOME`` named it)."""

    workspace: Workspace
    origin: WorkspaceOrigin
    cwd: Path

    @property
    def notice(self) -> str | None:
        """What to tell the person when nothing named a workspace and AgentOS fell back to its
        own checkout from a directory outside it; None otherwise (from inside the checkout,
        using it is no surprise)."""
        root = self.workspace.root
        if self.origin != "checkout" or self.cwd.is_relative_to(root):
            return None
        return (
            f"no workspace found from {self.cwd}; using the AgentOS checkout {root} "
            "(set AGENTOS_HOME or run agentos init)"
        )


def locate_workspace(
    explicit: str | Path | None = None,
    *,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
) -> Located:
    """Find the workspace: ``explicit``, then ``AGENTOS_HOME``, then a parent with ``.agentos/``,
    then the checkout AgentOS runs from; and say which."""
    env = dict(os.environ) if env is None else env
    given: str | Path | None
    origin: WorkspaceOrigin
    for given, origin in ((explicit, "--workspace"), (env.get("AGENTOS_HOME"), "AGENTOS_HOME")):
        if given:
            path = Path(given).expanduser().resolve()
            if not path.is_dir():
                raise NotFound(
                    f"workspace {path} does not exist (run `agentos init {path}`)", field=origin
                )
            return Located(Workspace(path), origin, path)
    here = (cwd or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if (candidate / STATE_DIR).is_dir():
            return Located(Workspace(candidate), ".agentos", here)
    root = checkout_root()
    if root is not None:
        return Located(Workspace(root), "checkout", here)
    raise NotFound("no workspace found: run `agentos init`, set AGENTOS_HOME or pass --workspace")


def find_workspace(
    explicit: str | Path | None = None,
    *,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
) -> Workspace:
    """Find the workspace: ``explicit``, then ``AGENTOS_HOME``, then a parent with ``.agentos/``."""
    return locate_workspace(explicit, cwd=cwd, env=env).workspace


def init_workspace(directory: Path) -> tuple[Workspace, list[str]]:
    """Create a workspace in ``directory`` seeded with the bundled agents and cards.

    Existing files are kept; returns the workspace and what was created.
    """
    directory = directory.expanduser().resolve()
    if directory.exists() and not directory.is_dir():
        raise BadInput("exists and is not a directory", file=directory)
    created: list[str] = []
    ws = Workspace(directory)
    for name, target in (("hub", ws.hub_dir), ("routing_cards", ws.cards_dir)):
        if not target.exists():
            shutil.copytree(
                bundled_dir(name),
                target,
                ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".lock"),
            )
            created.append(f"{name}/")
    for d, label in ((ws.receipts_dir, "receipts/"), (ws.state_dir, f"{STATE_DIR}/")):
        if not d.exists():
            d.mkdir(parents=True)
            created.append(label)
    if not ws.settings_file.exists():
        ws.settings_file.write_text(_DEFAULT_SETTINGS, encoding="utf-8")
        created.append(SETTINGS_FILE)
    ws.ensure()
    return ws, created


_DEFAULT_SETTINGS = """\
# AgentOS workspace settings. Every key is optional; these are the defaults.
receipts: {redact: false}
interview: {threshold: 0.4}
run: {retries: 2, guardian: true}
checks: []
guardian: {interval: 60, stuck_after: 300, max_restarts: 1, kill_after: 900}
"""
