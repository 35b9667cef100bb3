"""Real projects from PyPI as git repositories with their own virtual environments.

For end-to-end tests of "the project's own tests, the worktree's own code" (issue 14). The
sdists and a wheelhouse come from ``scripts/fetch-test-projects`` (pinned, sha256-checked,
cached under ``~/.cache/agentos/pypi``); this module runs the script when the cache is
missing, so only the first run needs the network. Everything else is offline:
``pip install --no-index --find-links <wheelhouse> -e .[test extra]``.

A :class:`ProjectRepo` is the project's sdist committed as a git repository (branch
``main``), a ``.venv`` inside it (git-ignored, as a developer's is) holding an editable
install of that main checkout, and, by default, a seeded bug: one commit that breaks the
code *and* changes its test to agree, so the suite passes on ``main``. A right fix restores
both files (:meth:`ProjectRepo.right_fix`); a wrong fix restores only the code
(:meth:`ProjectRepo.wrong_fix`) and passes only when the tests import the main checkout's
code instead of the worktree's.

Use the ``project_repo`` fixture (import it into the test module)::

    from _projects import project_repo  # noqa: F401 -- a fixture

    def test_right_fix_passes(project_repo, ws, tmp_path):
        proj = project_repo("humanize")        # built once per session, reset after the test
        proj.repo, proj.python, proj.base       # main checkout, its interpreter, seeded commit
        tree = proj.add_worktree(tmp_path / "wt")
        proj.write(tree, proj.right_fix())     # or, as a scripted shell agent would:
        agent_script = proj.fix_script(proj.wrong_fix())  # run with cwd = the worktree

Building a project takes a few seconds (humanize ~10 s, six ~3 s, Markdown ~5 s); each is
built at most once per session and restored (``git reset --hard``, worktrees and branches
removed) after every test that used it.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import REPO_ROOT, git

FETCH_SCRIPT = REPO_ROOT / "scripts" / "fetch-test-projects"
_EOF = "AGENTOS_FIX_EOF"


@dataclass(frozen=True)
class Seed:
    """One text replacement in one file: applying it introduces the bug."""

    path: str
    good: str
    bad: str


@dataclass(frozen=True)
class PypiProject:
    name: str
    version: str
    layout: str  # src | flat-module | flat-package
    install: tuple[str, ...]  # pip arguments that install the main checkout and its test deps
    tool: str  # what AgentOS detects for it
    code: Seed
    test: Seed
    test_file: str  # the test file that checks the seeded code
    # Whether a wrong fix would pass without the import shim (src layout: the editable
    # install's path comes before the worktree's; flat layouts find the worktree's first).
    main_shadows_worktree: bool
    env: dict[str, str] = field(default_factory=dict)  # for the install
    # A tox.ini committed with the project (its test command then `tox`, tox installed in
    # its venv, environments built offline from the wheelhouse).
    tox_ini: str | None = None
    sdist_name: str | None = None  # another entry's sdist (six-tox is six)

    @property
    def sdist(self) -> str:
        return f"{self.sdist_name or self.name}-{self.version}.tar.gz"


PROJECTS: dict[str, PypiProject] = {
    "humanize": PypiProject(
        name="humanize",
        version="4.17.0",
        layout="src",
        install=("-e", ".[tests]"),
        tool="venv",
        code=Seed("src/humanize/i18n.py", '"pt_BR": ".",', '"pt_BR": "_",'),
        test=Seed(
            "tests/test_i18n.py",
            'activate("pt_BR")\n        assert humanize.intcomma(number) == "10.000.000"',
            'activate("pt_BR")\n        assert humanize.intcomma(number) == "10_000_000"',
        ),
        test_file="tests/test_i18n.py",
        main_shadows_worktree=True,
        # hatch-vcs reads the version from git tags; the repository made here has none.
        env={"SETUPTOOLS_SCM_PRETEND_VERSION": "4.17.0"},
    ),
    "six": PypiProject(
        name="six",
        version="1.17.0",
        layout="flat-module",
        install=("-e", ".", "pytest"),
        tool="venv",
        code=Seed("six.py", 'return s.encode("latin-1")', 'return s.encode("utf-8")'),
        test=Seed(
            "test_six.py",
            "assert len(data) == 1\n        assert data == bytes([255])",
            "assert len(data) == 2\n        assert data == bytes([195, 191])",
        ),
        test_file="test_six.py",
        main_shadows_worktree=False,
    ),
    "jsonpointer": PypiProject(
        name="jsonpointer",
        version="3.12",
        layout="flat-module",
        install=("-e", "."),  # no pytest: `make test` (python3 -munittest) runs it
        tool="make",
        code=Seed(
            "jsonpointer.py",
            "return s.replace('~', '~0').replace('/', '~1')",
            "return s.replace('/', '~1').replace('~', '~0')",
        ),
        test=Seed("tests.py", "'/m~0n'", "'/m~1n'"),
        test_file="tests.py",
        main_shadows_worktree=False,
    ),
    "six-tox": PypiProject(
        name="six",
        version="1.17.0",
        layout="flat-module",
        install=("-e", ".", "pytest", "tox"),
        tool="tox",
        code=Seed("six.py", 'return s.encode("latin-1")', 'return s.encode("utf-8")'),
        test=Seed(
            "test_six.py",
            "assert len(data) == 1\n        assert data == bytes([255])",
            "assert len(data) == 2\n        assert data == bytes([195, 191])",
        ),
        test_file="test_six.py",
        main_shadows_worktree=False,
        # skipsdist: the tests import the tree (an application's tox.ini); no package build.
        tox_ini="[tox]\nenvlist = py\nskipsdist = true\n\n[testenv]\ndeps = pytest\n"
        "commands = pytest {posargs}\n",
        sdist_name="six",
    ),
    "markdown": PypiProject(
        name="markdown",
        version="3.11.3",
        layout="flat-package",
        install=("-e", ".[testing]"),  # coverage and pyyaml; no pytest: `make test` runs it
        tool="make",
        code=Seed(
            "markdown/__meta__.py",
            "mapping = {'alpha': 'a', 'beta': 'b', 'rc': 'rc'}",
            "mapping = {'alpha': 'a', 'beta': 'B', 'rc': 'rc'}",
        ),
        test=Seed("tests/test_meta.py", '"1.2b2")', '"1.2B2")'),
        test_file="tests/test_meta.py",
        main_shadows_worktree=False,
    ),
}


def pypi_cache() -> Path:
    """The cache of pinned sdists and wheels, fetched through the script when missing."""
    out = subprocess.run(
        [str(FETCH_SCRIPT)],
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=900,
    )
    if out.returncode != 0:
        pytest.fail(f"scripts/fetch-test-projects failed (it needs PyPI once):\n{out.stderr}")
    return Path(out.stdout.strip().splitlines()[-1])


def wheelhouse() -> Path:
    return pypi_cache() / "wheels"


def pip_install(python: Path, *args: str, cwd: Path, env: dict[str, str] | None = None) -> None:
    """Install into ``python``'s environment from the wheelhouse only (never an index)."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-index",
            "--find-links",
            str(wheelhouse()),
            *args,
        ],
        cwd=cwd,
        env={**os.environ, "PIP_CONFIG_FILE": os.devnull, **(env or {})},
        check=True,
        capture_output=True,
        timeout=600,
    )


