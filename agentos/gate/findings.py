"""What an agent did to the tests, read from the diff between the base and its tree.

A deterministic reading, for messages a person and the agent can act on: a test file
deleted or renamed, a test of the base removed or changed, a skip or xfail added (as a
decorator, a marker or a call in the body), a ``conftest.py``, a pytest plugin, an import
hook (``sitecustomize.py``, ``usercustomize.py``, ``.pth``) or the test runner's
configuration added or changed. It is not the verdict: the judged run (the base's tests
against the agent's code) is, and it refuses what this reading misses (an obfuscated
skip, a patch of the runner). Each finding refuses the check unless the user allowed test
changes for its path (``--allow-test-changes``, the request's words, a check's
``allow_test_changes``).
"""

from __future__ import annotations

import ast
import configparser
import fnmatch
import re
import sys
import threading
import tomllib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import PurePosixPath

from agentos.gate.detect import IN_REPO_VENVS
from agentos.gate.trees import Entry

# Files that decide how the tests run, by name, anywhere in the tree.
IMPORT_HOOKS = ("sitecustomize.py", "usercustomize.py")
PYTEST_FILES = ("pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml")
MAKEFILES = ("GNUmakefile", "makefile", "Makefile")
SHARED_CONFIG = ("pyproject.toml", "setup.cfg", "tox.ini", "tox.toml")
REPO_FILE = ".agentos.yaml"
# What chooses the interpreter the tests run with (and AgentOS asks, unconfined, whether it
# has pytest): a version manager's files, PDM's recorded interpreter, Poetry's and Hatch's
# environment settings, and a virtual environment in the repository (IN_REPO_VENVS).
ENVIRONMENT_FILES = (
    ".pdm-python", ".python-version", ".tool-versions", "mise.toml", ".mise.toml",
    "poetry.toml",
)  # fmt: skip
_TEST_DIRS = frozenset({"tests", "test", "testing"})
_ONE_BY_ONE = 5  # tests removed from one file named one by one; more are counted
_SKIPPING = re.compile(
    r"skip|xfail|expectedfailure|skiptest|importorskip|__unittest_skip__", re.IGNORECASE
)


@dataclass(frozen=True)
class Finding:
    """One thing the agent did to the tests or to how they run."""

    kind: str  # e.g. "test deleted", "skip added", "runner configuration changed"
    path: str  # the file (and test) it is about
    detail: str = ""
    allowed: bool = False  # the user allowed test changes there: recorded, not refused

    def line(self) -> str:
        text = f"{self.kind}: {self.path}" + (f" ({self.detail})" if self.detail else "")
        return text + (" [allowed]" if self.allowed else "")

    def as_dict(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "path": self.path,
            "detail": self.detail,
            "allowed": self.allowed,
        }


def is_test_path(path: str, test_files: frozenset[str] = frozenset()) -> bool:
    """A test file or test data: what the base's tests are made of."""
    if path in test_files:
        return True
    parts = PurePosixPath(path).parts
    name = parts[-1]
    if any(p in _TEST_DIRS for p in parts[:-1]):
        return True
    # test*.py is what unittest discovers; testutils.py, testing.py are the tests' helpers.
    return name == "conftest.py" or (
        name.endswith(".py") and (name.startswith("test") or name.endswith("_test.py"))
    )


def is_import_hook(path: str) -> bool:
    """Python runs it, or loads plugins from it, before any test: ``sitecustomize.py``,
    ``usercustomize.py``, a ``.pth`` file, an installed package's metadata (a
    ``*.dist-info``/``*.egg-info`` directory on the path declares pytest plugins), bytecode
    (an unchecked ``.pyc`` is loaded without its source), a module at the top of the tree
    named like one of the standard library's or the test runner's (the working directory
    comes first on ``sys.path``: pytest would import it while it starts)."""
    parts = PurePosixPath(path).parts
    return (
        parts[-1] in IMPORT_HOOKS
        or parts[-1].endswith((".pth", ".pyc", ".pyo"))
        or "__pycache__" in parts
        or any(p.endswith((".dist-info", ".egg-info", ".egg-link")) for p in parts)
        or _shadows(parts)
    )


