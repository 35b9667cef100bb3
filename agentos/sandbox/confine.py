"""The policies of a run: one for each agent attempt, one for each gate check.

An agent sees the system read-only, its worktree, its own run files and its log read-write,
its package and the repository's git directory read-only, and nothing of the workspace, the
main working tree or the user's home but what its package names. A check sees the tree it
judges read-only (unless it ``writes``), nothing of the workspace or the home, and no
network.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from agentos.sandbox.limits import Group, Resolved
from agentos.sandbox.policy import Policy, inside_any, policy, runtime_paths, tool_root
from agentos.sandbox.settings import Limits, PackageSandbox, SandboxSettings

if TYPE_CHECKING:
    from agentos.sandbox import Sandbox
    from agentos.shared.process import Outcome

# Set inside every sandbox AgentOS starts: a gate hook run by a confined agent does not
# try to confine its checks again (namespaces do not nest here).
INSIDE = "AGENTOS_SANDBOX"

# Where the usual tools keep their caches, moved out of the read-only tree a check judges
# into the check's private /tmp (a cache is not a change to the work).
CHECK_CACHES = {
    "PYTHONDONTWRITEBYTECODE": "1",  # (the worktree's own .pyc were removed before the gate)
    "RUFF_CACHE_DIR": "/tmp/agentos-cache/ruff",
    "MYPY_CACHE_DIR": "/tmp/agentos-cache/mypy",
    "COVERAGE_FILE": "/tmp/agentos-cache/coverage",
    "PYTEST_ADDOPTS": "-o cache_dir=/tmp/agentos-cache/pytest",
    "XDG_CACHE_HOME": "/tmp/agentos-cache/xdg",
}


def git_dirs(tree: Path) -> tuple[Path | None, Path | None]:
    """(the common git directory, the tree's own git directory) of a work tree, read from
    git's own files (``.git`` and ``commondir``) rather than by starting git."""
    dot = tree / ".git"
    if dot.is_dir():
        return dot, dot
    try:
        text = dot.read_text(encoding="utf-8").strip()
    except OSError:
        return None, None
    if not text.startswith("gitdir:"):
        return None, None
    own = (tree / text.removeprefix("gitdir:").strip()).resolve()
    try:
        common = (own / (own / "commondir").read_text(encoding="utf-8").strip()).resolve()
    except OSError:
        common = own
    return common, own


def venv_paths(venv: Path | None, python: Path | None) -> list[Path]:
    """A project environment, exactly: the venv's own directory (never its parent, which
    is most often the checkout itself), the directory its interpreter really lives in, and
    the base installation its ``pyvenv.cfg`` names (a prefix such as
    ``~/.pyenv/versions/3.11.7``, never the home above it)."""
    found: list[Path] = []
    venvs = [venv] if venv is not None else []
    if python is not None:
        found += [python, python.resolve().parent]
        found += _prefix(python.resolve().parent)
        if (python.parent.parent / "pyvenv.cfg").is_file():
            venvs.append(python.parent.parent)
    for env in venvs:
        found += [env, env.resolve()]
        try:
            lines = (env / "pyvenv.cfg").read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError):
            continue
        for line in lines:
            key, _, value = line.partition("=")
            if key.strip() == "home" and value.strip():
                home = Path(value.strip())
                found += [home, *_prefix(home)]
    return list(dict.fromkeys(found))


def _prefix(bin_dir: Path) -> list[Path]:
    """The installation a ``bin`` directory belongs to (its parent), unless that is the
    user's home or the root."""
    return tool_root(bin_dir, Path.home())


@dataclass(frozen=True)
class Scene:
    """Where a run's processes live: what to hide, and what of it to show again."""

    settings: SandboxSettings
    workspace: Path
    repo: Path  # the main checkout
    home: Path  # the user's real home (HOME)
    extra_reads: tuple[Path, ...] = ()  # the repository's environment and the like
    also_hidden: tuple[Path, ...] = ()  # e.g. an eval suite's folder: its expected answers

    def hidden(self) -> list[Path]:
        return [self.workspace, self.repo, *self.also_hidden]

    @property
    def reads(self) -> tuple[Path, ...]:
        """What every process of the run may read besides: the repository's environment
        and the workspace's ``sandbox.read``. Of the environment, never what holds the
        checkout or the workspace, nor a part of the checkout but a venv in it."""
        hidden = [self.workspace, self.repo]
        kept = [
            p
            for p in self.extra_reads
            if not any(h.is_relative_to(p) or h.is_relative_to(p.resolve()) for h in hidden)
            and (not inside_any(p, [self.repo]) or _in_venv(p, self.repo))
        ]
        listed = (Path(p).expanduser() for p in self.settings.read)
        return (*kept, *listed)


