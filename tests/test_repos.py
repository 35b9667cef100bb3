"""Repository profiles: how a repository is tested, and the worktree's code, never the main
checkout's. Real git repositories, real virtual environments with real editable installs made
by pip (offline, from the wheelhouse of scripts/fetch-test-projects), real PyPI projects."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from _projects import (  # noqa: F401 -- fixtures
    PROJECTS,
    ProjectRepo,
    _built_projects,
    ignore_locally,
    make_venv,
    pip_install,
    project_repo,
)
from conftest import CliRunner, git, make_repo

from agentos.errors import NotFound, ValidationFailed
from agentos.gate.prepare import IgnoredFiles
from agentos.gate.repo import (
    SITE_DIR,
    SITE_MAP_VARIABLE,
    RepoProfile,
    check_profile,
    prepare_worktree,
    repo_profile,
)
from agentos.workspace.layout import Workspace

HINT = "set `python:` or `test:` for it (`repos:` in agentos.yaml, or .agentos.yaml)"


def base_env() -> dict[str, str]:
    """The environment a check starts from: ours, without our own virtual environment and
    without what our own pytest (and its xdist workers) set for itself."""
    return {
        k: v
        for k, v in os.environ.items()
        if k not in ("VIRTUAL_ENV", "PYTHONPATH") and not k.startswith("PYTEST_")
    }


def sh(command: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


@pytest.fixture(scope="session")
def pytest_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real virtual environment with pytest installed (shared: repos link to it)."""
    venv = tmp_path_factory.mktemp("pytest-venv") / "venv"
    python = make_venv(venv)
    pip_install(python, "pytest", cwd=venv)
    return venv


def with_venv(repo: Path, venv: Path, name: str = ".venv") -> Path:
    """Give ``repo`` the virtual environment ``venv`` as ``repo/name`` (git-ignored)."""
    (repo / name).symlink_to(venv, target_is_directory=True)
    ignore_locally(repo, f"/{name}")
    return repo / name


# --- detection ----------------------------------------------------------------------------

MAKEFILE = "all:\n\techo all\n\ntest:\n\techo testing\n"
NO_TOOL = {
    name: shutil.which(name) is None for name in ("uv", "poetry", "hatch", "pdm", "tox", "nox")
}


@pytest.mark.parametrize(
    ("files", "tool", "test", "problem"),
    [
        ({"tox.ini": "[tox]\nenv_list = py\n"}, "tox", "tox", "`tox` is not installed"),
        ({"pyproject.toml": "[tool.tox]\nlegacy_tox_ini = ''\n"}, "tox", "tox", "`tox`"),
        ({"setup.cfg": "[tox:tox]\nenvlist = py\n"}, "tox", "tox", "`tox`"),
        ({"noxfile.py": "import nox\n"}, "nox", "nox", "`nox` is not installed"),
        ({"Makefile": MAKEFILE}, "make", "make test", None),
        ({"makefile": MAKEFILE}, "make", "make test", None),
        (
            {"Makefile": "all:\n\techo all\ntest_data := x\n"},
            "pytest",
            "python3 -m pytest -q",
            None,
        ),
        ({"README.md": "# plain\n"}, "pytest", "python3 -m pytest -q", None),
        ({"uv.lock": "version = 1\n"}, "uv", "uv run python -m pytest -q", "does not exist"),
        ({"poetry.lock": "# poetry\n"}, "poetry", "poetry run python -m pytest -q", "`poetry`"),
        (
            {"pyproject.toml": "[tool.poetry]\nname = 'x'\n"},
            "poetry",
            "poetry run python -m pytest -q",
            "`poetry`",
        ),
        ({"hatch.toml": "[envs.default]\n"}, "hatch", "hatch run python -m pytest -q", "`hatch`"),
        ({"pdm.lock": "# pdm\n"}, "pdm", "pdm run python -m pytest -q", "`pdm`"),
    ],
    ids=[
        "tox.ini",
        "tool.tox",
        "setup.cfg-tox",
        "noxfile",
        "Makefile-test",
        "makefile-test",
        "Makefile-without-test",
        "plain-pytest",
        "uv-without-env",
        "poetry-lock",
        "tool.poetry",
        "hatch",
        "pdm",
    ],
)
def test_detection_without_an_environment_says_what_it_found_and_what_is_missing(
    ws: Workspace, tmp_path: Path, files: dict[str, str], tool: str, test: str, problem: str | None
) -> None:
    repo = make_repo(tmp_path / "repo", files)
    profile = repo_profile(ws, repo)
    assert (profile.source, profile.tool, profile.test) == ("detected", tool, test)
    assert profile.reasons  # always says why
    program = test.split()[0]
    if problem is not None and (program == "python3" or NO_TOOL.get(program, True)):
        assert any(problem in p for p in profile.problems), profile.problems
    if tool in ("make", "tox", "nox"):
        assert any(next(iter(files)) in reason for reason in profile.reasons), profile.reasons