_RUNNER_MODULES = frozenset({"pytest", "_pytest", "pluggy", "py", "iniconfig", "packaging"})


def _shadows(parts: tuple[str, ...]) -> bool:
    if parts[0] in ("src", "lib") and len(parts) > 1:
        parts = parts[1:]
    top = parts[0].removesuffix(".py") if len(parts) == 1 else parts[0]
    if len(parts) == 1 and not parts[0].endswith(".py"):
        return False
    names: frozenset[str] = getattr(sys, "stdlib_module_names", frozenset())
    return top in names or top in _RUNNER_MODULES


def is_runner_file(path: str) -> bool:
    """A file that decides how the tests run: their configuration, an import hook, a
    makefile, tox's or nox's configuration, AgentOS's own ``.agentos.yaml``."""
    name = PurePosixPath(path).name
    return (
        name in PYTEST_FILES
        or is_import_hook(path)
        or path in MAKEFILES
        or path in SHARED_CONFIG
        or path in ("noxfile.py", REPO_FILE)
        or name == ".gitattributes"  # how git checks the files out (a filter can rewrite them)
        or is_environment_file(path)
        or path == "hatch.toml"
    )


def is_environment_file(path: str) -> bool:
    """A file that chooses the interpreter the tests run with (:data:`ENVIRONMENT_FILES`,
    or anything in a virtual environment's folder at the top of the repository)."""
    return path in ENVIRONMENT_FILES or PurePosixPath(path).parts[0] in IN_REPO_VENVS


@dataclass(frozen=True)
class Change:
    status: str  # A, D, M, R (renamed), T (type changed)
    path: str
    old: str | None = None  # for a rename, the path at the base


def read_findings(
    changes: list[Change],
    base: dict[str, Entry],
    agent: dict[str, Entry],
    blob: Callable[[str], bytes],
    *,
    test_files: frozenset[str],
    test_ids: dict[str, list[str]],
    plugins: frozenset[str],
    runner: str,
) -> list[Finding]:
    """Every finding in ``changes`` (base -> agent). ``test_ids`` are the base's collected
    tests by file (their qualified names); ``plugins`` the base's pytest plugin files."""
    found: list[Finding] = []
    for change in changes:
        found += _finding(change, base, agent, blob, test_files, test_ids, plugins, runner)
    return found


def _text(blob: Callable[[str], bytes], entry: Entry | None) -> str | None:
    if entry is None:
        return None
    try:
        return blob(entry.sha).decode("utf-8")
    except UnicodeDecodeError:
        return None


def _finding(
    change: Change,
    base: dict[str, Entry],
    agent: dict[str, Entry],
    blob: Callable[[str], bytes],
    test_files: frozenset[str],
    test_ids: dict[str, list[str]],
    plugins: frozenset[str],
    runner: str,
) -> list[Finding]:
    path, status = change.path, change.status
    name = PurePosixPath(path).name
    old_path = change.old or path
    was = base.get(old_path)
    now = agent.get(path) if status != "D" else None
    n_tests = len(test_ids.get(old_path, ()))
    tests_note = f"{n_tests} test{'s' * (n_tests != 1)} of the base" if n_tests else ""
    if is_import_hook(path):
        verb = "added" if status == "A" else "deleted" if status == "D" else "changed"
        return [Finding(f"import hook {verb}", path, "Python or pytest loads it before any test")]
    if name == "conftest.py":
        verb = "added" if status == "A" else "deleted" if status == "D" else "changed"
        return [Finding(f"conftest {verb}", path)]
    if old_path in plugins and status != "A":
        return [Finding("pytest plugin changed", old_path, "the base registers it with pytest")]
    if status == "R":
        if is_test_path(old_path, test_files):
            return [Finding("test file renamed", f"{old_path} -> {path}", tests_note)]
        return []
    if status == "D":
        if old_path in test_files:
            return [Finding("test file deleted", old_path, tests_note)]
        if is_test_path(old_path, test_files):
            return [Finding("test data deleted", old_path)]
        return _runner_finding(path, None, _text(blob, was), runner)
    if status == "A":
        if is_runner_file(path):
            return _runner_finding(path, _text(blob, now), None, runner)
        return []
    # modified (or its type changed)
    if is_runner_file(path):
        return _runner_finding(path, _text(blob, now), _text(blob, was), runner)
    if path in test_files or (is_test_path(path, test_files) and path.endswith(".py")):
        return _test_module_findings(path, _text(blob, was), _text(blob, now), test_ids)
    if is_test_path(path, test_files):
        return [Finding("test data changed", path, "the base's tests read it")]
    return []


