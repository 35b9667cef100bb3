"""How a repository is tested: its own test command, in its own environment, on the right tree.

Per repository, found before anything runs and shown by ``agentos repo show``:

1. ``repos:`` in the workspace's ``agentos.yaml`` (a path -> :class:`RepoSettings`) wins;
2. then a ``.agentos.yaml`` committed in the repository, with the same fields. An agent can
   edit files in its worktree, so this file is read from the repository *at a commit*
   (``git show <commit>:.agentos.yaml``), never from a worktree;
3. what neither sets is detected (:mod:`agentos.gate.detect`): a ``.venv``/``venv``, uv,
   Poetry, Hatch or PDM's environment; then pytest in it, tox, nox, a Makefile ``test``
   target, or plain pytest. The profile says which was chosen and why.

In an agent's worktree the tests must import the worktree's code even when the environment
holds an editable install of the main checkout: :meth:`RepoProfile.environment` puts the
import shim (``agentos/gate/site/sitecustomize.py``) first on ``PYTHONPATH`` and maps the main
checkout to the worktree. Files the main checkout built and git ignores (compiled
extensions, generated version modules, compiled translations) are copied into the worktree
by :func:`prepare_worktree`, which says so.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from agentos.errors import BadInput, NotFound, ValidationFailed
from agentos.gate.detect import SETTINGS_HINT, detect, pytest_command, python3_problems
from agentos.gate.prepare import IgnoredFiles, copy_built_files, editable_notes
from agentos.workspace.layout import Workspace
from agentos.workspace.settings import RepoSettings

if TYPE_CHECKING:
    from agentos.shared.process import Outcome

REPO_FILE = ".agentos.yaml"
DEFAULT_TIMEOUT = 900.0  # seconds for the test check when nothing sets one
COLLECT_TIMEOUT = 300.0  # at most this long for check_profile's collection
SITE_DIR = Path(__file__).resolve().parent / "site"
SITE_MAP_VARIABLE = "AGENTOS_SITE_MAP"  # read by site/sitecustomize.py

_RUNNERS_TAKING_ARGS = ("pytest", "tox", "nox")


@dataclass(frozen=True)
class RepoProfile:
    """How one repository is tested. ``test`` is a shell command run with cwd = the tree."""

    repo: Path
    source: str  # "agentos.yaml" | ".agentos.yaml" | "detected"
    tool: str  # venv|uv|poetry|hatch|pdm|tox|nox|make|pytest|custom
    test: str
    python: Path | None
    venv: Path | None
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    timeout: float = DEFAULT_TIMEOUT
    reasons: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()  # found while detecting: a missing tool, an absent env
    runner: str = "pytest"  # pytest|tox|nox|make|custom: how test paths reach the suite
    settings_file: str | None = None  # the file the explicit settings came from
    unasked: bool = False  # plain python3 not asked yet whether it has pytest: see asked()

    @property
    def takes_args(self) -> bool:
        """Whether :meth:`test_command` can run only some tests (make and custom: no)."""
        return self.runner in _RUNNERS_TAKING_ARGS or "{args}" in self.test

    def test_command(self, args: Sequence[str] = ()) -> str:
        """The shell command that runs the whole suite, or only ``args`` (test paths or node
        ids) where the runner takes them: appended for pytest, after ``--`` for tox and nox,
        in place of ``{args}`` in a custom command. ``make test`` and other custom commands
        always run the whole suite."""
        quoted = shlex.join(args)
        if "{args}" in self.test:
            return self.test.replace("{args}", quoted)
        if not args or not self.takes_args:
            return self.test
        if self.runner in ("tox", "nox"):
            return f"{self.test} -- {quoted}"
        return f"{self.test} {quoted}"

    def collect_command(self) -> str | None:
        """A cheap command that proves the suite can start: pytest collects without running;
        tox and nox list their environments; make prints what ``make test`` would do."""
        if self.runner == "pytest":
            return f"{self.test_command()} --collect-only"
        return {"tox": "tox -l", "nox": "nox -l", "make": "make -n test"}.get(self.runner)

    def environment(self, base: Mapping[str, str], worktree: Path | None = None) -> dict[str, str]:
        """``base`` with the interpreter's bin directory first on PATH, ``VIRTUAL_ENV``, the
        profile's variables and, in a worktree of the repository, the import shim that makes
        Python import the worktree's code rather than the main checkout's."""
        env = dict(base)
        if self.python is not None:
            bindir = str(self.python.parent)
            rest = [p for p in env.get("PATH", os.defpath).split(os.pathsep) if p != bindir]
            env["PATH"] = os.pathsep.join([bindir, *rest])
        if self.venv is not None:
            env["VIRTUAL_ENV"] = str(self.venv)
            env.pop("PYTHONHOME", None)
        env.update(self.env)
        if worktree is not None and worktree.resolve() != self.repo:
            paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
            env["PYTHONPATH"] = os.pathsep.join(
                [str(SITE_DIR), *(p for p in paths if p != str(SITE_DIR))]
            )
            env[SITE_MAP_VARIABLE] = json.dumps(
                {**_site_map(env), str(self.repo): str(worktree.resolve())}
            )
        return env

    def as_dict(self) -> dict[str, Any]:
        return {
            "repo": str(self.repo),
            "source": self.source,
            "settings_file": self.settings_file,
            "tool": self.tool,
            "runner": self.runner,
            "test": self.test,
            "takes_args": self.takes_args,
            "collect": self.collect_command(),
            "python": None if self.python is None else str(self.python),
            "venv": None if self.venv is None else str(self.venv),
            "env": dict(self.env),
            "timeout": self.timeout,
            "reasons": list(self.reasons),
            "problems": list(self.problems),
        }


def _site_map(env: Mapping[str, str]) -> dict[str, str]:
    try:
        mapping = json.loads(env.get(SITE_MAP_VARIABLE) or "{}")
    except json.JSONDecodeError:
        return {}
    return {str(k): str(v) for k, v in mapping.items()} if isinstance(mapping, dict) else {}


# --- explicit settings --------------------------------------------------------------------


def _workspace_settings(ws: Workspace, repo: Path) -> RepoSettings | None:
    for key, settings in ws.settings.repos.items():
        path = Path(key).expanduser()
        if (path if path.is_absolute() else ws.root / path).resolve() == repo:
            return settings
    return None


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    if shutil.which("git") is None:
        raise BadInput("git is needed to read .agentos.yaml at a commit and is not on PATH")
    return subprocess.run(
        ["git", "-C", str(repo), *args],
        capture_output=True,
        text=True,
        errors="surrogateescape",  # file contents need not be UTF-8; decoded where used
        stdin=subprocess.DEVNULL,
        env={k: v for k, v in os.environ.items() if not k.startswith("GIT_")},
    )


_FULL_SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


def _repo_file_text(repo: Path, at: str | None) -> tuple[str, str] | None:
    """(text, name for errors) of the repository's .agentos.yaml: at commit ``at`` when
    given, else the main checkout's working-tree file. None when there is none."""
    if at is None:
        path = repo / REPO_FILE
        if not path.is_file():
            return None
        try:
            return path.read_text(encoding="utf-8"), str(path)
        except (OSError, UnicodeDecodeError) as exc:
            raise ValidationFailed(f"cannot read: {exc}", file=path) from None
    if _FULL_SHA.fullmatch(at):  # a commit's full name (a run's base): one git process
        sha = at
        listed = _git(repo, "ls-tree", f"{sha}^{{commit}}", "--", REPO_FILE)
        if listed.returncode != 0:
            raise NotFound(f"no commit {at!r} in {repo}", field="at")
    else:
        commit = _git(repo, "rev-parse", "--verify", "--quiet", f"{at}^{{commit}}")
        if commit.returncode != 0:
            raise NotFound(f"no commit {at!r} in {repo}", field="at")
        sha = commit.stdout.strip()
        listed = _git(repo, "ls-tree", sha, "--", REPO_FILE)
    name = f"{repo / REPO_FILE}@{sha[:12]}"
    if not listed.stdout.strip():
        return None
    blob = _git(repo, "show", f"{sha}:{REPO_FILE}")
    if blob.returncode != 0:
        raise ValidationFailed(f"cannot read: {blob.stderr.strip()}", file=name)
    try:
        blob.stdout.encode("utf-8")
    except UnicodeEncodeError:  # a byte that is not UTF-8, kept as a lone surrogate
        raise ValidationFailed("cannot read: the file is not UTF-8 text", file=name) from None
    return blob.stdout, name