@pytest.mark.parametrize("name", [".venv", "venv"])
def test_a_venv_in_the_repository_with_pytest_runs_the_suite_with_its_interpreter(
    ws: Workspace, tmp_path: Path, pytest_venv: Path, name: str
) -> None:
    repo = make_repo(tmp_path / "repo", {"tox.ini": "[tox]\n", "Makefile": MAKEFILE})
    venv = with_venv(repo, pytest_venv, name)
    profile = repo_profile(ws, repo)
    assert profile.as_dict() == {
        "repo": str(repo),
        "source": "detected",
        "settings_file": None,
        "tool": "venv",
        "runner": "pytest",
        "test": f"{venv}/bin/python -m pytest -q",
        "takes_args": True,
        "collect": f"{venv}/bin/python -m pytest -q --collect-only",
        "python": f"{venv}/bin/python",
        "venv": str(venv),
        "env": {},
        "timeout": 900.0,
        "reasons": [
            f"a virtual environment in the repository ({name}): {venv}/bin/python",
            f"pytest is installed in {venv}: its interpreter runs the suite",
        ],
        "problems": [],
    }


def test_a_venv_without_pytest_hands_the_suite_to_the_makefile_with_its_bin_first(
    ws: Workspace, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "repo", {"tox.ini": "[tox]\n", "Makefile": MAKEFILE})
    make_venv(repo / ".venv")
    ignore_locally(repo, "/.venv")
    profile = repo_profile(ws, repo)
    assert (profile.tool, profile.test, profile.python) == (
        "make",
        "make test",
        repo / ".venv" / "bin" / "python",
    )
    if NO_TOOL["tox"]:
        assert (
            "tox is configured (tox.ini): `tox` builds from the tree, but `tox` is not "
            "installed" in profile.reasons
        )
    env = profile.environment({"PATH": "/usr/bin:/bin"})
    assert env["PATH"] == f"{repo}/.venv/bin:/usr/bin:/bin"
    assert env["VIRTUAL_ENV"] == str(repo / ".venv")
    assert profile.test_command(["tests/test_x.py"]) == "make test"  # make runs it all
    assert (profile.takes_args, profile.collect_command()) == (False, "make -n test")
    assert check_profile(profile) == []


@pytest.mark.slow
def test_tox_in_the_projects_environment_drives_the_suite_when_it_has_no_pytest(
    ws: Workspace, tmp_path: Path
) -> None:
    repo = make_repo(
        tmp_path / "repo",
        {
            "tox.ini": "[tox]\nenv_list = py\n[testenv]\ncommands = python -c pass\n",
            "Makefile": MAKEFILE,
        },
    )
    python = make_venv(repo / ".venv")
    ignore_locally(repo, "/.venv")
    pip_install(python, "tox", cwd=repo)
    profile = repo_profile(ws, repo)
    assert (profile.tool, profile.test, profile.venv, profile.problems) == (
        "tox",
        "tox",
        repo / ".venv",
        (),
    )
    assert profile.reasons[-1] == "tox is configured (tox.ini): `tox` builds from the tree"
    assert profile.test_command(["tests/test_a.py"]) == "tox -- tests/test_a.py"
    assert check_profile(profile) == []  # `tox -l`, found in the environment's bin