def may_add_tests(
    change: Change,
    base: dict[str, Entry],
    agent: dict[str, Entry],
    blob: Callable[[str], bytes],
    test_files: frozenset[str],
) -> bool:
    """Whether ``change`` can hold a test the base has not: a test file added or renamed,
    or one whose new version defines a function or class the base's does not (a change
    to the base's own tests adds none: it is a finding, and they run as the base has them)."""
    if change.status == "D" or not is_test_path(change.path, test_files):
        return False
    if not change.path.endswith(".py") or change.status != "M":
        return change.path.endswith(".py") or change.status in ("A", "R")
    was = _parse(_text(blob, base.get(change.path)))
    now = _parse(_text(blob, agent.get(change.path)))
    if was is None or now is None:
        return True
    return bool(set(_defs(now.body)) - set(_defs(was.body)))


# --- test modules ---------------------------------------------------------------------------


# One parse at a time in this process: CPython 3.11 keeps the AST constructor's recursion
# depth in interpreter-wide state, so two threads parsing at once (the gates of a run's
# agents run in parallel) can fail with "SystemError: AST constructor recursion depth
# mismatch" (python/cpython#106905).
_PARSING = threading.Lock()


def _parse(text: str | None) -> ast.Module | None:
    if text is None:
        return None
    try:
        with _PARSING:
            return ast.parse(text)
    except (SyntaxError, ValueError):
        return None


_Def = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef


def _defs(body: Iterable[ast.stmt], prefix: str = "") -> dict[str, _Def]:
    """Every function and class of a module, nested in classes and in the module's ``if``,
    ``try`` and ``with`` blocks (``if sys.version_info ...: def test_x``), by qualified
    name; the first definition of a name counts."""
    found: dict[str, _Def] = {}
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            name = prefix + node.name
            found.setdefault(name, node)
            if isinstance(node, ast.ClassDef):
                for key, value in _defs(node.body, name + ".").items():
                    found.setdefault(key, value)
        elif isinstance(node, ast.If | ast.Try | ast.With):
            blocks = [node.body, getattr(node, "orelse", []), getattr(node, "finalbody", [])]
            blocks += [h.body for h in getattr(node, "handlers", [])]
            for block in blocks:
                for key, value in _defs(block, prefix).items():
                    found.setdefault(key, value)
    return found


def _dump(node: ast.AST | list[ast.stmt]) -> str:
    if isinstance(node, list):
        return "\n".join(ast.dump(n) for n in node)
    return ast.dump(node)


def _own_body(node: _Def) -> list[ast.stmt]:
    """A class's statements but its methods and nested classes (compared on their own)."""
    if not isinstance(node, ast.ClassDef):
        return list(node.body)
    return [
        s
        for s in node.body
        if not isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    ]


def _skipping_calls(nodes: Iterable[ast.stmt]) -> set[str]:
    found = set()
    for stmt in nodes:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Call | ast.Raise | ast.Attribute | ast.Name):
                text = ast.unparse(node)
                if _SKIPPING.search(text):
                    found.add(text if len(text) <= 80 else text[:77] + "...")
    return found


