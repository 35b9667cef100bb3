"""Finding how a repository is tested when nobody said: its environment, then its test runner.

The environment is looked for in this order: a ``.venv``/``venv`` in the repository, uv's
project environment (``uv.lock``), Poetry's, Hatch's, PDM's. Its interpreter is used directly
(``<venv>/bin/python -m pytest -q``) rather than through ``uv run``/``poetry run``/``hatch run``,
which from a worktree would create or sync a new environment. The tools are asked only where
the environment lives, and always in the main checkout.

The runner: pytest when the environment has it; otherwise the project's own driver, in this
order: tox, nox, a Makefile ``test`` target (the first whose program is installed, else the
first configured, reported missing); otherwise plain pytest with the ``python3`` on PATH.
Everything found is said in ``reasons``; what is missing, with its fix, in ``problems``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import threading
import time
import tomllib
from collections.abc import Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ASK_TIMEOUT = 60.0  # seconds for `poetry env info` and the like
IN_REPO_VENVS = (".venv", "venv")
MAKEFILES = ("GNUmakefile", "makefile", "Makefile")  # the order GNU make reads them in
_MAKE_TEST = re.compile(r"^test\s*::?(?!=)", re.MULTILINE)
SETTINGS_HINT = "set `python:` or `test:` for it (`repos:` in agentos.yaml, or .agentos.yaml)"


@dataclass(frozen=True)
class Environment:
    """A Python environment found for the repository (or the tool that should have one)."""

    tool: str  # venv | uv | poetry | hatch | pdm
    python: Path | None
    venv: Path | None
    reasons: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Detected:
    tool: str
    runner: str  # pytest | tox | nox | make: how arguments reach the tests
    test: str
    python: Path | None
    venv: Path | None
    reasons: tuple[str, ...]
    problems: tuple[str, ...]
    unasked: bool = False  # plain python3 not asked yet whether it has pytest (ask=False)


def venv_python(venv: Path) -> Path | None:
    """The interpreter of a virtual environment, when it has one."""
    for rel in ("bin/python", "bin/python3", "Scripts/python.exe"):
        if (venv / rel).is_file():
            return venv / rel
    return None


def venv_of(python: Path) -> Path | None:
    """The virtual environment an interpreter belongs to (``<venv>/bin/python``)."""
    root = python.parent.parent
    return root if (root / "pyvenv.cfg").is_file() else None


def has_pytest(venv: Path) -> bool:
    """Whether pytest is installed in ``venv`` (looked up on disk: no interpreter started)."""
    patterns = ("lib/python*/site-packages/pytest", "Lib/site-packages/pytest")
    return any(any(venv.glob(p)) for p in patterns)


def pyproject(repo: Path) -> dict[str, Any]:
    try:
        return tomllib.loads((repo / "pyproject.toml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return {}


def _tool_table(project: Mapping[str, Any], name: str) -> Any:
    tool = project.get("tool")
    return tool.get(name) if isinstance(tool, dict) else None


def _ask(argv: list[str], repo: Path) -> str | None:
    """The last line a tool prints (run in the main checkout), or None when it fails."""
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}  # ours is not theirs
    try:
        out = subprocess.run(
            argv,
            cwd=repo,
            env=env,
            capture_output=True,
            text=True,
            timeout=ASK_TIMEOUT,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = [line.strip() for line in out.stdout.splitlines() if line.strip()]
    return lines[-1] if out.returncode == 0 and lines else None


def _from_venv(tool: str, venv: Path, why: str) -> Environment:
    python = venv_python(venv)
    if python is None:
        return Environment(
            tool,
            None,
            venv,
            [why],
            [f"{venv} has no interpreter (bin/python): recreate it, or {SETTINGS_HINT}"],
        )
    return Environment(tool, python, venv, [f"{why}: {python}"])


def _in_repo(repo: Path) -> Environment | None:
    for name in IN_REPO_VENVS:
        venv = repo / name
        if venv_python(venv) is not None:
            return _from_venv("venv", venv, f"a virtual environment in the repository ({name})")
    return None


def _uv(repo: Path, environ: Mapping[str, str]) -> Environment | None:
    if not (repo / "uv.lock").is_file():
        return None
    given = environ.get("UV_PROJECT_ENVIRONMENT")
    venv = repo / Path(given).expanduser() if given else repo / ".venv"  # absolute stays
    why = f"uv.lock: uv's project environment ({'UV_PROJECT_ENVIRONMENT' if given else '.venv'})"
    if venv_python(venv) is not None:
        return _from_venv("uv", venv, why)
    fix = "run `uv sync` there" if shutil.which("uv") else "install uv, then run `uv sync` there"
    return Environment("uv", None, None, [why], [f"{venv} does not exist: {fix}"])


def _poetry(repo: Path, project: Mapping[str, Any]) -> Environment | None:
    if not (repo / "poetry.lock").is_file() and _tool_table(project, "poetry") is None:
        return None
    why = "a Poetry project (poetry.lock or [tool.poetry])"
    if shutil.which("poetry") is None:
        return Environment(
            "poetry",
            None,
            None,
            [why],
            [
                f"`poetry` is not installed, so its environment is unknown: install Poetry, or "
                f"{SETTINGS_HINT}"
            ],
        )
    path = _ask(["poetry", "env", "info", "--path"], repo)
    if path is None:
        return Environment(
            "poetry",
            None,
            None,
            [why],
            [f"Poetry has no environment: run `poetry install` in {repo}"],
        )
    return _from_venv("poetry", Path(path), f"{why}; `poetry env info --path`")


def _hatch(repo: Path, project: Mapping[str, Any]) -> Environment | None:
    table = _tool_table(project, "hatch")
    if not (repo / "hatch.toml").is_file() and not (isinstance(table, dict) and "envs" in table):
        return None
    why = "a Hatch project (hatch.toml or [tool.hatch.envs])"
    if shutil.which("hatch") is None:
        return Environment(
            "hatch",
            None,
            None,
            [why],
            [
                f"`hatch` is not installed, so its environment is unknown: install Hatch, or "
                f"{SETTINGS_HINT}"
            ],
        )
    path = _ask(["hatch", "env", "find"], repo)
    if path is None or venv_python(Path(path)) is None:
        return Environment(
            "hatch",
            None,
            None,
            [why],
            [f"Hatch's default environment does not exist yet: run `hatch env create` in {repo}"],
        )
    return _from_venv("hatch", Path(path), f"{why}; `hatch env find`")


def _pdm(repo: Path) -> Environment | None:
    if not (repo / "pdm.lock").is_file() and not (repo / ".pdm-python").is_file():
        return None
    why = "a PDM project (pdm.lock)"
    try:
        recorded = (repo / ".pdm-python").read_text(encoding="utf-8").strip()
    except OSError:
        recorded = ""
    if recorded and Path(recorded).is_file():
        python = Path(recorded)
        return Environment("pdm", python, venv_of(python), [f"{why}; .pdm-python: {python}"])
    if shutil.which("pdm") is None:
        return Environment(
            "pdm",
            None,
            None,
            [why],
            [
                f"`pdm` is not installed, so its environment is unknown: install PDM, or "
                f"{SETTINGS_HINT}"
            ],
        )
    found = _ask(["pdm", "info", "--python"], repo)
    if found is None or not Path(found).is_file():
        return Environment(
            "pdm", None, None, [why], [f"PDM has no interpreter: run `pdm install` in {repo}"]
        )
    return Environment("pdm", Path(found), venv_of(Path(found)), [f"{why}; `pdm info --python`"])


def find_environment(repo: Path, environ: Mapping[str, str]) -> Environment | None:
    """The repository's Python environment, in the documented order."""
    project = pyproject(repo)
    for found in (
        _in_repo(repo),
        _uv(repo, environ),
        _poetry(repo, project),
        _hatch(repo, project),
        _pdm(repo),
    ):
        if found is not None:
            return found
    return None