def make_venv(path: Path) -> Path:
    """A real virtual environment (without pip: AgentOS's pip installs into it); its python."""
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, timeout=120
    )
    return path / "bin" / "python"


def ignore_locally(repo: Path, *patterns: str) -> None:
    """Ignore ``patterns`` in ``repo`` the way a developer's own .git/info/exclude does."""
    exclude = repo / ".git" / "info" / "exclude"
    exclude.parent.mkdir(parents=True, exist_ok=True)
    with exclude.open("a") as fh:
        fh.write("".join(f"{p}\n" for p in patterns))


@dataclass
class ProjectRepo:
    project: PypiProject
    repo: Path  # the main checkout
    venv: Path
    base: str  # the commit main is reset to after each test (the seeded bug, when seeded)

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    def right_fix(self) -> dict[str, str]:
        """The fixed code and the fixed test: passes in the worktree."""
        return {s.path: self._text(s, fixed=True) for s in (self.project.code, self.project.test)}

    def wrong_fix(self) -> dict[str, str]:
        """Only the code fixed, its test still expecting the bug: fails in the worktree,
        passes only where the main checkout's (buggy) code is imported instead."""
        return {self.project.code.path: self._text(self.project.code, fixed=True)}

    def _text(self, seed: Seed, *, fixed: bool) -> str:
        text = (self.repo / seed.path).read_text()
        return text.replace(seed.bad, seed.good) if fixed else text

    @staticmethod
    def fix_script(files: dict[str, str]) -> str:
        """A bash script that writes ``files`` into the current directory: the body of a
        scripted shell agent (``write_package(..., files={"run.sh": ...})``)."""
        lines = ["#!/usr/bin/env bash", "set -euo pipefail"]
        for rel, text in files.items():
            assert text.endswith("\n") and _EOF not in text, rel
            lines += [f"cat > {shlex.quote(rel)} <<'{_EOF}'", text.rstrip("\n"), _EOF]
        return "\n".join(lines) + "\n"

    @staticmethod
    def write(tree: Path, files: dict[str, str]) -> None:
        for rel, text in files.items():
            (tree / rel).write_text(text)

    def add_worktree(self, path: Path, branch: str | None = None) -> Path:
        """A git worktree of the main checkout at ``base`` on a new branch."""
        git(
            self.repo,
            "worktree",
            "add",
            "-q",
            "-b",
            branch or f"test/{path.name}",
            str(path),
            self.base,
        )
        return path

    def reset(self) -> None:
        """Back to ``base``: worktrees and other branches removed, main at ``base``, clean."""
        for line in git(self.repo, "worktree", "list", "--porcelain").splitlines():
            where = Path(line.removeprefix("worktree ")) if line.startswith("worktree ") else None
            if where is not None and where.resolve() != self.repo.resolve():
                subprocess.run(
                    ["git", "-C", str(self.repo), "worktree", "remove", "--force", str(where)],
                    capture_output=True,
                )
        git(self.repo, "worktree", "prune")
        git(self.repo, "checkout", "-q", "-f", "main")
        git(self.repo, "reset", "-q", "--hard", self.base)
        git(self.repo, "clean", "-q", "-fd")  # untracked, never ignored (.venv, built files)
        for branch in git(self.repo, "branch", "--format=%(refname:short)").split():
            if branch != "main":
                git(self.repo, "branch", "-q", "-D", branch)