def _compare_def(qual: str, path: str, was: _Def, now: _Def) -> list[Finding]:
    where = f"{path}::{qual.replace('.', '::')}"
    found: list[Finding] = []
    before = [ast.unparse(d) for d in was.decorator_list]
    after = [ast.unparse(d) for d in now.decorator_list]
    for dec in after:
        if dec not in before:
            kind = (
                "xfail added"
                if re.search(r"xfail|expectedfailure", dec, re.IGNORECASE)
                else "skip added"
                if _SKIPPING.search(dec)
                else "decorator added"
            )
            found.append(Finding(kind, where, f"@{dec}"))
    for dec in before:
        if dec not in after:
            found.append(Finding("decorator removed", where, f"@{dec}"))
    if isinstance(was, ast.ClassDef) and isinstance(now, ast.ClassDef):
        if [ast.unparse(b) for b in was.bases] != [ast.unparse(b) for b in now.bases]:
            found.append(Finding("test class changed", where, "its base classes"))
    else:
        if _dump(was.args) != _dump(now.args):  # type: ignore[union-attr]
            found.append(Finding("test changed", where, "its parameters"))
    old_body, new_body = _own_body(was), _own_body(now)
    if _dump(old_body) != _dump(new_body):
        added = _skipping_calls(new_body) - _skipping_calls(old_body)
        if added:
            text = ", ".join(sorted(added))
            kind = (
                "xfail added" if re.search(r"xfail|expectedfailure", text, re.I) else "skip added"
            )
            found.append(Finding(kind, where, text))
        else:
            found.append(Finding("test changed", where))
    return found


def _test_module_findings(
    path: str, old: str | None, new: str | None, test_ids: dict[str, list[str]]
) -> list[Finding]:
    """A test file of the base the agent changed: what of the base it no longer holds as
    it was (tests, helpers, module statements). Tests it only added are not findings."""
    was, now = _parse(old), _parse(new)
    if was is None:
        return []  # the base's own file does not parse: nothing to compare with
    if now is None:
        return [Finding("test file broken", path, "it no longer parses")]
    found: list[Finding] = []
    old_defs, new_defs = _defs(was.body), _defs(now.body)
    tests = {_qualname(t) for t in test_ids.get(path, ())}
    removed = [
        q for q in sorted(tests) if q in old_defs and q not in new_defs
    ]  # (a test the file does not define by that name is generated or imported)
    if len(removed) > _ONE_BY_ONE:
        found.append(Finding("tests removed", path, f"{len(removed)} tests of the base"))
    else:
        found += [Finding("test removed", f"{path}::{q.replace('.', '::')}") for q in removed]
    for qual, node in old_defs.items():
        if qual not in new_defs:
            if qual not in tests and not any(t.startswith(qual + ".") for t in tests):
                found.append(Finding("helper removed", f"{path}::{qual.replace('.', '::')}"))
            continue
        found += _compare_def(qual, path, node, new_defs[qual])
    # Module statements of the base (imports, marks, constants, the ``if`` blocks tests are
    # defined in, without the tests compared above): each must still be there as it was.
    remaining = [_skeleton(s) for s in now.body if not isinstance(s, _Def)]
    for stmt in was.body:
        if isinstance(stmt, _Def):
            continue
        dumped = _skeleton(stmt)
        if dumped in remaining:
            remaining.remove(dumped)
            continue
        text = ast.unparse(stmt).splitlines()[0]
        kind = "skip added" if "pytestmark" in text and _SKIPPING.search(new or "") else None
        found.append(
            Finding(
                kind or "test module changed",
                path,
                f"line {stmt.lineno}: " + (text if len(text) <= 80 else text[:77] + "..."),
            )
        )
    had_marks = any("pytestmark" in ast.unparse(s) for s in was.body if isinstance(s, ast.Assign))
    for stmt in now.body:
        marks = isinstance(stmt, ast.Assign | ast.AnnAssign) and "pytestmark" in ast.unparse(stmt)
        if marks and not had_marks:
            found.append(Finding("marker added", path, f"line {stmt.lineno}: {ast.unparse(stmt)}"))
    return found


class _Names(ast.NodeTransformer):
    """Functions and classes replaced by their names: a block's own statements only."""

    def _name(self, node: ast.AST) -> ast.AST:
        return ast.Expr(ast.Constant(getattr(node, "name", "")))

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _name


def _skeleton(stmt: ast.stmt) -> str:
    import copy

    return ast.dump(_Names().visit(copy.deepcopy(stmt)))