def _in_venv(path: Path, repo: Path) -> bool:
    """Whether ``path`` is a virtual environment inside ``repo``, or inside one."""
    for p in (path, *path.parents):
        if p == repo:
            return False
        if (p / "pyvenv.cfg").is_file():
            return True
    return False


def agent_policy(
    scene: Scene,
    *,
    package: PackageSandbox | None,
    package_dir: Path,
    worktree: Path,
    own_files: list[Path],
    path_env: str,
    persistent_home: Path | None,
    run_files: Path | None = None,
) -> Policy:
    """``own_files`` are writable; ``run_files`` (its wrapper, env file, launcher: AgentOS's)
    are visible read-only."""
    common, _ = git_dirs(worktree)
    pkg = package or PackageSandbox()
    return policy(
        settings=scene.settings,
        package=pkg,
        hidden=scene.hidden(),
        # The worktree's git admin directory stays read-only (inside the common one): its
        # HEAD names the branch AgentOS commits to.
        writable=[worktree, *own_files],
        readable=[
            package_dir,
            *([run_files] if run_files else []),
            *([common] if common else []),
            *runtime_paths(path_env, scene.home, scene.reads),
        ],
        home=scene.home,
        home_dir=persistent_home if pkg.home == "persistent" else None,
        cwd=worktree,
    )


def watch_writes(group: Group, policy: Policy, *, confined: bool) -> None:
    """The agent's disk quota, kept by ``group``: all it writes together, its paths on
    disk and (in a sandbox) its /tmp and empty home, which are tmpfs."""
    if not policy.limits.disk:
        return
    on_disk = [*policy.writable, *([policy.home_dir] if policy.home_dir else [])]
    tmpfs = ["/tmp"] if policy.home_dir is not None else ["/tmp", str(policy.home)]
    group.watch_disk(on_disk, policy.limits.disk, tmpfs if confined else [])


class CheckConfiner:
    """Confines each shell check of a gate: the tree read-only (writable for a check that
    ``writes``), no network (unless the check needs it), its own control group."""

    def __init__(self, sandbox: Sandbox, scene: Scene, tree: Path, path_env: str) -> None:
        self.sandbox, self.scene, self.tree = sandbox, scene, tree
        common, _ = git_dirs(tree)
        self.readable = [
            tree,
            *([common] if common else []),
            *runtime_paths(path_env, scene.home, scene.reads),
        ]

    def for_tree(self, tree: Path) -> CheckConfiner:
        """The same confinement for another tree (a scratch tree the gate made): that tree
        and its git directory in place of this one's, the same runtime paths."""
        other = CheckConfiner.__new__(CheckConfiner)
        other.sandbox, other.scene, other.tree = self.sandbox, self.scene, tree
        common, _ = git_dirs(tree)
        rest = [p for p in self.readable if p != self.tree]
        other.readable = [tree, *([common] if common and common not in rest else []), *rest]
        return other

    def prepare(
        self,
        cwd: Path,
        *,
        writes: bool,
        network: bool = False,
        limits: Limits | None = None,
        also_writable: Sequence[Path] = (),
    ) -> tuple[Callable[[list[str]], list[str]], Group]:
        """The confined command line for one check in ``cwd``; ``also_writable`` are
        AgentOS's own directories a check writes (the gate's records)."""
        pol = policy(
            settings=self.scene.settings,
            package=PackageSandbox(network=network),
            hidden=self.scene.hidden(),
            writable=[*([self.tree] if writes else []), *also_writable],
            readable=self.readable,
            home=self.scene.home,
            home_dir=None,
            cwd=cwd,
            limits=limits,
        )
        pol.extra_env[INSIDE] = self.sandbox.backend
        if not writes:
            pol.extra_env.update(CHECK_CACHES)
        group = Group(pol.limits)
        return (lambda argv: self.sandbox.command(pol, argv, group)), group

    def run(
        self, command: str, env: Mapping[str, str], timeout: float, *, cwd: Path | None = None
    ) -> Outcome:
        """``command`` in ``cwd`` (the tree by default), confined with the tree read-only,
        its control group closed when it ends."""
        from agentos.shared.process import run_shell

        where = cwd or self.tree
        wrap, group = self.prepare(where, writes=False)
        try:
            return run_shell(command, where, dict(env), timeout, wrap)
        finally:
            group.close()


def python_check_env() -> dict[str, str]:
    """The environment of a check that runs AgentOS's own interpreter on code an agent
    wrote (an entry's import, a tool's tests): nothing of the caller's, no bytecode
    written, a home of /tmp (private in the sandbox)."""
    return {
        "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "HOME": "/tmp",
        "PYTHONDONTWRITEBYTECODE": "1",
    }


__all__ = [
    "INSIDE",
    "CheckConfiner",
    "Resolved",
    "Scene",
    "agent_policy",
    "python_check_env",
    "venv_paths",
    "watch_writes",
]