def build_project_repo(
    project: PypiProject, dest: Path, *, seeded: bool = True, regression: bool = False
) -> ProjectRepo:
    """Unpack ``project``'s sdist into ``dest`` as a git repository, give it a ``.venv`` with
    an editable install of itself and its test dependencies, and seed its bug: in the code
    and its test (the suite passes), or with ``regression`` in the code only (its tests
    fail, as a real regression's do)."""
    with tarfile.open(pypi_cache() / "sdists" / project.sdist) as tar:
        tar.extractall(dest.parent / f".{dest.name}-unpack", filter="data")
    unpacked = dest.parent / f".{dest.name}-unpack" / f"{project.name}-{project.version}"
    shutil.move(unpacked, dest)
    shutil.rmtree(dest.parent / f".{dest.name}-unpack")
    for info in dest.glob("*.egg-info"):
        shutil.rmtree(info)  # built by the sdist's maker, not part of the source
    git(dest, "init", "-q", "-b", "main")
    ignore_locally(
        dest, ".venv/", "*.egg-info/", "__pycache__/", ".coverage", ".pytest_cache/", ".tox/"
    )
    if project.tox_ini:
        (dest / "tox.ini").write_text(project.tox_ini)
        (dest / ".agentos.yaml").write_text(
            f"test: tox -q -e py\nenv: {{PIP_NO_INDEX: '1', PIP_FIND_LINKS: '{wheelhouse()}'}}\n"
        )
    git(dest, "add", "-A")
    git(dest, "commit", "-q", "-m", f"{project.name} {project.version} from PyPI")
    python = make_venv(dest / ".venv")
    pip_install(python, *project.install, cwd=dest, env=project.env)
    if seeded:
        for seed in (project.code,) if regression else (project.code, project.test):
            path = dest / seed.path
            text = path.read_text()
            assert text.count(seed.good) == 1, f"{seed.path}: {seed.good!r} is not there once"
            path.write_text(text.replace(seed.good, seed.bad))
        what = "a regression" if regression else "a bug in the code and its test"
        git(dest, "commit", "-q", "-am", f"Seed {what}")
    return ProjectRepo(project, dest, dest / ".venv", git(dest, "rev-parse", "HEAD"))


@pytest.fixture(scope="session")
def _built_projects(
    tmp_path_factory: pytest.TempPathFactory,
) -> Callable[..., ProjectRepo]:
    built: dict[tuple[str, bool], ProjectRepo] = {}

    def get(name: str, regression: bool = False) -> ProjectRepo:
        if (name, regression) not in built:
            kind = "-regression" if regression else ""
            where = tmp_path_factory.mktemp(f"pypi-{name}{kind}") / name
            built[name, regression] = build_project_repo(
                PROJECTS[name], where, regression=regression
            )
        return built[name, regression]

    return get


@pytest.fixture
def project_repo(
    _built_projects: Callable[..., ProjectRepo],
) -> Iterator[Callable[..., ProjectRepo]]:
    """``project_repo(name)``: a real PyPI project (see PROJECTS) as a seeded git repository
    with its own .venv; ``project_repo(name, regression=True)``: its code broken and its
    tests failing at the base. Built once per session, restored after each test."""
    used: list[ProjectRepo] = []

    def get(name: str, regression: bool = False) -> ProjectRepo:
        proj = _built_projects(name, regression)
        proj.reset()
        used.append(proj)
        return proj

    yield get
    for proj in used:
        proj.reset()