def test_uv_project_environment_and_pdm_python_are_followed(
    ws: Workspace, tmp_path: Path, pytest_venv: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = make_repo(tmp_path / "uv", {"uv.lock": "version = 1\n"})
    with_venv(repo, pytest_venv, "envs-uv")
    monkeypatch.setenv("UV_PROJECT_ENVIRONMENT", "envs-uv")
    profile = repo_profile(ws, repo)
    assert (profile.tool, profile.venv, profile.problems) == ("uv", repo / "envs-uv", ())
    assert profile.test == f"{repo}/envs-uv/bin/python -m pytest -q"

    repo = make_repo(tmp_path / "pdm", {"pdm.lock": "# pdm\n"})
    (repo / ".pdm-python").write_text(f"{pytest_venv}/bin/python\n")
    profile = repo_profile(ws, repo)
    assert (profile.tool, profile.python, profile.venv) == (
        "pdm",
        pytest_venv / "bin" / "python",
        pytest_venv,
    )
    assert profile.test == f"{pytest_venv}/bin/python -m pytest -q"


# --- explicit settings --------------------------------------------------------------------


def test_agentos_yaml_wins_over_the_committed_file_field_by_field(
    ws: Workspace, tmp_path: Path, pytest_venv: Path
) -> None:
    repo = make_repo(
        tmp_path / "repo",
        {".agentos.yaml": "test: make check\nenv: {A: from-repo, B: from-repo}\ntimeout: 30\n"},
    )
    with_venv(repo, pytest_venv)
    ws.settings_file.write_text(
        "run: {guardian: false}\n"
        f"repos:\n  {repo}:\n    env: {{A: from-workspace}}\n    timeout: 12\n"
    )
    profile = repo_profile(Workspace(ws.root), repo)
    assert (profile.source, profile.tool, profile.test, profile.timeout) == (
        "agentos.yaml",
        "custom",
        "make check",
        12.0,
    )
    assert dict(profile.env) == {"A": "from-workspace", "B": "from-repo"}
    assert profile.python == repo / ".venv" / "bin" / "python"  # detected: nobody set it
    assert profile.settings_file == f"{ws.settings_file}: repos: {repo}"
    assert profile.environment({"PATH": "/bin"})["A"] == "from-workspace"


def test_repos_keys_expand_the_home_directory_and_relative_paths_are_the_workspaces(
    ws: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    make_repo(tmp_path / "home-repo")
    make_repo(ws.root / "inner")
    ws.settings_file.write_text(
        "repos:\n  ~/home-repo: {test: echo home}\n"
        "  inner: {test: echo inner, python: py/bin/python}\n"
    )
    fresh = Workspace(ws.root)
    assert repo_profile(fresh, tmp_path / "home-repo").test == "echo home"
    inner = repo_profile(fresh, ws.root / "inner")
    assert (inner.test, inner.python) == ("echo inner", ws.root / "inner" / "py" / "bin" / "python")


def test_the_committed_file_is_read_at_the_commit_never_from_a_worktree(
    ws: Workspace, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "repo", {".agentos.yaml": "test: echo committed\n"})
    base = git(repo, "rev-parse", "HEAD")
    tree = tmp_path / "wt"
    git(repo, "worktree", "add", "-q", "-b", "agent", str(tree))
    (tree / ".agentos.yaml").write_text("test: echo hacked-by-the-agent\n")
    git(tree, "commit", "-q", "-am", "agent edits its checks")
    (repo / ".agentos.yaml").write_text("test: echo uncommitted\n")

    at_base = repo_profile(ws, repo, at=base)
    assert (at_base.source, at_base.test) == (".agentos.yaml", "echo committed")
    assert at_base.settings_file == f"{repo}/.agentos.yaml@{base[:12]}"
    assert repo_profile(ws, repo, at="agent").test == "echo hacked-by-the-agent"  # if asked
    assert repo_profile(ws, repo).test == "echo uncommitted"  # no commit: the main checkout's

    git(repo, "rm", "-q", "-f", ".agentos.yaml")
    git(repo, "commit", "-q", "-m", "no settings")
    assert repo_profile(ws, repo, at="HEAD").source == "detected"
    with pytest.raises(NotFound, match="no commit 'nosuchref'"):
        repo_profile(ws, repo, at="nosuchref")


@pytest.mark.parametrize(
    ("text", "field", "message"),
    [
        ("tset: pytest\n", "tset", "unknown field"),
        ("timeout: 0\n", "timeout", "Input should be greater than 0"),
        ("env: {A: [1]}\n", "env.A", "Input should be a valid string"),
        (
            "test: [unclosed\n",
            "line 2",
            "invalid YAML: "
            + (  # libyaml's wording, or PyYAML's where it is built without libyaml
                "did not find expected ',' or ']'"
                if hasattr(yaml, "CSafeLoader")
                else "expected ',' or ']', but got '<stream end>'"
            ),
        ),
        ("- a list\n", "(root)", "expected a mapping of fields"),
    ],
    ids=["unknown-field", "bad-timeout", "bad-env", "invalid-yaml", "not-a-mapping"],
)
def test_a_bad_committed_file_is_one_line_naming_the_file_and_field(
    ws: Workspace, cli: CliRunner, tmp_path: Path, text: str, field: str, message: str
) -> None:
    repo = make_repo(tmp_path / "repo", {".agentos.yaml": text})
    sha = git(repo, "rev-parse", "HEAD")
    with pytest.raises(ValidationFailed) as err:
        repo_profile(ws, repo, at=sha)
    assert str(err.value) == f"{repo}/.agentos.yaml@{sha[:12]}: {field}: {message}"
    result = cli("repo", "show", "--repo", str(repo))
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == f"error: {repo}/.agentos.yaml: {field}: {message}\n"


def test_a_bad_repos_entry_in_agentos_yaml_is_one_line_naming_the_field(
    ws: Workspace, cli: CliRunner, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "repo")
    ws.settings_file.write_text(f"repos:\n  {repo}: {{test: pytest, tiemout: 5}}\n")
    result = cli("repo", "show", "--repo", str(repo))
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == f"error: {ws.settings_file}: repos.{repo}.tiemout: unknown field\n"


# --- commands and environments ------------------------------------------------------------


def profile_of(test: str, runner: str) -> RepoProfile:
    return RepoProfile(Path("/r"), "detected", runner, test, None, None, runner=runner)


@pytest.mark.parametrize(
    ("test", "runner", "whole", "some", "collect"),
    [
        (
            "/v/bin/python -m pytest -q",
            "pytest",
            "/v/bin/python -m pytest -q",
            "/v/bin/python -m pytest -q tests/test_a.py 'tests/test_b.py::test_x y'",
            "/v/bin/python -m pytest -q --collect-only",
        ),
        ("tox", "tox", "tox", "tox -- tests/test_a.py 'tests/test_b.py::test_x y'", "tox -l"),
        ("nox", "nox", "nox", "nox -- tests/test_a.py 'tests/test_b.py::test_x y'", "nox -l"),
        ("make test", "make", "make test", "make test", "make -n test"),
        ("./run-tests", "custom", "./run-tests", "./run-tests", None),
        (
            "nox -s tests -- {args}",
            "custom",
            "nox -s tests -- ",
            "nox -s tests -- tests/test_a.py 'tests/test_b.py::test_x y'",
            None,
        ),
    ],
    ids=["pytest", "tox", "nox", "make", "custom", "custom-args"],
)
def test_test_command_passes_test_paths_where_the_runner_takes_them(
    test: str, runner: str, whole: str, some: str, collect: str | None
) -> None:
    profile = profile_of(test, runner)
    assert profile.test_command() == whole
    assert profile.test_command(["tests/test_a.py", "tests/test_b.py::test_x y"]) == some
    assert profile.collect_command() == collect


def test_environment_puts_the_interpreter_first_and_maps_only_a_worktree(tmp_path: Path) -> None:
    repo, tree = tmp_path / "repo", tmp_path / "wt"
    repo.mkdir()
    tree.mkdir()
    profile = RepoProfile(
        repo,
        "detected",
        "venv",
        "x",
        repo / ".venv/bin/python",
        repo / ".venv",
        env={"EXTRA": "1"},
    )
    base = {"PATH": f"/usr/bin:{repo}/.venv/bin", "PYTHONHOME": "/x", "PYTHONPATH": "/mine"}
    assert profile.environment(base, repo) == {
        "PATH": f"{repo}/.venv/bin:/usr/bin",
        "VIRTUAL_ENV": str(repo / ".venv"),
        "PYTHONPATH": "/mine",
        "EXTRA": "1",
    }
    env = profile.environment(base, tree)
    assert env["PYTHONPATH"] == f"{SITE_DIR}:/mine"
    assert json.loads(env[SITE_MAP_VARIABLE]) == {str(repo): str(tree)}
    assert profile.environment(env, tree)["PYTHONPATH"] == env["PYTHONPATH"]  # idempotent


# --- check_profile and doctor -------------------------------------------------------------


def test_a_missing_interpreter_is_a_problem_naming_the_fix(ws: Workspace, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {".agentos.yaml": "python: .venv/bin/python\n"})
    profile = repo_profile(ws, repo)
    # What the settings name is what runs: never quietly another environment.
    assert (profile.tool, profile.test) == ("custom", f"{repo}/.venv/bin/python -m pytest -q")
    assert check_profile(profile) == [
        f"the interpreter {repo}/.venv/bin/python (`python:` in {repo}/.agentos.yaml) does not "
        "exist: create that environment (python3 -m venv .venv, then install the project and "
        "its test dependencies), or fix `python:` there"
    ]


def test_a_test_program_not_found_is_a_problem(ws: Workspace, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {".agentos.yaml": "test: no-such-runner-xyz --all\n"})
    assert check_profile(repo_profile(ws, repo)) == [
        f"`no-such-runner-xyz` (the test command's program) is not found on PATH: install it, "
        f"or {HINT}"
    ]


def test_a_suite_that_does_not_collect_is_a_problem_with_the_error(
    ws: Workspace, cli: CliRunner, tmp_path: Path, pytest_venv: Path
) -> None:
    repo = make_repo(
        tmp_path / "repo",
        {"tests/test_ok.py": "def test_ok():\n    pass\n"},
    )
    with_venv(repo, pytest_venv)
    profile = repo_profile(ws, repo)
    assert check_profile(profile) == []
    assert cli("doctor", "--repo", str(repo)).stdout.count("`--collect-only` passes") <= 1

    (repo / "tests/test_broken.py").write_text("import nosuchmodule_xyz\n")
    collect = f"{repo}/.venv/bin/python -m pytest -q --collect-only"
    expected = (
        f"the suite does not collect (`{collect}` exit 2 in {repo}: tests/test_broken.py: "
        f"ModuleNotFoundError: No module named 'nosuchmodule_xyz'): install the test "
        f"dependencies into {repo}/.venv, or {HINT}"
    )
    assert check_profile(profile) == [expected]
    # An error in the repository's own files (not a missing module) is for it to fix.
    (repo / "tests/test_broken.py").write_text("def test_x(:\n    pass\n")
    assert check_profile(profile) == [
        "the suite does not collect as the repository is now, before any agent worked on it "
        f"(`{collect}` exit 2 in {repo}): tests/test_broken.py: SyntaxError: invalid syntax: "
        "fix it first"
    ]
    (repo / "tests/test_broken.py").write_text("import nosuchmodule_xyz\n")
    result = cli("doctor", "--repo", str(repo))
    assert result.returncode == 1
    assert f"repo: {expected}\n" in result.stdout.replace("\n  ", " ")


# --- the CLI ------------------------------------------------------------------------------


def test_repo_show_prints_the_profile_and_the_interpreters_version(
    cli: CliRunner, tmp_path: Path, pytest_venv: Path
) -> None:
    repo = make_repo(tmp_path / "repo", {".agentos.yaml": "env: {FOO: bar}\ntimeout: 60\n"})
    with_venv(repo, pytest_venv)
    version = subprocess.run(
        [str(repo / ".venv/bin/python"), "--version"], capture_output=True, text=True
    ).stdout.strip()
    result = cli("repo", "show", "--repo", str(repo), "--json")
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    assert (shown["source"], shown["tool"], shown["python_version"], shown["env"]) == (
        ".agentos.yaml",
        "venv",
        version,
        {"FOO": "bar"},
    )
    result = cli("repo", "show", cwd=repo, env={"COLUMNS": "200"})
    assert result.returncode == 0, result.stderr
    assert result.stdout == (
        f"repository  {repo}\n"
        f"source      .agentos.yaml ({repo}/.agentos.yaml)\n"
        "tool        venv\n"
        f"test        {repo}/.venv/bin/python -m pytest -q\n"
        f"python      {repo}/.venv/bin/python ({version})\n"
        f"venv        {repo}/.venv\n"
        "env         FOO=bar\n"
        "timeout     60s\n"
        "why:\n"
        f"  - timeout from {repo}/.agentos.yaml\n"
        f"  - a virtual environment in the repository (.venv): {repo}/.venv/bin/python\n"
        f"  - pytest is installed in {repo}/.venv: its interpreter runs the suite\n"
    )


# --- prepare_worktree ---------------------------------------------------------------------


def test_prepare_worktree_copies_built_files_and_says_where_they_came_from(
    ws: Workspace, tmp_path: Path
) -> None:
    repo = make_repo(
        tmp_path / "repo",
        {
            ".gitignore": "*.so\n_version.py\n*.mo\n.env\n",
            "src/pkg/__init__.py": "",
            "src/pkg/locale/de/LC_MESSAGES/pkg.po": "",
            "README.md": "",
        },
    )
    built = {
        "src/pkg/_speedups.cpython-311-x86_64-linux-gnu.so": "ELF",
        "src/pkg/_version.py": "__version__ = '1.0'\n",
        "src/pkg/locale/de/LC_MESSAGES/pkg.mo": "mo",
        ".env": "SECRET=1\n",  # ignored but not the package's: never copied
        "build/lib/pkg/_speedups.so": "ELF",
    }
    for rel, text in built.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    tree = tmp_path / "wt"
    git(repo, "worktree", "add", "-q", "-b", "agent", str(tree))
    (tree / "src/pkg/_version.py").write_text("__version__ = 'the worktree'\n")
    profile = repo_profile(ws, repo)
    assert prepare_worktree(profile, tree) == [
        "copied 1 compiled extension(s) from the main checkout: "
        "src/pkg/_speedups.cpython-311-x86_64-linux-gnu.so; they were built from the main "
        "checkout's sources, so a change to their C/Rust sources in the worktree is not tested "
        "until they are rebuilt",
        "copied 1 git-ignored file(s) the main checkout's install generated: "
        "src/pkg/locale/de/LC_MESSAGES/pkg.mo",
    ]
    assert (tree / "src/pkg/_version.py").read_text() == "__version__ = 'the worktree'\n"
    assert not (tree / ".env").exists() and not (tree / "build").exists()
    assert git(tree, "status", "--porcelain") == ""  # nothing to commit by accident
    assert prepare_worktree(profile, tree) == []  # already there


def test_a_runs_worktrees_get_the_build_products_of_one_listing(
    ws: Workspace, tmp_path: Path
) -> None:
    # A run lists the main checkout's ignored files once (IgnoredFiles): every worktree of
    # the run, at its set-up and before each gate, gets the same build products.
    repo = make_repo(tmp_path / "repo", {".gitignore": "*.so\n", "src/pkg/__init__.py": ""})
    (repo / "src/pkg/_a.so").write_text("ELF")
    trees = [tmp_path / name for name in ("one", "two")]
    for tree in trees:
        git(repo, "worktree", "add", "-q", "-b", tree.name, str(tree))
    profile, ignored = repo_profile(ws, repo), IgnoredFiles(repo)

    prepare_worktree(profile, trees[0], ignored)
    (repo / "src/pkg/_b.so").write_text("ELF")  # built in the main checkout meanwhile
    prepare_worktree(profile, trees[1], ignored)

    for tree in trees:
        assert sorted(p.name for p in (tree / "src/pkg").glob("*.so")) == ["_a.so"]
    prepare_worktree(profile, trees[1])  # without the run's listing: listed now
    assert sorted(p.name for p in (trees[1] / "src/pkg").glob("*.so")) == ["_a.so", "_b.so"]


# --- the import shim on real editable installs --------------------------------------------

# name -> (files of a tiny project whose module says WHERE it was imported from, module)
_WHERE = 'WHERE = "main"\n'
_SETUPTOOLS = '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
_HATCHLING = '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n'
EDITABLE_KINDS: dict[str, tuple[dict[str, str], str]] = {
    "setuptools-src": (
        {
            "pyproject.toml": _SETUPTOOLS + '[project]\nname = "shimsrc"\nversion = "1"\n'
            '[tool.setuptools.packages.find]\nwhere = ["src"]\n',
            "src/shimsrc/__init__.py": _WHERE,
        },
        "shimsrc",
    ),
    "setuptools-flat": (
        {
            "pyproject.toml": _SETUPTOOLS + '[project]\nname = "shimflat"\nversion = "1"\n'
            '[tool.setuptools]\npackages = ["shimflat"]\n',
            "shimflat/__init__.py": _WHERE,
        },
        "shimflat",
    ),
    "hatchling": (
        {
            "pyproject.toml": _HATCHLING + '[project]\nname = "shimhatch"\nversion = "1"\n'
            '[tool.hatch.build.targets.wheel]\npackages = ["src/shimhatch"]\n',
            "src/shimhatch/__init__.py": _WHERE,
        },
        "shimhatch",
    ),
    "hatchling-exact": (
        {
            "pyproject.toml": _HATCHLING + '[project]\nname = "shimexact"\nversion = "1"\n'
            "[tool.hatch.build]\ndev-mode-exact = true\n"
            '[tool.hatch.build.targets.wheel]\npackages = ["src/shimexact"]\n',
            "src/shimexact/__init__.py": _WHERE,
        },
        "shimexact",
    ),
    "namespace": (
        {
            "pyproject.toml": _SETUPTOOLS + '[project]\nname = "shimns-part"\nversion = "1"\n'
            '[tool.setuptools.packages.find]\nwhere = ["."]\ninclude = ["shimns*"]\n'
            "namespaces = true\n",
            "shimns/part/__init__.py": _WHERE,
        },
        "shimns.part",
    ),
}
WHERE_TEST = """\
import importlib
import os


def test_imports_this_tree():
    module = importlib.import_module(os.environ["MODULE"])
    assert module.WHERE == os.environ["EXPECT_WHERE"]
    assert os.path.realpath(module.__file__).startswith(os.environ["EXPECT_ROOT"] + os.sep)
"""


@pytest.fixture(scope="session")
def editable_repo(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``editable_repo(kind)``: a git repository of a tiny project with a ``.venv`` (pytest
    and an editable install of the main checkout, by pip), built once per session."""
    built: dict[str, Path] = {}

    def get(kind: str) -> Path:
        if kind not in built:
            files, _ = EDITABLE_KINDS[kind]
            repo = make_repo(
                tmp_path_factory.mktemp(kind) / "repo", {**files, "tests/test_where.py": WHERE_TEST}
            )
            ignore_locally(repo, "/.venv", "*.egg-info/", "__pycache__/", "build/")
            python = make_venv(repo / ".venv")
            pip_install(python, "pytest", "-e", ".", cwd=repo)
            built[kind] = repo
        return built[kind]

    return get


RUNNERS: dict[str, Callable[[RepoProfile], str]] = {
    "python -m pytest": lambda profile: profile.test_command(["tests/test_where.py"]),
    "pytest script": lambda profile: f"{profile.venv}/bin/pytest -q tests/test_where.py",
}


@pytest.mark.slow
@pytest.mark.parametrize("runner", list(RUNNERS))
@pytest.mark.parametrize("kind", list(EDITABLE_KINDS))
def test_a_worktree_imports_its_own_code_despite_an_editable_install_of_the_main_checkout(
    ws: Workspace, tmp_path: Path, editable_repo: Callable[[str], Path], kind: str, runner: str
) -> None:
    repo = editable_repo(kind)
    module = EDITABLE_KINDS[kind][1]
    tree = tmp_path / "wt"
    git(repo, "worktree", "add", "-q", "--detach", str(tree))
    try:
        init = next(p for p in EDITABLE_KINDS[kind][0] if p.endswith("__init__.py"))
        (tree / init).write_text('WHERE = "worktree"\n')
        profile = repo_profile(ws, repo)
        command = RUNNERS[runner](profile)
        for cwd, where in ((tree, "worktree"), (repo, "main")):
            env = profile.environment(base_env(), cwd)
            env.update(MODULE=module, EXPECT_WHERE=where, EXPECT_ROOT=str(cwd.resolve()))
            result = sh(command, cwd, env)
            assert result.returncode == 0, f"{where}: {result.stdout}{result.stderr}"
        if runner == "pytest script":  # without the shim, the main checkout's code
            env = profile.environment(base_env())
            env.update(MODULE=module, EXPECT_WHERE="main", EXPECT_ROOT=str(repo.resolve()))
            result = sh(command, tree, env)
            assert result.returncode == 0, result.stdout + result.stderr
    finally:
        git(repo, "worktree", "remove", "--force", str(tree))


@pytest.mark.slow
def test_the_shim_never_breaks_python_and_chains_the_environments_sitecustomize(
    tmp_path: Path, editable_repo: Callable[[str], Path]
) -> None:
    repo = editable_repo("setuptools-src")
    python = str(repo / ".venv/bin/python")
    probe = (
        "import sys, shimsrc, sitecustomize; "
        "print(shimsrc.WHERE, getattr(sitecustomize, 'MINE', 'ours'), "
        f"{str(SITE_DIR)!r} in sys.path)"
    )
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text("MINE = 'theirs'\n")
    cases = [
        ({SITE_MAP_VARIABLE: "not json"}, str(SITE_DIR), "main ours False"),
        ({SITE_MAP_VARIABLE: '["a list"]'}, str(SITE_DIR), "main ours False"),
        (
            {SITE_MAP_VARIABLE: json.dumps({str(repo): "/nonexistent"})},
            str(SITE_DIR),
            "main ours False",
        ),
        ({}, f"{SITE_DIR}:{theirs}", "main theirs False"),
    ]
    for extra, pythonpath, expected in cases:
        env = {**base_env(), **extra, "PYTHONPATH": pythonpath}
        result = subprocess.run(
            [python, "-c", probe], env=env, capture_output=True, text=True, cwd=tmp_path
        )
        assert (result.returncode, result.stdout.strip(), result.stderr) == (0, expected, "")


# --- real projects from PyPI --------------------------------------------------------------


@pytest.mark.slow
# The projects whose editable install shadows a worktree (the others run end to end in
# tests/test_real_projects.py).
@pytest.mark.parametrize("name", [n for n, p in PROJECTS.items() if p.main_shadows_worktree])
def test_a_real_projects_suite_passes_with_the_worktrees_fix_and_fails_with_a_wrong_one(
    ws: Workspace,
    tmp_path: Path,
    project_repo: Callable[[str], ProjectRepo],  # noqa: F811 -- the fixture imported above
    name: str,
) -> None:
    proj = project_repo(name)
    profile = repo_profile(ws, proj.repo, at=proj.base)
    assert (profile.tool, profile.venv) == (proj.project.tool, proj.venv)
    assert check_profile(profile) == []
    only = profile.test_command([proj.project.test_file])
    if profile.takes_args:  # the seeded bug and its test agree on main
        result = sh(only, proj.repo, profile.environment(base_env(), proj.repo))
        assert result.returncode == 0, result.stdout[-3000:]
    tree = proj.add_worktree(tmp_path / "wt")
    notes = prepare_worktree(profile, tree)
    if name == "humanize":  # hatch-vcs's version module and the compiled translations
        assert "src/humanize/_version.py" in notes[0] and ".mo" in notes[0]
    env = profile.environment(base_env(), tree)

    script = proj.fix_script(proj.right_fix())  # what a scripted agent would run
    assert sh(script, tree, base_env()).returncode == 0
    assert sorted(git(tree, "diff", "--name-only").split()) == sorted(proj.right_fix())
    result = sh(profile.test_command(), tree, env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]

    git(tree, "checkout", "--", ".")
    proj.write(tree, proj.wrong_fix())
    result = sh(only, tree, env)
    assert result.returncode != 0, result.stdout[-3000:]
    if proj.project.main_shadows_worktree:  # without the shim the wrong fix would pass
        result = sh(only, tree, profile.environment(base_env()))
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


def _plain_python(tmp_path: Path) -> Path:
    """An interpreter with nothing installed (a virtual environment without pip)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    return venv / "bin" / "python3"


def test_an_interpreters_answer_is_kept_until_its_sys_path_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whether a plain interpreter has pytest is asked once (starting it costs ~100 ms of
    every run) and kept, until a package lands in (or leaves) a folder of its sys.path,
    the interpreter or the PYTHON* variables change."""
    from agentos.gate.detect import _python3_has_pytest

    python = _plain_python(tmp_path)
    asked = tmp_path / "asked"
    site, elsewhere = tmp_path / "site", tmp_path / "elsewhere"
    for folder in (site, elsewhere):  # each start of the interpreter counted
        folder.mkdir()
        (folder / "sitecustomize.py").write_text(
            f"with open({str(asked)!r}, 'a') as fh:\n    fh.write('x\\n')\n"
        )
    monkeypatch.setenv("PYTHONPATH", str(site))
    cache = tmp_path / "cache"

    here = tmp_path / "cwd"  # the working directory is on the interpreter's path too
    here.mkdir()
    monkeypatch.chdir(here)
    aged = iter(range(100, 0, -1))

    def age() -> None:
        """Every folder last changed long ago, each time at another moment (a folder
        changed in the last seconds keeps no answer: it may change again unseen)."""
        venv = python.parent.parent
        folders = [tmp_path, here, site, elsewhere, *(p for p in venv.rglob("*") if p.is_dir())]
        then = time.time_ns() - next(aged) * 10**9
        for folder in folders:
            os.utime(folder, ns=(then, then))

    def ask() -> tuple[bool, int]:
        found = _python3_has_pytest(str(python), cache)
        return found, len(asked.read_text().splitlines()) if asked.exists() else 0

    assert ask() == (False, 1)
    assert ask() == (False, 2)  # a folder changed just now: not kept
    age()
    assert ask() == (False, 3)
    assert ask() == (False, 3)  # kept
    (site / "pytest").mkdir()
    (site / "pytest" / "__init__.py").write_text("")
    age()
    assert ask() == (True, 4)  # installed into a folder of its sys.path: asked again
    assert ask() == (True, 4)
    monkeypatch.setenv("PYTHONPATH", str(elsewhere))
    assert ask() == (False, 5)  # other variables: another answer
    shutil.rmtree(site / "pytest")
    age()
    monkeypatch.setenv("PYTHONPATH", str(site))
    assert ask() == (False, 6)  # removed
    (cache / "interpreters.json").write_text("{not json")
    assert ask() == (False, 7)  # a broken cache is asked again


def test_a_python3_script_that_starts_another_is_kept_saying_yes_while_its_choice_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pyenv's, asdf's and mise's python3 is a script that starts the version a file of
    theirs names (`pyenv global` writes ROOT/version, `pyenv local` a .python-version in the
    directory or one above, `pyenv shell` a variable); asking through pyenv's costs ~110 ms
    of CPU. Where its answer only changes a problem (plain python3), its yes is kept while
    the environment and those files stay as they were, before and after the ask; a no is
    asked again every time (a run it refuses is refused on a fresh answer). Where its
    answer chooses the test command, it is asked every time."""
    from agentos.gate.detect import _python3_has_pytest

    root = tmp_path / "pyenv"  # ROOT/shims/python3 starts the interpreter ROOT/version names
    (root / "shims").mkdir(parents=True)
    version, asked = root / "version", tmp_path / "asked"
    here = tmp_path / "project" / "src"  # asked from here: .python-version may lie above
    here.mkdir(parents=True)
    local, switching = here.parent / ".python-version", tmp_path / "switching"
    shim = root / "shims" / "python3"
    shim.write_text(  # (with `switching`, a `git switch` removes .python-version meanwhile)
        f"#!/bin/sh\necho x >> {asked}\n[ -e {switching} ] && rm -f {local}\n"
        f'exec "$(cat {version})" "$@"\n'
    )
    shim.chmod(0o755)
    bare = _plain_python(tmp_path)  # an interpreter without pytest
    monkeypatch.chdir(here)
    cache = tmp_path / "cache"
    aged = iter(range(100, 0, -1))

    def age(*paths: Path) -> None:
        """Last changed long ago, each time at another moment (a file changed in the last
        seconds keeps no answer: it may change again unseen)."""
        then = time.time_ns() - next(aged) * 10**9
        for path in paths:
            os.utime(path, ns=(then, then))

    def ask(*, only_a_problem: bool = True) -> tuple[bool, int]:
        found = _python3_has_pytest(str(shim), cache, keep_yes_of_a_script=only_a_problem)
        return found, len(asked.read_text().splitlines())

    age(here, *(p for p in bare.parent.parent.rglob("*") if p.is_dir()))
    version.write_text(f"{bare}\n")
    age(version)
    assert ask() == (False, 1)
    assert ask() == (False, 2)  # a no is asked again
    version.write_text(f"{sys.executable}\n")  # `pyenv global`: one with pytest
    age(version)
    assert ask() == (True, 3)
    assert ask() == (True, 3)  # kept
    assert ask(only_a_problem=False) == (True, 4)  # choosing the command: asked each time
    assert ask(only_a_problem=False) == (True, 5)
    local.write_text("3.12\n")  # `pyenv local`, a folder up
    age(local)
    assert ask() == (True, 6)
    assert ask() == (True, 6)
    monkeypatch.setenv("PYENV_VERSION", "3.99-mine")  # `pyenv shell`
    assert ask() == (True, 7)
    assert ask() == (True, 7)
    switching.touch()  # .python-version removed while the script chooses: the yes it gave
    age(local)  # for the version that file named is not kept for the state after it
    assert ask() == (True, 8)
    assert not local.exists()
    assert ask() == (True, 9)
    assert ask() == (True, 9)  # nothing changed since: kept
    switching.unlink()
    version.write_text(f"{bare}\n")  # back to one without pytest
    age(version)
    assert ask() == (False, 10)
    cached = (cache / "interpreters.json").read_text()
    assert "3.99-mine" not in cached and "PYENV_VERSION" not in cached  # variables: a hash


def test_asking_an_interpreter_whether_it_has_pytest_runs_no_code_of_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The question runs outside any sandbox, from where AgentOS was started (often the
    repository, where an agent's work lands): a json.py there is not imported, and cannot
    make up an answer that is then kept."""
    from agentos.gate.detect import detect

    python = Path(os.path.realpath(shutil.which("python3") or "python3"))
    repo = tmp_path / "repo"
    repo.mkdir()
    clean = tmp_path / "clean"
    clean.mkdir()
    monkeypatch.chdir(clean)
    honest = detect(repo, os.environ, python, tmp_path / "cache-clean")

    planted = tmp_path / "planted"
    planted.mkdir()
    ran = tmp_path / "ran.txt"
    for module in ("json", "site", "importlib"):
        (planted / f"{module}.py").write_text(
            f"import pathlib\npathlib.Path({str(ran)!r}).write_text({module!r})\n"
            'def dumps(value): return \'{"pytest": true, "path": []}\'\n'
        )
    monkeypatch.chdir(planted)
    asked = detect(repo, os.environ, python, tmp_path / "cache")

    assert not ran.exists(), f"{ran.read_text()}.py of the working directory ran"
    assert (asked.runner, asked.problems) == (honest.runner, honest.problems)
