"""What an agent could change in a repository's git administration, and put back.

Git obeys its repository's configuration and hooks: an agent that writes
``core.hooksPath``, a hook, a filter or diff driver, an alias, ``core.sshCommand`` or an
``include`` there would have AgentOS's own git commands, and the user's later ones, run
what it chose. In a sandbox the repository's git directory is read-only to the agent; with
``sandbox.backend: none`` it is not, so a run takes a :class:`GitGuard` of the repository
before its agents start and calls :meth:`GitGuard.restore` after each attempt and at its
end: what changed is put back and named, for the receipt. (AgentOS's own git commands
also run with hooks and the file-system monitor off, see :func:`agentos.worktrees.repo.git_result`.)

Watched: the repository's ``config`` (compared entry by entry; git's own
``extensions.worktreeConfig``, which sparse worktrees set, is not the agent's), its
``config.worktree``, ``info/attributes``, every file under ``hooks/``, the files its
``include`` entries name, the user's global configuration; and each agent worktree's
``config.worktree``. Links the user made are kept as links. Without a sandbox nothing tells
an agent's change from the user's own during the run: both are put back.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from agentos.errors import OperationFailed

# Keys git or AgentOS itself writes into a repository's configuration while a run goes on.
OWN_KEYS = frozenset({"extensions.worktreeconfig", "core.repositoryformatversion"})


def _entries(path: Path) -> list[tuple[str, str]] | None:
    """The configuration file's entries, in order (None: unreadable or not valid)."""
    if not path.is_file():
        return []
    result = subprocess.run(
        ["git", "config", "--file", str(path), "--list", "-z"],
        capture_output=True,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "GIT_CONFIG_NOSYSTEM": "1"},
        check=False,
    )
    if result.returncode != 0:
        return None
    out = []
    for item in result.stdout.decode("utf-8", "surrogateescape").split("\0"):
        if item:
            key, _, value = item.partition("\n")
            out.append((key, value))
    return out


def _foreign(entries: list[tuple[str, str]] | None) -> list[tuple[str, str]] | None:
    return None if entries is None else [e for e in entries if e[0] not in OWN_KEYS]


Snapshot = tuple[str, bytes, int]  # ("file", bytes, mode) or ("link", target, 0)


def _read(path: Path) -> Snapshot | None:
    """What ``path`` is: a regular file's bytes and mode, or a link's target; None when it
    is absent (or anything else)."""
    try:
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            return ("link", os.fsencode(os.readlink(path)), 0)
        if stat.S_ISREG(st.st_mode):
            return ("file", path.read_bytes(), stat.S_IMODE(st.st_mode))
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise OperationFailed(f"{path}: cannot read it ({exc.strerror})") from None
    return None


def _tree(directory: Path) -> dict[Path, Snapshot | None]:
    """Every entry under ``directory`` (followed when it is a link), as :func:`_read` sees it."""
    found: dict[Path, Snapshot | None] = {}
    if not directory.is_dir():
        return found
    for root, dirs, files in os.walk(directory):
        for name in files + [d for d in dirs if Path(root, d).is_symlink()]:
            found[Path(root, name)] = _read(Path(root, name))
    return found


def _put(path: Path, content: Snapshot | None) -> None:
    """Make ``path`` hold ``content`` again (None: remove whatever is there)."""
    try:
        if path.is_symlink() or path.is_file():
            path.unlink()
        elif path.is_dir():
            shutil.rmtree(path)
        if content is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            kind, data, mode = content
            if kind == "link":
                os.symlink(os.fsdecode(data), path)
            else:
                path.write_bytes(data)
                os.chmod(path, mode)
    except OSError as exc:
        raise OperationFailed(f"{path}: cannot put it back ({exc.strerror})") from None