# --- runners ------------------------------------------------------------------------------


def tox_config(repo: Path) -> str | None:
    """Where tox is configured, if it is."""
    if (repo / "tox.ini").is_file():
        return "tox.ini"
    if (repo / "tox.toml").is_file():
        return "tox.toml"
    if _tool_table(pyproject(repo), "tox") is not None:
        return "[tool.tox] in pyproject.toml"
    try:
        if "[tox:tox]" in (repo / "setup.cfg").read_text(encoding="utf-8", errors="replace"):
            return "[tox:tox] in setup.cfg"
    except OSError:
        pass
    return None


def make_test_target(repo: Path) -> str | None:
    """The makefile with a ``test`` target, if there is one."""
    for name in MAKEFILES:
        path = repo / name
        if path.is_file():
            text = path.read_text(encoding="utf-8", errors="replace")
            return name if _MAKE_TEST.search(text) else None
    return None


def _runners(repo: Path) -> list[tuple[str, str, str]]:
    """(runner, command, reason) for each driver the repository configures, in order."""
    found = []
    tox = tox_config(repo)
    if tox:
        found.append(("tox", "tox", f"tox is configured ({tox}): `tox` builds from the tree"))
    if (repo / "noxfile.py").is_file():
        found.append(("nox", "nox", "noxfile.py: `nox` builds from the tree"))
    makefile = make_test_target(repo)
    if makefile:
        found.append(("make", "make test", f"{makefile} has a `test` target"))
    return found


