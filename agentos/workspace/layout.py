"""Workspaces: where the hub, the cards, the receipts and AgentOS's state live.

A workspace is found from ``--workspace``, then ``AGENTOS_HOME``, then the nearest
parent directory holding ``.agentos/``. When none is found and AgentOS runs from its
own checkout, the checkout is the workspace (the embedded default).
"""

from __future__ import annotations

import hashlib
import json
import os
from contextlib import suppress
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from agentos.errors import BadInput, NotFound
from agentos.shared.fs import atomic_write

if TYPE_CHECKING:
    from agentos.state.location import StateLocation
    from agentos.workspace.settings import Settings

STATE_DIR = ".agentos"
SETTINGS_FILE = "agentos.yaml"
_PACKAGE_DIR = Path(__file__).resolve().parent.parent  # agentos/


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

    @cached_property  # (these two are asked for on every receipt)
    def receipts_dir(self) -> Path:
        return self.root / "receipts"

    @cached_property
    def state_dir(self) -> Path:
        return self.root / STATE_DIR

    @property
    def state_db(self) -> Path:
        """The SQLite state file (used when the state is not on a PostgreSQL server)."""
        return self.state_dir / "state.db"

    @property
    def state(self) -> StateLocation:
        """Where the workspace's state is: ``AGENTOS_STATE_URL``, else ``state:`` in
        agentos.yaml, else :attr:`state_db` (see :mod:`agentos.state.location`)."""
        from agentos.state.location import ENV, locate

        env = os.environ.get(ENV, "").strip()
        kept = self.__dict__.get("_state")  # (asked for on every receipt: kept per URL)
        if kept is not None and kept[0] == env:
            return kept[1]  # type: ignore[no-any-return]
        if env:  # the settings are not read for it
            found = locate(self.state_db, None, self.settings_file)
        else:
            found = locate(self.state_db, self.settings_data.get("state"), self.settings_file)
        self.__dict__["_state"] = (env, found)
        return found

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
        from agentos.workspace.settings import load_settings

        return load_settings(self.settings_file)

    @cached_property
    def settings_data(self) -> dict[str, Any]:
        """The settings as validated JSON data, for the paths that must not import pydantic
        (a routing decision, a receipt): kept with the digest of the agentos.yaml they were
        validated from (``.agentos/cache/settings.json``), validated again once it changes.
        Same values as :attr:`settings`."""
        stamp = self.state_dir / "cache" / "settings.json"
        try:
            digest = hashlib.sha256(self.settings_file.read_bytes() + _schema_stamp()).hexdigest()
        except FileNotFoundError:
            digest = hashlib.sha256(b"none" + _schema_stamp()).hexdigest()
        except OSError:
            digest = ""  # loading names the problem
        with suppress(OSError, ValueError):
            kept = json.loads(stamp.read_bytes())
            if (
                digest
                and isinstance(kept, dict)
                and kept.get("digest") == digest
                and isinstance(kept.get("settings"), dict)
            ):
                return dict(kept["settings"])
        data: dict[str, Any] = self.settings.model_dump(mode="json")
        if digest:
            with suppress(OSError):  # a cache: a stamp not written is a check next time
                stamp.parent.mkdir(parents=True, exist_ok=True)
                atomic_write(stamp, json.dumps({"digest": digest, "settings": data}))
        return data

    def check_settings(self) -> None:
        """Fail now, naming the file and field, when agentos.yaml is not valid. Cheap when
        it has not changed since it was last found valid (the settings are kept, validated,
        in ``.agentos/cache/settings.json``): a command that does not use them (``runs
        list``, ``status``, ``route``) still refuses a broken file up front, without
        importing pydantic on every call."""
        self.settings_data  # noqa: B018 -- reading them is the check

    def ensure(self) -> Workspace:
        """Create the directories every command may write to."""
        for d in (self.hub_dir, self.cards_dir, self.receipts_dir, self.state_dir, self.logs_dir):
            d.mkdir(parents=True, exist_ok=True)
        return self


# The modules that say what valid settings are: kept data is valid only for them as they are.
_SCHEMA_SOURCES = (
    "workspace/settings.py",
    "shared/checks.py",
    "shared/models.py",
    "sandbox/settings.py",
    "shared/limits.py",
    "shared/patterns.py",
)


def _schema_stamp() -> bytes:
    from agentos import __version__

    parts = [__version__]
    for name in _SCHEMA_SOURCES:
        try:
            st = (_PACKAGE_DIR / name).stat()
            parts.append(f"{name}:{st.st_size}:{st.st_mtime_ns}")
        except OSError:
            parts.append(f"{name}:?")
    return "\n".join(parts).encode()


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
                    f"workspace {path} does not exist",
                    field=origin,
                    hint=f"run `agentos init {path}`",
                )
            return Located(Workspace(path), origin, path)
    here = (cwd or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if (candidate / STATE_DIR).is_dir():
            return Located(Workspace(candidate), ".agentos", here)
    root = checkout_root()
    if root is not None:
        return Located(Workspace(root), "checkout", here)
    raise NotFound(
        "no workspace found", hint="run `agentos init`, set AGENTOS_HOME or pass --workspace"
    )


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
    import shutil

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
        from agentos.workspace.settings import defaults_yaml  # pydantic: only at init

        ws.settings_file.write_text(defaults_yaml(), encoding="utf-8")
        created.append(SETTINGS_FILE)
    ws.ensure()
    return ws, created