@dataclass
class GitGuard:
    """A repository's git administration as it was before the agents ran."""

    git_dir: Path  # the common git directory
    config_path: Path  # its configuration, through a link the user made
    config: Snapshot | None
    entries: list[tuple[str, str]] | None
    files: dict[Path, Snapshot | None] = field(default_factory=dict)
    hooks: dict[Path, Snapshot | None] = field(default_factory=dict)

    @classmethod
    def take(cls, git_dir: Path) -> GitGuard:
        config_path = (git_dir / "config").resolve()
        entries = _foreign(_entries(config_path))
        guard = cls(
            git_dir, config_path, _read(config_path), entries, hooks=_tree(git_dir / "hooks")
        )
        home = Path(os.environ.get("HOME") or "/nonexistent")
        watched = [
            *([git_dir / "config"] if (git_dir / "config").is_symlink() else []),  # the link
            git_dir / "info" / "attributes",
            git_dir / "config.worktree",  # with extensions.worktreeConfig, read for the main tree
            home / ".gitconfig",
            home / ".config" / "git" / "config",
            *(
                (git_dir / Path(value).expanduser()).resolve()
                for key, value in entries or []
                if key == "include.path" or (key.startswith("includeif.") and key.endswith(".path"))
            ),
        ]
        for path in watched:
            guard.watch(path)
        return guard

    def watch(self, path: Path) -> None:
        """Watch one more file (an agent's ``config.worktree``) from its content now."""
        self.files.setdefault(path, _read(path))

    def restore(self) -> list[str]:
        """Put back what changed since :meth:`take`; name each change, e.g.
        ``.git/config: core.hookspath`` or ``.git/hooks/post-commit (added)``."""
        changed = self._restore_config()
        for path, before in self.files.items():
            if _read(path) != before or (before is None and os.path.lexists(path)):
                what = _what(before, path)
                _put(path, before)
                changed.append(f"{self._name(path)} ({what})")
        hooks = self.git_dir / "hooks"
        if os.path.lexists(hooks) and not hooks.is_dir():
            _put(hooks, None)
            changed.append(f"{self._name(hooks)} (replaced)")
        now = _tree(hooks)
        for path in sorted(set(now) | set(self.hooks)):
            before = self.hooks.get(path)
            if path not in now:
                _put(path, before)
                changed.append(f"{self._name(path)} (removed)")
            elif path not in self.hooks or now[path] != before:
                _put(path, before)
                changed.append(f"{self._name(path)} ({'changed' if before else 'added'})")
        return changed

    def _restore_config(self) -> list[str]:
        path = self.config_path
        now = _foreign(_entries(path))
        if now == self.entries:
            return []
        if now is None or self.entries is None:
            keys = ["the file"]
        else:
            keys = sorted({k for k, _ in now} ^ {k for k, _ in self.entries})
            keys += sorted(
                {k for k, _ in now if k not in keys and _values(now, k) != _values(self.entries, k)}
            )
        own = [(k, v) for k, v in (_entries(path) or []) if k in OWN_KEYS]
        _put(path, self.config)
        for key, value in own:  # keep what git wrote for the run's own worktrees
            subprocess.run(
                ["git", "config", "--file", str(path), key, value], capture_output=True, check=False
            )
        return [f"{self._name(path)}: {', '.join(keys)}"]

    def _name(self, path: Path) -> str:
        try:
            return f".git/{path.relative_to(self.git_dir)}"
        except ValueError:
            return str(path)


def _values(entries: list[tuple[str, str]], key: str) -> list[str]:
    return [v for k, v in entries if k == key]


def _what(before: Snapshot | None, path: Path) -> str:
    if before is None:
        return "added"
    return "changed" if os.path.lexists(path) else "removed"


def restore_git_admin(guard: GitGuard, repo_dir: Path) -> list[str]:
    """:meth:`GitGuard.restore`, holding the repository (see
    :func:`agentos.worktrees.repo.repo_lock`): runs on one repository take turns."""
    from agentos.worktrees.repo import repo_lock

    with repo_lock(repo_dir):
        return guard.restore()