def _program(name: str, python: Path | None) -> str | None:
    bindir = str(python.parent) if python is not None else None
    return (shutil.which(name, path=bindir) if bindir else None) or shutil.which(name)


def _has_pytest(python: Path, venv: Path | None, cache_dir: Path | None) -> bool:
    return has_pytest(venv) if venv is not None else _python3_has_pytest(str(python), cache_dir)


# Asking an interpreter whether it has pytest starts it (~100 ms, on every run of a
# repository without an environment of its own), so its answer is kept in the workspace's
# cache with what it depended on: the interpreter's file, the PYTHON* variables and the
# working directory it was asked in, and the folders of its sys.path (and its user site,
# present or not), whose modification times change when a package is installed into them or
# removed. Any of these different, and it is asked again.
# The question runs unconfined, in AgentOS's working directory (often the repository, where
# agents' work lands), which is sys.path[0] of `python -c`: nothing is imported from there
# (a json.py would run, and could make up an answer that is then kept); it is only looked
# in for pytest, as before. The answer: True or False, the interpreter that ran, then the
# folders, NUL-separated.
# A script that starts another interpreter (pyenv's, asdf's and mise's python3 start the
# version a file of theirs names; asking through pyenv's costs ~110 ms of CPU, half a short
# run's) is asked each time where its answer chooses the test command. Where it only
# changes a problem (plain python3 on PATH: python3_problems), its yes is kept, while what
# such a script chooses by is as it was before and after it was asked: the whole
# environment and the version files (below). One that chooses by anything else may be
# answered yes from the cache after it switched to an interpreter without pytest: the
# tests' collection then fails, and says so. A no is never kept for it: a run it refuses is
# always refused on a fresh answer.
_ASK = (
    "import sys\n"
    "here = sys.path.pop(0) if sys.path[:1] == [''] else None\n"
    "import importlib.util as u, os, site\n"
    "if here is not None: sys.path.insert(0, here)\n"
    "user = site.getusersitepackages() if site.ENABLE_USER_SITE else None\n"
    "found = u.find_spec('pytest') is not None\n"
    "paths = [os.path.abspath(p) for p in sys.path] + ([user] if user else [])\n"
    "sys.stdout.write('\\0'.join([str(found), sys.executable, *paths]))"
)
_ANSWERS = "interpreters.json"
# What version managers choose an interpreter by: files in the working directory (and
# PYENV_DIR) or one above it, and global ones (pyenv's in its root; asdf's and mise's in
# HOME and the configuration folders).
_VERSION_FILES = (
    ".python-version", ".tool-versions", "mise.toml", ".mise.toml", "mise.local.toml",
    ".mise.local.toml", ".config/mise.toml", ".config/mise/config.toml", ".mise/config.toml",
    "mise/config.toml", ".rtx.toml",
)  # fmt: skip
_GLOBAL_VERSION_FILES = (".tool-versions", ".asdfrc", ".config/mise/config.toml")  # in HOME
_RACY_NS = 2_000_000_000
_KEPT_ANSWERS = 32


def _stamp(path: str) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


def _asked_in(python: str) -> str | None:
    """What an interpreter's answer depends on, besides its sys.path's folders."""
    try:
        st = os.stat(python)
        here = os.getcwd()
    except OSError:
        return None
    # PYTHON* variables, and HOME: the user site-packages lie under it.
    variables = sorted(
        (k, v) for k, v in os.environ.items() if k.startswith("PYTHON") or k == "HOME"
    )
    real = os.path.realpath(python)
    return json.dumps([python, real, st.st_size, st.st_mtime_ns, st.st_ino, here, variables])