def _qualname(test_id: str) -> str:
    """``tests/x.py::TestA::test_b[1]`` -> ``TestA.test_b``."""
    rest = test_id.split("::", 1)[1] if "::" in test_id else test_id
    rest = rest.split("[", 1)[0]
    return rest.replace("::", ".")


def qualname_in_file(test_id: str, file: str | None) -> str:
    """The qualified name of a collected test inside its file: pytest node ids carry the
    file; unittest ids are ``package.module.Class.method``."""
    if "::" in test_id or file is None:
        return _qualname(test_id)
    dotted = PurePosixPath(file).with_suffix("").parts
    parts = test_id.split(".")
    for start in range(len(dotted)):
        suffix = list(dotted[start:])
        if parts[: len(suffix)] == suffix:
            return ".".join(parts[len(suffix) :])
    return test_id


# --- how the tests run ---------------------------------------------------------------------


def _runner_finding(path: str, new: str | None, old: str | None, runner: str) -> list[Finding]:
    name = PurePosixPath(path).name
    verb = "added" if old is None else "deleted" if new is None else "changed"
    if name in PYTEST_FILES:
        return [Finding(f"test configuration {verb}", path, _ini_detail(new, old, "pytest"))]
    if path == REPO_FILE:
        return [Finding(f"test settings {verb}", path, "how AgentOS tests the repository")]
    if is_environment_file(path):
        return [Finding(f"test environment {verb}", path, "which interpreter runs the tests")]
    if path == "hatch.toml":
        return _hatch_env_findings(path, _toml(old), _toml(new), "envs")
    if name == ".gitattributes":
        return [Finding(f"git attributes {verb}", path, "how git checks the files out")]
    if path == "pyproject.toml":
        return _toml_finding(path, new, old, runner)
    if path in ("setup.cfg", "tox.ini"):
        sections = {"setup.cfg": ["tool:pytest", "tox:tox"], "tox.ini": ["pytest"]}[path]
        if path == "tox.ini" and runner == "tox":
            sections = ["*"]
        return _ini_finding(path, new, old, sections)
    if path == "tox.toml" and runner == "tox":
        return [Finding(f"tox configuration {verb}", path)]
    if path in MAKEFILES and runner == "make":
        return _make_finding(path, new, old)
    if path == "noxfile.py" and runner == "nox":
        return [Finding(f"nox configuration {verb}", path)]
    return []


def _ini_detail(new: str | None, old: str | None, section: str) -> str:
    """The options of ``[section]`` (or ``[tool.pytest...]``) that differ, with values."""
    before, after = _ini_options(old, section), _ini_options(new, section)
    diff = [
        f"{key} = {after.get(key, '(removed)')}"
        for key in sorted(set(before) | set(after))
        if before.get(key) != after.get(key)
    ]
    text = "; ".join(diff)
    return text if len(text) <= 200 else text[:197] + "..."


def _ini_options(text: str | None, section: str) -> dict[str, str]:
    if not text:
        return {}
    if text.lstrip().startswith("[tool") or section == "tool.pytest":
        tool = _toml(text).get("tool")
        table = tool.get("pytest", {}) if isinstance(tool, dict) else {}
        if isinstance(table, dict) and isinstance(table.get("ini_options"), dict):
            table = {**table, **table["ini_options"]}
            table.pop("ini_options", None)
        return {str(k): str(v) for k, v in table.items()} if isinstance(table, dict) else {}
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    try:
        parser.read_string(text)
    except configparser.Error:
        return {"(unreadable)": text[:80]}
    for name in (section, "pytest", "tool:pytest"):
        if parser.has_section(name):
            return dict(parser.items(name))
    return {}


def _toml(text: str | None) -> dict[str, object]:
    if not text:
        return {}
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return {"(unreadable)": True}


