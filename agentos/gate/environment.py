"""What the gate's checks run with: the environment (the repository's interpreter first on
PATH, nothing else leaking in), the programs they need, their timeouts, and the sandbox they
run in.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from agentos.shared.checks import CheckSpec
from agentos.workspace.layout import Workspace

if TYPE_CHECKING:
    from agentos.gate.repo import RepoProfile
    from agentos.sandbox.confine import CheckConfiner


DEFAULT_LANG = "C.UTF-8"


# --- running -------------------------------------------------------------------------------


def check_env(env: Mapping[str, str] | None) -> dict[str, str]:
    """The environment of a shell check: ``env`` only, plus PATH, HOME and LANG defaults.

    PATH and HOME default to this process's (tools such as ruff or pytest must be found),
    and PATH always ends with the directory of AgentOS's own interpreter, as an agent's
    does, so that the tools installed with AgentOS (ruff) are found whether or not its
    virtual environment is activated. LANG defaults to C.UTF-8. Nothing else leaks in.
    """
    out = dict(env or {})
    out.setdefault("PATH", os.environ.get("PATH", os.defpath))
    own = str(Path(sys.executable).parent)
    if own not in out["PATH"].split(os.pathsep):
        out["PATH"] = os.pathsep.join([out["PATH"], own])
    out.setdefault("HOME", os.environ.get("HOME", "/"))
    out.setdefault("LANG", DEFAULT_LANG)
    return out


def gate_environment(
    profile: RepoProfile | None, tree: Path, env: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment checks run with in ``tree``: :func:`check_env` of ``env``, then the
    repository's (its interpreter first on PATH, its variables, and in a worktree the
    import of the worktree's code rather than the main checkout's). ``agentos run`` and
    ``agentos gate run`` both use it, so one tree gets one result."""
    base = check_env(env)
    return base if profile is None else profile.environment(base, tree)


_PROGRAM = re.compile(r"[A-Za-z0-9_.+-]+")
_SHELL_WORDS = frozenset(
    "! . : [ [[ { alias builtin case cd command declare echo eval exec exit export false "
    "for function if kill let local printf pwd read return set shift source test time "
    "trap true type ulimit umask unset until wait while".split()
)


def check_program(check: CheckSpec) -> str | None:
    """The program a shell check runs, when it can be judged before it runs: a bare name
    (``ruff`` of ``ruff check .``); None for a path (``./run.sh``: it may be the work's
    own), a shell word or builtin, a compound command, or a check that is not ``run``."""
    if check.run is None:
        return None
    try:
        program = shlex.split(check.run)[0]
    except (ValueError, IndexError):
        return None
    if not _PROGRAM.fullmatch(program) or program in _SHELL_WORDS:
        return None
    return program


def missing_programs(checks: Sequence[CheckSpec], env: Mapping[str, str]) -> list[str]:
    """The shell checks whose program (:func:`check_program`) is not installed: one line
    each, naming the check, the program and the fix."""
    problems = []
    for check in checks:
        program = check_program(check)
        if program is not None and shutil.which(program, path=env.get("PATH")) is None:
            problems.append(
                f"`{program}` (check {check.name!r}) is not installed or not on PATH: "
                "install it, or change the check"
            )
    return problems


def tests_timeout(check: CheckSpec, profile: RepoProfile) -> float:
    """A ``tests`` check's timeout: its own when it sets one, else the repository's."""
    return check.timeout if "timeout" in check.model_fields_set else profile.timeout


def gate_confiner(
    ws: Workspace, tree: Path, profile: RepoProfile, env: Mapping[str, str]
) -> CheckConfiner | None:
    """The sandbox the checks of ``agentos gate run`` and the Stop hook run in, as a run's
    do; None inside a sandbox AgentOS started (a hook run by a confined agent: the agent's
    sandbox already holds it, and namespaces do not nest here)."""
    from agentos.sandbox import choose
    from agentos.sandbox.confine import INSIDE, CheckConfiner, Scene, venv_paths
    from agentos.worktrees.repo import common_repo

    if os.environ.get(INSIDE):
        return None
    scene = Scene(
        ws.settings.sandbox,
        ws.root,
        common_repo(tree) or tree,
        Path(os.environ.get("HOME", "/")),
        tuple(venv_paths(profile.venv, profile.python)),
    )
    return CheckConfiner(choose(ws.settings.sandbox), scene, tree, env.get("PATH", ""))