def _chosen_by(python: str) -> list[list[Any]] | None:
    """What a script that starts another interpreter may choose it by: every environment
    variable (as one sha256: the cache is no place for the secrets they hold), and the
    version files, each with its stamp (None where there is none); None when the working
    directory is gone (nothing is kept then)."""
    env = os.environ
    variables = json.dumps(sorted(env.items())).encode("utf-8", "surrogateescape")
    try:
        here = Path(os.getcwd())
    except OSError:
        return None
    starts = [here] + ([Path(env["PYENV_DIR"])] if env.get("PYENV_DIR") else [])
    files = [str(d / name) for s in starts for d in (s, *s.parents) for name in _VERSION_FILES]
    roots = [Path(python).parent.parent, Path(os.path.realpath(python)).parent.parent]
    roots += [Path(env["PYENV_ROOT"])] if env.get("PYENV_ROOT") else []
    files += [str(root / "version") for root in roots]  # pyenv's: ROOT/shims/python3
    if env.get("HOME"):
        files += [str(Path(env["HOME"]) / name) for name in _GLOBAL_VERSION_FILES]
    config = env.get("XDG_CONFIG_HOME")
    files += [str(Path(config) / "mise" / "config.toml")] if config else []
    files += ["/etc/mise/config.toml"]
    return [["env", hashlib.sha256(variables).hexdigest()], *([f, _stamp(f)] for f in files)]


def _same_choice(kept: object, python: str) -> bool:
    """Whether a script would choose as it did when its answer was kept."""
    now = _chosen_by(python)
    return now is not None and kept == now


def _python3_has_pytest(
    python: str, cache_dir: Path | None = None, *, keep_yes_of_a_script: bool = False
) -> bool:
    """Whether ``python`` has pytest, kept in ``cache_dir`` where it can be (above); with
    ``keep_yes_of_a_script``, a script's yes too (its answer then changes only a problem)."""
    key = _asked_in(python) if cache_dir is not None else None
    kept: dict[str, Any] = {}
    if key is not None and cache_dir is not None:
        with suppress(OSError, ValueError):
            loaded = json.loads((cache_dir / _ANSWERS).read_bytes())
            kept = loaded if isinstance(loaded, dict) else {}
        answer = kept.get(key)
        with suppress(TypeError, ValueError, KeyError):
            if (
                isinstance(answer, dict)
                and all(_stamp(path) == stamp for path, stamp in answer["stamps"])
                and (
                    answer.get("chosen_by") is None
                    or (keep_yes_of_a_script and _same_choice(answer["chosen_by"], python))
                )
            ):
                return bool(answer["pytest"])
    chosen_before = _chosen_by(python) if keep_yes_of_a_script else None
    try:
        out = subprocess.run(
            [python, "-c", _ASK],
            capture_output=True,
            text=True,
            timeout=ASK_TIMEOUT,
            stdin=subprocess.DEVNULL,
        )
        told = out.stdout.split("\0")
        if out.returncode != 0 or told[0] not in ("True", "False") or len(told) < 2:
            return False
        found, ran, folders = told[0] == "True", told[1], told[2:]
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return False
    itself = os.path.realpath(ran) == os.path.realpath(python)
    found_stamps = [(p, _stamp(p)) for p in folders]
    # A folder changed within the last seconds may change again within its timestamp's
    # granularity (the router's "racy clean" rule): such an answer is not kept.
    recent = time.time_ns() - _RACY_NS
    settled = all(s is None or s < recent for _, s in found_stamps)
    stamps: list[list[Any]] = [[p, s] for p, s in found_stamps]
    chosen_by = None if itself else _chosen_by(python)
    if not itself:  # a script: only a yes, where asked to, its choice unchanged
        settled = (
            settled
            and found
            and chosen_by is not None
            and chosen_by == chosen_before
            and all(s is None or s < recent for _, s in chosen_by[1:])
        )
    if key is not None and cache_dir is not None and settled:
        kept.pop(key, None)
        kept[key] = {"pytest": found, "stamps": stamps, "chosen_by": chosen_by}
        while len(kept) > _KEPT_ANSWERS:
            kept.pop(next(iter(kept)))
        with suppress(OSError):  # a cache: no fsync, a torn file is asked again
            cache_dir.mkdir(parents=True, exist_ok=True)
            tmp = cache_dir / f".{_ANSWERS}.{os.getpid()}.{threading.get_ident()}.tmp"
            tmp.write_text(json.dumps(kept), encoding="utf-8")
            os.replace(tmp, cache_dir / _ANSWERS)
    return found