def _toml_finding(path: str, new: str | None, old: str | None, runner: str) -> list[Finding]:
    before, after = _toml(old), _toml(new)
    found = []
    if "(unreadable)" in after and "(unreadable)" not in before:
        return [Finding("test configuration changed", path, "it no longer parses as TOML")]

    def table(data: dict[str, object], *keys: str) -> object:
        for key in keys:
            data = data.get(key, {}) if isinstance(data, dict) else {}  # type: ignore[assignment]
        return data

    if table(before, "tool", "pytest") != table(after, "tool", "pytest"):
        found.append(
            Finding(
                "test configuration changed",
                f"{path} [tool.pytest]",
                _ini_detail(new, old, "tool.pytest"),
            )
        )
    for keys in (("project", "entry-points", "pytest11"), ("tool", "tox")):
        if keys[0] == "tool" and runner != "tox":
            continue
        if table(before, *keys) != table(after, *keys):
            found.append(Finding("test configuration changed", f"{path} [{'.'.join(keys)}]"))

    return found + _hatch_env_findings(path, before, after, "tool", "hatch", "envs")


def _hatch_env_findings(
    path: str, before: dict[str, object], after: dict[str, object], *keys: str
) -> list[Finding]:
    """A finding when Hatch's environments (the table at ``keys``) moved or took another
    interpreter between ``before`` and ``after``."""
    if _hatch_envs(before, *keys) == _hatch_envs(after, *keys):
        return []
    where = f"{path} [{'.'.join(keys)}]"
    return [Finding("test environment changed", where, "which interpreter runs the tests")]


def _hatch_envs(data: dict[str, object], *keys: str) -> dict[str, object]:
    """Where each of Hatch's environments (the table at ``keys``) is, and which interpreter
    it takes: their dependencies and scripts are the project's to change."""
    envs: object = data
    for key in keys:
        envs = envs.get(key, {}) if isinstance(envs, dict) else {}
    return {
        name: {k: v for k, v in env.items() if k in ("path", "type", "python")}
        for name, env in (envs.items() if isinstance(envs, dict) else ())
        if isinstance(env, dict)
    }


def _ini_finding(path: str, new: str | None, old: str | None, sections: list[str]) -> list[Finding]:
    def read(text: str | None) -> dict[str, dict[str, str]]:
        parser = configparser.ConfigParser(interpolation=None, strict=False)
        try:
            parser.read_string(text or "")
        except configparser.Error:
            return {"(unreadable)": {}}
        return {s: dict(parser.items(s)) for s in parser.sections()}

    before, after = read(old), read(new)
    found = []
    for section in sorted(set(before) | set(after)):
        if not any(fnmatch.fnmatch(section, pattern) for pattern in sections):
            continue
        if before.get(section) != after.get(section):
            keys = sorted(
                k
                for k in set(before.get(section, {})) | set(after.get(section, {}))
                if before.get(section, {}).get(k) != after.get(section, {}).get(k)
            )
            detail = "; ".join(f"{k} = {after.get(section, {}).get(k, '(removed)')}" for k in keys)
            found.append(Finding("test configuration changed", f"{path} [{section}]", detail[:200]))
    return found


_MAKE_RULE = re.compile(r"^([^\s:=#][^:=#]*?)\s*::?(?!=)", re.MULTILINE)


def _make_finding(path: str, new: str | None, old: str | None) -> list[Finding]:
    """A makefile's ``test`` rule, its variables, exports and includes: what ``make test``
    runs. Other rules may change."""

    def relevant(text: str | None) -> list[str]:
        if not text:
            return []
        lines: list[str] = []
        in_test = False
        for line in text.replace("\\\n", " ").splitlines():
            if line.startswith("\t"):
                if in_test:
                    lines.append(line)
                continue
            rule = _MAKE_RULE.match(line)
            if rule:
                in_test = "test" in rule.group(1).split()
                if in_test:
                    lines.append(line)
                continue
            in_test = False
            stripped = line.strip()
            if stripped and not stripped.startswith("#"):
                lines.append(stripped)  # variables, exports, includes, conditionals
        return lines

    before, after = relevant(old), relevant(new)
    if before == after:
        return []
    changed = [line.strip() for line in after if line not in before][:3]
    return [
        Finding(
            "test command changed",
            f"{path} (make test)",
            "; ".join(changed) or "lines of the test rule were removed",
        )
    ]
