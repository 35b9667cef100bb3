"""Where an MCP client may point the server: the workspace and the allowed repositories.

The rule. A path a client passes (``kb_add`` paths, the ``run_task`` repository, a local
``hub_install`` source) is accepted only when, once made absolute and resolved (``~``
expanded, ``..`` collapsed, every symbolic link followed), it is the workspace root or
lies below it, or is an allowed repository root or lies below one. The allowed
repositories are those given to ``agentos mcp serve --repo DIR`` (repeatable) and those
listed in ``AGENTOS_MCP_ROOTS`` (separated by ``os.pathsep``). A relative path is taken
relative to the first allowed repository, or to the workspace when there is none.

So ``/etc/passwd``, ``../../etc`` and a symbolic link inside the repository that points
out of it are all refused, with a one-line error naming the argument; so is a path the
file system could not take (4,096 bytes or more, or a name longer than 255). Inside the
roots, ``.agentos/`` (AgentOS's state: run directories hold each agent's environment file,
with its secrets, and the MCP token) and ``.git/`` stay closed too.

Git sources for ``hub_install`` are URLs, not paths: ``https://``, ``http://``, ``ssh://``,
``git://`` and ``user@host:path`` are passed on; a ``file://`` URL is a path and must pass
the rule above; any other scheme (``ext::``, ``fd::``) is refused.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from urllib.parse import unquote, urlsplit

from agentos.errors import BadInput

ROOTS_ENV = "AGENTOS_MCP_ROOTS"
REMOTE_SCHEMES = ("https", "http", "ssh", "git")
PATH_MAX = 4096  # bytes in a path, Linux's PATH_MAX
NAME_MAX = 255  # bytes in one name
# Directories below a root that stay closed: AgentOS's state (agents' env files hold their
# secrets) and git's internals (remote URLs may carry credentials).
PRIVATE = frozenset({".agentos", ".git"})


def roots_from_env(env: Mapping[str, str] | None = None) -> list[Path]:
    """The repository roots listed in ``AGENTOS_MCP_ROOTS``."""
    value = (os.environ if env is None else env).get(ROOTS_ENV, "")
    return [Path(p) for p in value.split(os.pathsep) if p.strip()]


class Confinement:
    """The workspace and the allowed repository roots, resolved once."""

    def __init__(self, workspace: Path, repos: Sequence[Path] = ()) -> None:
        self.workspace = Path(os.path.realpath(workspace))
        found: list[Path] = []
        for repo in repos:
            real = Path(os.path.realpath(Path(repo).expanduser()))
            if not real.is_dir():
                raise BadInput("is not a directory", file=repo, field="--repo")
            if real not in found:
                found.append(real)
        self.repos = found

    @property
    def roots(self) -> list[Path]:
        return [self.workspace, *(r for r in self.repos if r != self.workspace)]

    @property
    def base(self) -> Path:
        """What a relative path is relative to."""
        return self.repos[0] if self.repos else self.workspace

    @property
    def default_repo(self) -> Path | None:
        return self.repos[0] if self.repos else None

    def path(self, raw: str, field: str) -> Path:
        """``raw`` resolved, or :class:`BadInput` when it leaves the allowed roots."""
        if not raw or not raw.strip():
            raise BadInput("is empty: give a path", field=field)
        if "\x00" in raw:
            raise BadInput("contains a NUL byte", field=field)
        given = Path(_fit(raw, field)).expanduser()
        real = Path(os.path.realpath(given if given.is_absolute() else self.base / given))
        if len(os.fsencode(real)) >= PATH_MAX:
            raise BadInput(
                f"{raw} is too long once resolved ({len(os.fsencode(real)):,} bytes; "
                f"the limit is {PATH_MAX - 1:,})",
                field=field,
            )
        for root in self.roots:
            if real == root or real.is_relative_to(root):
                hidden = [p for p in real.relative_to(root).parts if p in PRIVATE]
                if hidden:
                    raise BadInput(
                        f"{raw} is inside {hidden[0]}/, which MCP clients may not "
                        "read (state, agents' secrets, git internals)",
                        field=field,
                    )
                return real
        allowed = ", ".join(str(r) for r in self.roots)
        raise BadInput(
            f"{raw} is outside the workspace and the allowed repositories "
            f"({allowed}); allow another with `agentos mcp serve --repo DIR` or "
            f"{ROOTS_ENV}",
            field=field,
        )

    def hub_source(self, source: str, field: str = "source") -> str:
        """A ``hub_install`` source the server may use: a remote git URL as given, a local
        path (or ``file://`` URL) confined like any other path."""
        text = source.strip()
        if not text:
            raise BadInput(
                "is empty: give a package directory, a .tar.gz or a git URL", field=field
            )
        _fit(text, field)  # the hub looks for a local path by that name first, even for a URL
        bare = text.removeprefix("git+")
        if "::" in bare.split("/", 1)[0]:
            raise BadInput(f"git transport {bare.split('::', 1)[0]!r} is not allowed", field=field)
        parts = urlsplit(bare)
        if parts.scheme == "file":
            local, at, ref = unquote(parts.path).rpartition("@")
            path = self.path(local if at else unquote(parts.path), field)
            return f"file://{path}" + (f"@{ref}" if at else "")
        if "://" in bare:
            if parts.scheme not in REMOTE_SCHEMES:
                raise BadInput(
                    f"URL scheme {parts.scheme!r} is not allowed (use "
                    f"{', '.join(REMOTE_SCHEMES)} or a local path)",
                    field=field,
                )
            return text
        if _scp_like(bare) and not os.path.exists(bare):  # False for any OSError too
            return text
        return str(self.path(text, field))


def _fit(raw: str, field: str) -> str:
    """``raw`` when the file system can take it as a path, else :class:`BadInput` saying
    which limit it passes (without repeating a path too long to read)."""
    try:
        size = len(os.fsencode(raw))
    except UnicodeEncodeError:
        raise BadInput("is not valid text (a lone surrogate)", field=field) from None
    if size >= PATH_MAX:
        raise BadInput(
            f"is too long for a path ({size:,} bytes; the limit is {PATH_MAX - 1:,})", field=field
        )
    for name in Path(raw).parts:
        if len(os.fsencode(name)) > NAME_MAX:
            raise BadInput(
                f"has a name of {len(os.fsencode(name)):,} bytes ({name[:40]}...); "
                f"the limit is {NAME_MAX}",
                field=field,
            )
    return raw


def _scp_like(text: str) -> bool:
    """``user@host:path``, the scp-like syntax git takes for ssh."""
    head, colon, _ = text.partition(":")
    return bool(colon) and "@" in head and "/" not in head