def _repo_file_settings(repo: Path, at: str | None) -> tuple[RepoSettings, str] | None:
    from agentos.shared.models import validate
    from agentos.shared.yaml import parse_yaml

    found = _repo_file_text(repo, at)
    if found is None:
        return None
    text, name = found
    return validate(RepoSettings, parse_yaml(text, name), file=name), name


def _interpreter(value: str, repo: Path) -> Path:
    path = Path(value).expanduser()
    return path if path.is_absolute() else repo / path


# --- the profile --------------------------------------------------------------------------


def repo_profile(
    ws: Workspace, repo: Path, *, at: str | None = None, ask: bool = True
) -> RepoProfile:
    """How ``repo`` (its main checkout) is tested: explicit settings field by field
    (agentos.yaml ``repos:``, then ``.agentos.yaml`` at commit ``at``, or the working-tree
    file when no commit is given), the rest detected. Bad settings raise
    :class:`ValidationFailed` naming the file and field.

    Without ``ask``, a repository tested with plain ``python3`` on PATH is profiled without
    starting it (its answer changes a problem, never the command): the profile is then
    ``unasked``, and :func:`asked` completes it (a run asks beside its other steps)."""
    repo = Path(repo).expanduser().resolve()
    if not repo.is_dir():
        raise NotFound(f"{repo} is not a directory", field="repo")
    layers: list[tuple[RepoSettings, str, str]] = []  # (settings, source, file), strongest first
    explicit = _workspace_settings(ws, repo)
    if explicit is not None:
        layers.append((explicit, "agentos.yaml", f"{ws.settings_file}: repos: {repo}"))
    committed = _repo_file_settings(repo, at)
    if committed is not None:
        layers.append((committed[0], REPO_FILE, committed[1]))

    def pick(name: str) -> tuple[Any, str | None]:
        for settings, _, where in layers:
            if name in settings.model_fields_set:
                return getattr(settings, name), where
        return None, None

    reasons: list[str] = []
    python_value, python_from = pick("python")
    python = _interpreter(python_value, repo) if python_value else None
    if python is not None:
        reasons.append(f"python from {python_from}: {python}")
    found = detect(repo, os.environ, python, ws.state_dir / "cache", ask=ask)
    test, test_from = pick("test")
    own_test = bool(test)  # a test command of the settings' own (a blank one is none)
    tool, runner, problems = found.tool, found.runner, list(found.problems)
    if test:
        reasons.append(f"test command from {test_from}")
        tool, runner = "custom", _custom_runner(test)
        problems = [p for p in problems if "pytest is not installed" not in p]
    else:
        test = found.test
    if python is not None and not os.access(python, os.X_OK):
        # What the settings name is what runs: never quietly another environment.
        create = "create that environment"
        if python.parent.name == "bin":
            venv_dir = python.parent.parent
            shown = venv_dir.relative_to(repo) if venv_dir.is_relative_to(repo) else venv_dir
            create += (
                f" (python3 -m venv {shown}, then install the project and its test dependencies)"
            )
        problems = [
            f"the interpreter {python} (`python:` in {python_from}) does not exist: {create}, "
            "or fix `python:` there"
        ]
        if not test_from:
            tool, runner, test = "custom", "pytest", pytest_command(python)
    timeout, timeout_from = pick("timeout")
    if timeout_from:
        reasons.append(f"timeout from {timeout_from}")
    reasons.extend(found.reasons)
    env: dict[str, str] = {}
    for settings, _, _ in reversed(layers):
        env.update(settings.env)
    source = next((src for settings, src, _ in layers if settings.model_fields_set), "detected")
    settings_file = next(
        (where for settings, _, where in layers if settings.model_fields_set), None
    )
    return RepoProfile(
        repo=repo,
        source=source,
        tool=tool,
        test=test,
        python=python if python is not None else found.python,
        venv=found.venv,
        env=MappingProxyType(env),
        timeout=float(timeout) if timeout else DEFAULT_TIMEOUT,
        reasons=tuple(reasons),
        problems=tuple(problems),
        runner=runner,
        settings_file=settings_file,
        unasked=found.unasked and not own_test,  # its own command: nothing to ask
    )


