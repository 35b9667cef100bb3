"""Readying an agent's worktree to be tested like the main checkout.

A worktree holds what git tracks. What an install built in the main checkout and git
ignores, inside the project's Python packages, is missing there: compiled extensions,
version modules that setuptools-scm or hatch-vcs generate, compiled translations. Those are
copied (never over a file the worktree has), and the notes say so. Editable installs the
import shim cannot redirect are named with the reason.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from pathlib import Path

EXTENSION_SUFFIXES = (".so", ".pyd")
# Directories whose ignored files are never the project's own build products.
_SKIP_DIRS = frozenset(
    {
        ".git",
        ".venv",
        "venv",
        ".tox",
        ".nox",
        "build",
        "dist",
        "node_modules",
        "__pycache__",
        ".eggs",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".agentos",
        "site-packages",
    }
)
_SHOWN = 5  # file names listed in a note before "and N more"


def _ignored_files(repo: Path) -> list[str]:
    """The git-ignored files of the main checkout (wholly ignored directories left out)."""
    return _listed(repo) or []


def _listed(repo: Path) -> list[str] | None:
    """As :func:`_ignored_files`; None when git cannot say."""
    if shutil.which("git") is None:
        return None
    out = subprocess.run(
        [
            "git",
            "-C",
            str(repo),
            "ls-files",
            "-z",
            "--others",
            "--ignored",
            "--exclude-standard",
            "--directory",
            "--no-empty-directory",
        ],
        capture_output=True,
        stdin=subprocess.DEVNULL,
        env={k: v for k, v in os.environ.items() if not k.startswith("GIT_")},
    )
    if out.returncode != 0:
        return None
    names = out.stdout.decode("utf-8", errors="surrogateescape").split("\0")
    return [n for n in names if n and not n.endswith("/")]


def _in_package(repo: Path, rel: str) -> bool:
    """Whether ``rel`` lies inside a Python package (a directory with ``__init__.py``)."""
    parent = Path(rel).parent
    return any(
        (repo / p / "__init__.py").is_file() for p in (parent, *parent.parents) if p != Path(".")
    )


def _wanted(repo: Path, rel: str, venv: Path | None) -> bool:
    parts = rel.split("/")
    if any(p in _SKIP_DIRS or p.endswith(".egg-info") for p in parts[:-1]):
        return False
    if rel.endswith((".pyc", ".pyo")) or (venv is not None and (repo / rel).is_relative_to(venv)):
        return False
    return rel.endswith(EXTENSION_SUFFIXES) or _in_package(repo, rel)


def _listing(names: list[str]) -> str:
    shown = ", ".join(names[:_SHOWN])
    return shown + (f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else "")


class IgnoredFiles:
    """The main checkout's git-ignored files, listed once: a run's agents get the same
    build products at their set-up and before each gate, for one git process a run (what
    the main checkout builds during the run is the next run's). A listing git could not
    make is not kept: the next asks again."""

    def __init__(self, repo: Path) -> None:
        self.repo = repo
        self._lock = threading.Lock()
        self._names: list[str] | None = None

    def names(self) -> list[str]:
        with self._lock:
            if self._names is None:
                self._names = _listed(self.repo)
            return self._names or []


def copy_built_files(
    repo: Path, worktree: Path, venv: Path | None, ignored: IgnoredFiles | None = None
) -> list[str]:
    """Copy the main checkout's ignored build products into ``worktree``; notes on what.
    ``ignored``: the listing of them, when the caller keeps one (else listed now)."""
    if worktree == repo.resolve() or not worktree.is_dir():
        return []
    extensions: list[str] = []
    generated: list[str] = []
    for rel in ignored.names() if ignored is not None else _ignored_files(repo):
        if not _wanted(repo, rel, venv):
            continue
        source, target = repo / rel, worktree / rel
        if target.exists() or target.is_symlink() or not source.is_file():
            continue
        # Never through a link an agent committed: the copy lands inside the worktree.
        if not _inside(target.parent, worktree):
            continue
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
        except OSError:  # a dangling link where a directory should be
            continue
        if not target.parent.resolve().is_relative_to(worktree.resolve()):
            continue
        shutil.copy2(source, target)
        (extensions if rel.endswith(EXTENSION_SUFFIXES) else generated).append(rel)
    notes = []
    if extensions:
        notes.append(
            f"copied {len(extensions)} compiled extension(s) from the main checkout: "
            f"{_listing(extensions)}; they were built from the main checkout's sources, so a "
            "change to their C/Rust sources in the worktree is not tested until they are rebuilt"
        )
    if generated:
        notes.append(
            f"copied {len(generated)} git-ignored file(s) the main checkout's install "
            f"generated: {_listing(generated)}"
        )
    return notes


def _inside(path: Path, root: Path) -> bool:
    """Whether ``path`` (or the part of it that exists) resolves inside ``root``."""
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    return existing.resolve().is_relative_to(root.resolve())


def _site_packages(venv: Path) -> list[Path]:
    return [*venv.glob("lib/python*/site-packages"), *venv.glob("Lib/site-packages")]


def editable_notes(repo: Path, venv: Path | None) -> list[str]:
    """Editable installs of ``repo`` in ``venv`` that the import shim cannot redirect."""
    if venv is None:
        return []
    notes = []
    strict = str(repo / "build" / "__editable__")
    for site in _site_packages(venv):
        for pth in sorted(site.glob("*.pth")):
            try:
                text = pth.read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            if strict in text:
                notes.append(
                    f"{pth.name}: a setuptools strict editable install (a link tree in "
                    f"{repo}/build) points at the main checkout's files, so the worktree's "
                    "code is not imported; reinstall without editable_mode=strict"
                )
        for loader in sorted(site.glob("_*_editable_loader.py")):
            notes.append(
                f"{loader.name}: a meson-python editable install rebuilds from the main "
                "checkout, so the worktree's code is not imported; set `test:` to build and "
                "test the tree instead (for example with tox or nox)"
            )
    return notes