def pytest_command(python: Path | str) -> str:
    return f"{shlex.quote(str(python))} -m pytest -q"


def detect(
    repo: Path,
    environ: Mapping[str, str],
    python: Path | None = None,
    cache_dir: Path | None = None,
    *,
    ask: bool = True,
) -> Detected:
    """How ``repo`` is tested: its environment (or the interpreter given) and its runner.
    An interpreter's answers are kept in ``cache_dir`` (the workspace's cache) when given.
    Without ``ask``, plain ``python3`` on PATH (the last resort, whose answer changes no
    command, only a problem) is not asked whether it has pytest: ``unasked`` says so, and
    :func:`python3_problems` asks it later."""
    if python is not None:
        env: Environment | None = Environment("custom", python, venv_of(python))
    else:
        env = find_environment(repo, environ)
    reasons = list(env.reasons) if env else []
    problems = list(env.problems) if env else []
    tool = env.tool if env else "pytest"
    py = env.python if env else None
    venv = env.venv if env else None
    runs = py is not None and os.access(py, os.X_OK)  # a missing one: check_profile says so
    if py is not None and runs and _has_pytest(py, venv, cache_dir):
        reasons.append(f"pytest is installed in {venv or py}: its interpreter runs the suite")
        return Detected(tool, "pytest", pytest_command(py), py, venv, tuple(reasons), ())
    if py is not None and runs:
        reasons.append(f"pytest is not installed in {venv or py}")
    runners = _runners(repo)
    for runner, command, why in runners:
        program = command.split()[0]
        if _program(program, py) is not None:
            return Detected(runner, runner, command, py, venv, (*reasons, why), tuple(problems))
        reasons.append(f"{why}, but `{program}` is not installed")
    if runners:
        runner, command, why = runners[0]
        program = command.split()[0]
        fix = (
            f"`{program}` is not installed: install it (pip install {program}), or {SETTINGS_HINT}"
        )
        return Detected(runner, runner, command, py, venv, tuple(reasons), (*problems, fix))
    if py is not None:
        if runs:
            problems.append(
                f"pytest is not installed in {venv or py}: install the test dependencies there "
                f"({shlex.quote(str(py))} -m pip install pytest), or {SETTINGS_HINT}"
            )
        return Detected(
            tool, "pytest", pytest_command(py), py, venv, tuple(reasons), tuple(problems)
        )
    if env is not None:  # a tool's project whose environment could not be found
        command = f"{env.tool} run python -m pytest -q"
        reasons.append(f"no environment found: `{command}` would make one")
        return Detected(tool, "pytest", command, None, None, tuple(reasons), tuple(problems))
    python3 = shutil.which("python3")
    reasons.append("no environment, tox, nox or Makefile test target: plain pytest on PATH")
    if python3 is None:
        problems.append(f"`python3` is not on PATH: install Python 3, or {SETTINGS_HINT}")
    elif ask:
        problems.extend(python3_problems(python3, cache_dir))
    return Detected(
        "pytest",
        "pytest",
        "python3 -m pytest -q",
        Path(python3) if python3 else None,
        None,
        tuple(reasons),
        tuple(problems),
        unasked=python3 is not None and not ask,
    )


def python3_problems(python3: str, cache_dir: Path | None = None) -> list[str]:
    """The problem of a repository tested with plain ``python3 -m pytest``: pytest missing
    for ``python3`` (asking it starts it: ~100 ms when its answer cannot be kept)."""
    if _python3_has_pytest(python3, cache_dir, keep_yes_of_a_script=True):
        return []
    return [
        f"pytest is not installed for {python3}: create the project's environment "
        f"(python3 -m venv .venv, then install the project and its test dependencies "
        f"into it), or {SETTINGS_HINT}"
    ]