def asked(profile: RepoProfile, ws: Workspace | None = None) -> RepoProfile:
    """``profile`` complete: an ``unasked`` one with what plain ``python3`` answers (the
    problem :func:`repo_profile` would have found; its answer kept in ``ws``'s cache where
    it can be); any other as it is. :func:`check_profile` asks for itself."""
    if not profile.unasked or profile.python is None:
        return profile
    cache = ws.state_dir / "cache" if ws is not None else None
    found = python3_problems(str(profile.python), cache)
    return replace(profile, problems=(*profile.problems, *found), unasked=False)


def _custom_runner(test: str) -> str:
    try:
        words = shlex.split(test)
    except ValueError:
        return "custom"
    if words and Path(words[0]).name in ("tox", "nox"):
        return Path(words[0]).name
    if any(Path(w).name in ("pytest", "py.test") for w in words) and "&&" not in words:
        return "pytest"
    return "custom"


# --- checking it --------------------------------------------------------------------------


def _last_error(output: str) -> str:
    """The most telling line of a failed command's output, for a one-line problem."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("E ")]
    chosen = (errors or lines or ["(no output)"])[-1]
    chosen = " ".join(chosen.removeprefix("E ").split())
    return chosen if len(chosen) <= 200 else chosen[:197] + "..."


def check_profile(
    profile: RepoProfile, tree: Path | None = None, *, collect: bool = True
) -> list[str]:
    """What stops the repository's tests from running, one line per problem naming the fix:
    a missing tool or environment, a missing interpreter, a test program not found, a suite
    that does not collect (in ``tree``, default the repository; not with ``collect=False``,
    when the caller collects itself). Empty when all is well. Nothing is written into the
    tree (no bytecode, no pytest cache).

    These are the environment's problems, for the person to fix, not an agent's failure."""
    from agentos.shared.process import run_shell

    problems = list(asked(profile).problems)  # an unasked python3 is asked here
    missing = profile.python is not None and not os.access(profile.python, os.X_OK)
    if missing and not any(str(profile.python) in p for p in problems):
        problems.append(
            f"the interpreter {profile.python} does not exist: create the environment "
            f"(python3 -m venv {profile.venv or '.venv'}, then install the project and its "
            f"test dependencies), or {SETTINGS_HINT}"
        )
    if problems:
        return problems
    from agentos.gate.environment import gate_environment

    # The environment the gate's checks get, so that what passes here passes there.
    env = gate_environment(profile, tree or profile.repo)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    try:
        program = shlex.split(profile.test)[0]
    except (ValueError, IndexError):
        return [f"the test command `{profile.test}` is not a valid shell command: {SETTINGS_HINT}"]
    where = tree or profile.repo
    if not _findable(program, env.get("PATH")):
        return [
            f"`{program}` (the test command's program) is not found on PATH: install it, "
            f"or {SETTINGS_HINT}"
        ]
    collect_command = profile.collect_command()
    if collect_command is None or not collect:
        return []
    # Nothing written into the tree: no bytecode (above), no pytest cache.
    command = collect_command + (" -p no:cacheprovider" if profile.runner == "pytest" else "")
    outcome = run_shell(command, where, env, min(profile.timeout, COLLECT_TIMEOUT))
    return collection_problems(profile, outcome, where, collect_command)


def collection_problems(
    profile: RepoProfile, outcome: Outcome, where: Path, collect: str
) -> list[str]:
    """What a failed collection (``collect`` run in ``where``) says is wrong, one line each
    naming the fix; empty when it passed."""
    if outcome.passed:
        return []
    if outcome.timed_out:
        limit = min(profile.timeout, COLLECT_TIMEOUT)
        return [f"`{collect}` did not finish within {limit:g}s in {where}"]
    if profile.runner == "pytest" and outcome.exit_code == 5:
        return [f"the suite collects no tests (`{collect}` in {where}): {SETTINGS_HINT}"]
    if outcome.exit_code in (126, 127):
        return [
            f"the test command cannot start (exit {outcome.exit_code}: "
            f"{_last_error(outcome.tail)}): install what it needs, or {SETTINGS_HINT}"
        ]
    error = _last_error(outcome.tail)
    broken = _uncollectable(outcome.tail)
    if broken and not _MISSING_MODULE.search(outcome.tail):
        return [
            f"the suite does not collect as the repository is now, before any agent worked on "
            f"it (`{collect}` exit {outcome.exit_code} in {where}): {', '.join(broken)}: "
            f"{error}: fix {'them' if len(broken) > 1 else 'it'} first"
        ]
    return [
        f"the suite does not collect (`{collect}` exit {outcome.exit_code} in {where}"
        f"{': ' + ', '.join(broken) if broken else ''}: {error}): install the test "
        f"dependencies into {profile.venv or 'its environment'}, or {SETTINGS_HINT}"
    ]


_MISSING_MODULE = re.compile(r"\b(?:ModuleNotFoundError|ImportError)\b")
_COLLECT_ERROR = re.compile(r"^(?:_+ )?ERROR(?: collecting)? (\S+?)(?: - .*| _+)?$", re.MULTILINE)


def _uncollectable(output: str) -> list[str]:
    """The files pytest names in its collection errors (``ERROR collecting tests/x.py``)."""
    return list(dict.fromkeys(m.group(1) for m in _COLLECT_ERROR.finditer(output)))


def _findable(program: str, path: str | None) -> bool:
    """Whether the shell can start ``program``: a path, a variable assignment, a bash
    builtin or keyword (``cd``, ``source``, ``if``), or a program on ``path``."""
    if "/" in program or "=" in program or shutil.which(program, path=path) is not None:
        return True
    bash = shutil.which("bash")
    if bash is None:
        return False
    out = subprocess.run(
        [bash, "-c", f"type -t {shlex.quote(program)}"], capture_output=True, text=True
    )
    return out.stdout.strip() in ("builtin", "keyword")


# --- the worktree -------------------------------------------------------------------------


def prepare_worktree(
    profile: RepoProfile, worktree: Path, ignored: IgnoredFiles | None = None
) -> list[str]:
    """Ready ``worktree`` to be tested like the main checkout; return notes for the person.

    Files the main checkout built and git ignores, inside its Python packages, are copied
    to the same place in the worktree when it has none: compiled extensions (``*.so``,
    ``*.pyd``; built from the main checkout's sources, which the notes say), generated
    version modules, compiled translations. Editable installs that the import shim cannot
    redirect are named too. ``ignored``: the run's listing of the main checkout's ignored
    files (listed now without one)."""
    notes = copy_built_files(profile.repo, worktree.resolve(), profile.venv, ignored)
    notes += editable_notes(profile.repo, profile.venv)
    return notes


def python_version(python: Path | None) -> str | None:
    """``Python 3.12.1`` for an interpreter, None when it does not run."""
    if python is None:
        return None
    try:
        out = subprocess.run([str(python), "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = (out.stdout or out.stderr).strip()
    return text if out.returncode == 0 and text else None


def repo_root(path: Path) -> Path:
    """The top of the git working tree holding ``path`` (``path`` itself outside git)."""
    path = Path(path).expanduser().resolve()
    if not path.is_dir():
        raise NotFound(f"{path} is not a directory", field="--repo")
    out = _git(path, "rev-parse", "--show-toplevel")
    top = out.stdout.strip()
    return Path(top).resolve() if out.returncode == 0 and top else path


def tree_profile(ws: Workspace, tree: Path) -> RepoProfile:
    """The repository profile that checks in ``tree`` use: that of the repository ``tree``
    belongs to (for an agent's worktree, its main repository, so that the worktree's code
    is imported and not the main checkout's)."""
    from agentos.worktrees.repo import common_repo

    return repo_profile(ws, common_repo(tree) or tree)
