"""What one confined process may see and do: a :class:`Policy`, made for an agent or a check
from the workspace's and the package's settings.

Nothing is visible that the policy does not name (:mod:`agentos.sandbox.view` builds the
view): the system directories read-only; readable, exactly, what the process needs to run
(the package, the git common directory, the interpreters and tools on its PATH, AgentOS
itself, ``sandbox.read``); writable, the agent's worktree and the files of its own run (its
io directory, log), and a private ``/tmp`` and home. Hidden again where one of those holds
them: the workspace (hub, cards, receipts, state.db, agentos.yaml, ``.agentos/``) and the
target repository's main working tree. A check gets the worktree read-only unless it says
``writes: true``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from agentos.sandbox.limits import Resolved
from agentos.sandbox.settings import Limits, PackageSandbox, SandboxSettings


@dataclass(frozen=True)
class Policy:
    network: bool
    hidden: tuple[Path, ...]  # each replaced by an empty directory
    readable: tuple[Path, ...]  # visible read-only again, inside what is hidden
    writable: tuple[Path, ...]  # bound read-write
    home: Path  # the path HOME names inside (the user's real home path)
    home_dir: Path | None  # what is bound at ``home`` (None: an empty directory)
    home_reads: tuple[Path, ...]  # files or directories of the real home, read-only
    limits: Resolved
    cwd: Path
    extra_env: dict[str, str] = field(default_factory=dict)
    egress: tuple[str, ...] = ()  # the hosts its proxy lets through (network is then off)

    def as_dict(self) -> dict[str, object]:
        """What a receipt records of it."""
        return {
            "network": list(self.egress) if self.egress else self.network,
            "writable": [str(p) for p in self.writable],
            "home": "persistent" if self.home_dir else "empty",
            "home_reads": [str(p) for p in self.home_reads],
            "limits": self.limits.as_dict(),
        }


def resolve_limits(settings: SandboxSettings, *overrides: Limits | None) -> Resolved:
    """The workspace's limits, each replaced by the last override that sets it (a check's own
    limits, given after its package's, win)."""
    values = {k: getattr(settings, k) for k in ("memory", "cpu", "processes", "file_size", "disk")}
    for override in overrides:
        if override is None:
            continue
        for key in values:
            if key in override.model_fields_set:
                values[key] = getattr(override, key)
    return Resolved(**values)


def runtime_paths(path_env: str, home: Path, extra: Iterable[Path] = ()) -> list[Path]:
    """What a process needs to read to run at all: every directory on its PATH, AgentOS's
    interpreter and its installation, and where each of those really lives (a venv's
    interpreter links to its base installation, often under the home)."""
    return list(_runtime_paths(path_env, home, tuple(extra)))


@lru_cache(maxsize=64)
def _runtime_paths(path_env: str, home: Path, extra: tuple[Path, ...]) -> tuple[Path, ...]:
    found: list[Path] = []
    candidates = [
        # Absolute entries only: "." or "bin" would show whatever the caller's directory is.
        *(Path(p) for p in path_env.split(":") if p.startswith("/") and p != "/"),
        Path(sys.prefix),
        Path(sys.base_prefix),
        Path(sys.executable).parent,
        Path(__file__).resolve().parents[1],  # the agentos package itself (never its parent)
        *extra,
    ]
    for path in candidates:
        for p in (path, path.resolve(), *tool_root(path, home)):
            if p.exists() and p not in found:
                found.append(p)
    return tuple(found)


_BIN_NAMES = ("bin", ".bin", "sbin", "shims")
# Tool directories at the top of a home that hold programs and their libraries, not
# secrets: a bin directory in one of them brings its parent along.
_HOME_TOOLS = (".pyenv", ".rbenv", ".nodenv", ".volta", ".bun", ".deno", ".nvm")


def tool_root(path: Path, home: Path) -> list[Path]:
    """What a bin directory's programs load from beside it: ``node_modules`` for
    ``node_modules/.bin``, the venv for ``venv/bin``, the installation for ``prefix/bin``
    (a directory holding ``lib`` and no checkout or workspace), ``~/.pyenv`` for
    ``~/.pyenv/shims``; at the top of the home only for known tool directories (never
    ``~/.cargo``, which keeps credentials; for ``~/.local/bin``, only ``~/.local/lib``).
    Anything else: the bin directory alone."""
    if path.name not in _BIN_NAMES:
        return []
    parent = path.parent
    if parent.name in _HOME_TOOLS:
        return [parent]
    if parent.parent == home:
        return [parent / "lib"] if parent.name == ".local" else []
    if parent in (home, Path("/")):
        return []
    if parent.name == "node_modules" or (parent / "pyvenv.cfg").is_file():
        return [parent]
    holds_work = any((parent / name).exists() for name in (".git", ".agentos", "agentos.yaml"))
    return [parent] if (parent / "lib").is_dir() and not holds_work else []


def inside_any(path: Path, roots: Sequence[Path]) -> bool:
    return any(path == r or path.is_relative_to(r) for r in roots)


def policy(
    *,
    settings: SandboxSettings,
    package: PackageSandbox | None,
    hidden: Sequence[Path],
    writable: Sequence[Path],
    readable: Sequence[Path],
    home: Path,
    home_dir: Path | None,
    cwd: Path,
    limits: Limits | None = None,
) -> Policy:
    """A policy: what it may read and write, exactly (nothing else is there, see
    :mod:`agentos.sandbox.view`), and what is hidden again inside what it may read."""
    pkg = package or PackageSandbox()
    network = pkg.network if pkg.network is not None else settings.network
    egress = tuple(network) if isinstance(network, list) else ()
    # What is shown again whole needs no hiding (the tree a check judges may be the main
    # checkout itself).
    hidden = [h for h in hidden if h not in writable and h not in readable]
    reads = tuple(dict.fromkeys(p for p in readable if p.exists()))
    home_reads = tuple(
        home / entry.removeprefix("~/") for entry in pkg.read if (home / entry[2:]).exists()
    )
    return Policy(
        network=network is True,
        egress=egress,
        hidden=tuple(dict.fromkeys(hidden)),
        readable=reads,
        writable=tuple(dict.fromkeys(writable)),
        home=home,
        home_dir=home_dir,
        home_reads=home_reads,
        limits=resolve_limits(settings, pkg, limits),
        cwd=cwd,
    )
