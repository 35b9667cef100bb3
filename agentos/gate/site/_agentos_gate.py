"""AgentOS's test recorder: the per-test outcomes the gate trusts, written outside the tree.

The gate (:mod:`agentos.gate.judge`) runs a repository's own test command with
``AGENTOS_GATE_DIR`` set to a directory outside the tree under test. In that process:

- pytest loads this module as a plugin (``PYTEST_PLUGINS=_agentos_gate``) before any
  conftest or test module; for unittest, AgentOS's ``sitecustomize`` calls
  :func:`install_unittest` before any code of the repository is imported;
- each test's outcome is written as a line of ``<dir>/<runner>-<pid>.jsonl`` the moment it
  is known, so a process that ends early leaves what it ran and no seal;
- pytest's outcome is computed here from what the test raised (``CallInfo.excinfo``), not
  read from the report another plugin may have changed; a report that says otherwise is
  recorded as forged;
- the runner's classes and functions (pytest's runner, reports, skipping, pluggy's calls,
  unittest's case, result, suite and runner) are snapshotted before any code of the
  repository runs and compared after collection and after every test: a replaced function,
  method or code object is recorded;
- the end of the session writes a seal: the number of lines, their sha256 and an HMAC of
  it under ``AGENTOS_GATE_NONCE``. No seal means the process did not end the way a test
  run ends (``os._exit``, a signal, a crash).

``AGENTOS_GATE_MODE=collect`` records the tests that would run and runs none of them;
``AGENTOS_GATE_ONLY`` (a file, one id per line) runs only those tests and
``AGENTOS_GATE_EXCEPT`` all but those. Ids are pytest node ids, or unittest ``test.id()``.

This guards against code under test that fakes the runner without knowing AgentOS; code
written against this module's own source can forge anything in its process (docs/gate.md).

It runs under the project's interpreter, which may be older than AgentOS's: standard
library only, syntax Python 3.7 understands, and it must never break a test run.

PYTEST_DONT_REWRITE: imported before pytest (by sitecustomize), so pytest must not try to
rewrite its asserts (it would warn, and a suite run with ``-W error`` would stop).
"""

from __future__ import annotations

import ast
import atexit
import contextlib
import hashlib
import hmac
import json
import os
import sys
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

DIR = "AGENTOS_GATE_DIR"
MODE = "AGENTOS_GATE_MODE"
ONLY = "AGENTOS_GATE_ONLY"
EXCEPT = "AGENTOS_GATE_EXCEPT"
NONCE = "AGENTOS_GATE_NONCE"
TREE = "AGENTOS_GATE_TREE"

# What the runners are made of: every function and class of these modules, and everything
# each of those classes defines, must be the same object after collection and after each
# test as before any code of the repository ran.
_PYTEST_MODULES = (
    "_pytest.runner",
    "_pytest.reports",
    "_pytest.skipping",
    "_pytest.outcomes",
    "_pytest.python",
    "_pytest.unittest",
    "_pytest.main",
    "_pytest.terminal",
    "_pytest.nodes",
    "_pytest.junitxml",
    "pluggy._callers",
    "pluggy._hooks",
    "pluggy._manager",
    "pluggy._result",
)
_UNITTEST_MODULES = (
    "unittest.case",
    "unittest.result",
    "unittest.suite",
    "unittest.runner",
    "unittest.main",
    "unittest.loader",
    "unittest.signals",
)
# Besides those, every module of these packages loaded when the snapshot is taken (what a
# test calls, pytest.raises, approx, monkeypatch, the assertion rewriter, is the runner too).
_RUNNER_PACKAGES = ("_pytest", "pytest", "pluggy", "unittest")


def _runner_modules(named: tuple[str, ...]) -> tuple[str, ...]:
    loaded = [
        name
        for name in list(sys.modules)
        if name.split(".", 1)[0] in _RUNNER_PACKAGES and name not in named
    ]
    return named + tuple(sorted(loaded))


if TYPE_CHECKING:  # (not at run time: Python 3.7 has no tuple[...])
    Phase = tuple[str, str, str, bool]  # (when, our outcome, the report's outcome, xfail)


class _Records:
    """One process's record file: lines appended one by one, as they happen."""

    def __init__(self, directory: str, runner: str) -> None:
        self.pid = os.getpid()
        self.path = os.path.join(directory, f"{runner}-{self.pid}.jsonl")
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)
        self.fd = os.open(self.path, flags, 0o600)
        self.digest = hashlib.sha256()
        self.lines = 0
        self.sealed = False

    def write(self, kind: str, **fields: Any) -> None:
        if os.getpid() != self.pid or self.sealed:  # a forked child is not the run
            return
        fields["t"] = kind
        line = (json.dumps(fields, sort_keys=True, default=str) + "\n").encode("utf-8")
        self.digest.update(line)
        self.lines += 1
        with contextlib.suppress(OSError):
            os.write(self.fd, line)

    def seal(self, **fields: Any) -> None:
        if os.getpid() != self.pid or self.sealed:
            return
        digest = self.digest.hexdigest()
        key = os.environ.get(NONCE, "").encode("utf-8")
        mac = hmac.new(key, digest.encode("ascii"), hashlib.sha256).hexdigest()
        self.write("end", lines=self.lines, digest=digest, mac=mac, **fields)
        self.sealed = True


def _ids(variable: str) -> set[str] | None:
    path = os.environ.get(variable)
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as fh:
            return {line.rstrip("\n") for line in fh if line.strip()}
    except OSError:
        return set()


def _wanted(test_id: str, only: set[str] | None, skip: set[str] | None) -> bool:
    if only is not None and test_id not in only:
        return False
    return not (skip is not None and test_id in skip)


# --- the snapshot --------------------------------------------------------------------------

_MISSING = object()


def _behaviour(value: object) -> bool:
    """What a class does, not what it holds: functions, methods, properties, classes."""
    return callable(value) or isinstance(value, (classmethod, staticmethod, property))


class _Snapshot:
    """What the runner is made of, taken once; :meth:`changes` says what differs now."""

    def __init__(self, modules: Iterable[str], skip: Iterable[str] = ()) -> None:
        self.entries: list[tuple[str, Any, str, object]] = []  # (owner, namespace, key, value)
        self.codes: list[tuple[str, object, object]] = []  # (label, function, code)
        self.classes: list[tuple[str, type, set[str]]] = []  # (label, class, its names)
        skipped = set(skip)
        for name in modules:
            module = sys.modules.get(name)
            if module is not None and name not in skipped:
                self._add_module(name, module)

    def _add_function(self, label: str, func: object) -> None:
        code = getattr(func, "__code__", None)
        if code is not None:
            self.codes.append((label, func, code))

    def _add_class(self, label: str, cls: type) -> None:
        names = set()
        space = vars(cls)
        for key, value in list(space.items()):
            names.add(key)
            if not _behaviour(value):
                continue  # data a class keeps (a config, a cache) is not how it behaves
            self.entries.append((label, space, key, value))
            self._add_function(label + "." + key, getattr(value, "__func__", value))
        self.classes.append((label, cls, names))

    def _add_module(self, name: str, module: Any) -> None:
        space = vars(module)
        for key, value in list(space.items()):
            if getattr(value, "__module__", None) != name:
                continue
            if isinstance(value, type):
                self.entries.append((name, space, key, value))
                self._add_class(name + "." + key, value)
            elif callable(value):
                self.entries.append((name, space, key, value))
                self._add_function(name + "." + key, value)

    def changes(self) -> list[str]:
        found = []
        for owner, space, key, value in self.entries:
            if space.get(key, _MISSING) is not value:
                found.append(f"{owner}.{key} was replaced")
        for label, func, code in self.codes:
            if getattr(func, "__code__", None) is not code:
                found.append(f"the code of {label} was replaced")
        for label, cls, names in self.classes:
            for key, value in list(vars(cls).items()):
                if key not in names and callable(value):
                    found.append(f"{label}.{key} was added")
        return found


def _installed(path: str, prefixes: set[str]) -> bool:
    """Whether ``path`` belongs to an installed environment (a venv inside the tree)."""
    parts = path.split(os.sep)
    if "site-packages" in parts or "dist-packages" in parts:
        return True
    return any(path.startswith(p + os.sep) for p in prefixes)


_REWRITE: list[Any] = []  # pytest's rewrite_asserts, taken before any repository code ran
_CO_NEWLOCALS = 0x2  # a function's code (a class body's has not this flag)


def _codes(code: Any, prefix: str, out: dict[str, list[Any]]) -> None:
    """Every function's code in a module's code, by qualified name (in classes, and in
    functions: ``make.<locals>.test``)."""
    for const in code.co_consts:
        if not hasattr(const, "co_code"):
            continue
        name = getattr(const, "co_qualname", None) or prefix + const.co_name
        if const.co_flags & _CO_NEWLOCALS:
            out.setdefault(name, []).append(const)
            _codes(const, name + ".<locals>.", out)
        else:  # a class body: its methods
            _codes(const, name + ".", out)


_MARK = "__agentos_gate_mark__"  # the name instrumented tests call, in their module
_NOT_PLAIN = 0x20 | 0x80 | 0x100 | 0x200  # generator, coroutine, iterable coroutine, async gen


class _Instrument(ast.NodeTransformer):
    """Each plain function of a test file gets, in its own frame, a mark when it starts and
    one with the exception that leaves it: what happened in the test itself, whatever the
    runner around it says afterwards."""

    def __init__(self, keys: dict[tuple[str, int], int], counter: list[int]) -> None:
        self.keys, self.counter = keys, counter
        self.scope: list[str] = []

    def _mark(self, node: Any, key: int, error: Any) -> Any:
        import ast

        args = [ast.Constant(key), error or ast.Constant(None)]
        call = ast.Call(func=ast.Name(id=_MARK, ctx=ast.Load()), args=args, keywords=[])
        return ast.copy_location(ast.Expr(value=call), node)

    def visit_ClassDef(self, node: Any) -> Any:
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()
        return node

    def visit_FunctionDef(self, node: Any) -> Any:
        import ast

        qualname = ".".join([*self.scope, node.name])
        self.scope += [node.name, "<locals>"]
        self.generic_visit(node)
        del self.scope[-2:]
        if any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in ast.walk(node)):
            return node  # a generator (a fixture): left as it is
        self.counter[0] += 1
        key = self.counter[0]
        first = node.decorator_list[0].lineno if node.decorator_list else node.lineno
        self.keys[qualname, first] = key
        error = ast.Name(id="__agentos_gate_error__", ctx=ast.Load())
        handler = ast.ExceptHandler(
            type=ast.Name(id="BaseException", ctx=ast.Load()),
            name="__agentos_gate_error__",
            body=[self._mark(node.body[0], key, error), ast.Raise()],
        )
        guarded = ast.Try(body=node.body, handlers=[handler], orelse=[], finalbody=[])
        node.body = [self._mark(node.body[0], key, None), ast.copy_location(guarded, node)]
        return node


class _TestCode:
    """Whether a test's function is the one its file defines: compiled here from the file
    on disk (as pytest rewrites it, and plainly), compared with the code the test runs.
    Code that replaces a test module while it loads, or a test's function, is caught. A
    verified function then runs an instrumented copy of its own code (:class:`_Instrument`):
    ``marks`` say whether it started and what it raised."""

    def __init__(self, tree: str | None, config: Any = None) -> None:
        self.tree = tree
        self.config = config
        self.expected: dict[str, dict[str, dict[str, list[Any]]]] = {}  # path -> variant -> ..
        self.trees: dict[tuple[str, str], Any] = {}  # (path, variant) -> its parsed tree
        self.verified: dict[int, object] = {}  # id(function) -> the function, checked
        self.installed: dict[int, Any] = {}  # id(function) -> the instrumented code it runs
        self.keys: dict[int, int] = {}  # id(function) -> its mark's key
        self.marks: dict[int, tuple[bool, Any]] = {}  # key -> (started, what it raised)
        self.counter = [0]
        self.variants: dict[str, dict[str, dict[tuple[str, int], Any]]] = {}

    def mark(self, key: int, error: Any) -> None:
        """Called by an instrumented test as it starts (``error`` None) and with what leaves
        it; a test called again (a retry decorator) is judged by its last call."""
        self.marks[key] = (True, None if error is None else type(error))

    def _source(self, path: str, variant: str) -> Any:
        with open(path, "rb") as fh:
            source = fh.read()
        tree = ast.parse(source, filename=path)
        if variant == "rewritten":
            _REWRITE[0](tree, source, path, self.config)
        return tree

    def _expected(self, path: str, variant: str) -> dict[str, list[Any]]:
        """The functions of ``path`` compiled here, as pytest rewrites them or plainly; the
        tree they were compiled from is kept, to be instrumented."""
        found = self.expected.setdefault(path, {})
        if variant not in found:
            codes: dict[str, list[Any]] = {}
            try:
                tree = self._source(path, variant)
                _codes(compile(tree, path, "exec", dont_inherit=True), "", codes)
                self.trees[path, variant] = tree
            except Exception:  # a file that does not compile: the runner says so
                codes = {}
            found[variant] = codes
        return found[variant]

    def check(self, test_id: str, func: Any) -> tuple[str | None, str | None]:
        """(the file of the code the test runs, relative to the tree; a problem)."""
        import inspect

        try:
            func = inspect.unwrap(func)
        except Exception:  # a wrapper loop: nothing to compare
            return None, None
        func = getattr(func, "__func__", func)
        code = getattr(func, "__code__", None)
        if code is None:
            return None, None
        if id(func) in self.installed:
            if code is not self.installed[id(func)]:
                return None, f"{test_id}: the code of its function was replaced"
            return self._relative(code.co_filename), None
        where = os.path.realpath(code.co_filename) if os.path.isabs(code.co_filename) else None
        rel = self._relative(code.co_filename)
        if where is None or self.verified.get(id(func)) is func:
            return rel, None
        qualname = getattr(func, "__qualname__", "")
        matched: list[str] = []
        expected: dict[str, dict[str, list[Any]]] = {}
        for variant in ("rewritten", "plain") if _REWRITE else ("plain",):
            expected[variant] = self._expected(where, variant)  # the plain one only if needed
            if any(code == c for c in expected[variant].get(qualname, [])):
                matched.append(variant)
                break
        known = any(qualname in codes for codes in expected.values())
        in_tree = rel is not None
        if not matched and (known or (in_tree and any(expected.values()))):
            return rel, f"{test_id}: the code it runs is not the code of {rel or where}"
        self.verified[id(func)] = func
        if matched:
            self._install(func, where, matched[0])
        return rel, None

    def _relative(self, filename: str) -> str | None:
        if not (os.path.isabs(filename) and self.tree):
            return None
        where = os.path.realpath(filename)
        return os.path.relpath(where, self.tree) if where.startswith(self.tree + os.sep) else None

    def _install(self, func: Any, path: str, variant: str) -> None:
        code = func.__code__
        if code.co_flags & _NOT_PLAIN:
            return
        key_of: dict[tuple[str, int], int] = {}
        if variant not in self.variants.setdefault(path, {}):
            codes: dict[tuple[str, int], Any] = {}
            try:
                # The tree its expected code was compiled from, instrumented in place now.
                source = self.trees.pop((path, variant), None) or self._source(path, variant)
                tree = _Instrument(key_of, self.counter).visit(source)
                compiled = compile(ast.fix_missing_locations(tree), path, "exec", dont_inherit=True)
                by_name: dict[str, list[Any]] = {}
                _codes(compiled, "", by_name)
                for name, found in by_name.items():
                    for c in found:
                        if (name, c.co_firstlineno) in key_of:
                            codes[name, c.co_firstlineno] = (c, key_of[name, c.co_firstlineno])
            except Exception:  # cannot instrument it: the checks above still hold
                codes = {}
            self.variants[path][variant] = codes
        entry = self.variants[path][variant].get((func.__qualname__, code.co_firstlineno))
        if entry is None or entry[0].co_freevars != code.co_freevars:
            return
        new, key = entry
        try:
            func.__globals__[_MARK] = self.mark
            func.__code__ = new
        except Exception:  # a function whose code cannot be set
            return
        self.installed[id(func)] = new
        self.keys[id(func)] = key

    def key_of(self, func: Any) -> int | None:
        import inspect

        try:
            func = getattr(inspect.unwrap(func), "__func__", None) or inspect.unwrap(func)
        except Exception:  # a wrapper loop
            return None
        return self.keys.get(id(func))

    def judged(
        self, test_id: str, key: int | None, outcome: str, quiet: tuple[type, ...]
    ) -> tuple[str, str | None]:
        """The outcome the marks allow: a test that did not start, or that raised (but a
        skip or an expected failure), did not pass, whatever the runner says."""
        if key is None or outcome != "passed":
            return outcome, None
        started, raised = self.marks.get(key, (False, None))
        if not started:
            return "failed", f"{test_id}: the runner says it passed, but its code never ran"
        if raised is not None and not issubclass(raised, quiet):
            return "failed", (
                f"{test_id}: it raised {raised.__name__}, yet the runner says it passed"
            )
        return outcome, None


_HOOK_METHODS = (
    "find_spec",
    "find_module",
    "load_module",
    "exec_module",
    "create_module",
    "__call__",
    "func",
)


def _code_files(obj: object) -> list[str]:
    """The files of the code behind an object: a function's, a bound method's, a partial's,
    the methods an import hook is called through (also when they are attributes of a plain
    namespace), and the module of its class."""
    found = []
    candidates = [obj, getattr(obj, "__func__", None)]
    for name in _HOOK_METHODS:
        try:
            candidates.append(getattr(obj, name, None))
        except Exception:  # a property that raises
            continue
    for candidate in candidates:
        inner = getattr(candidate, "__func__", candidate)
        code = getattr(inner, "__code__", None)
        if code is not None:
            found.append(code.co_filename)
    module = sys.modules.get(getattr(type(obj), "__module__", "") or "")
    where = getattr(module, "__file__", None)
    if isinstance(where, str):
        found.append(where)
    return found


class _TreeHooks:
    """Import hooks (``sys.meta_path``, ``sys.path_hooks``) and tracers (``sys.settrace``,
    ``sys.setprofile``) whose code lies in the tree under test: everything seen in this
    process, by name. The judge compares them with the base's: one the agent's code added
    can rewrite the test modules as they load, or jump over their asserts."""

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self.where: dict[int, tuple[object, str | None]] = {}
        tree = os.environ.get(TREE)
        self.tree = os.path.realpath(tree) if tree else None
        self.prefixes = {
            os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)
        }

    def _file(self, obj: object) -> str | None:
        key = id(obj)
        if key not in self.where:
            rel = None
            for where in _code_files(obj):
                if os.path.isabs(where) and self.tree:
                    real = os.path.realpath(where)
                    if real.startswith(self.tree + os.sep) and not _installed(real, self.prefixes):
                        rel = os.path.relpath(real, self.tree)
                        break
            self.where[key] = (obj, rel)
        return self.where[key][1]

    def look(self) -> None:
        if not self.tree:
            return
        found = [("import hook", h) for h in (*sys.meta_path, *sys.path_hooks)]
        found += [("tracer", t) for t in (sys.gettrace(), sys.getprofile()) if t is not None]
        for kind, obj in found:
            rel = self._file(obj)
            if rel is not None:
                name = getattr(type(obj), "__qualname__", "?")
                if kind == "tracer" or (callable(obj) and not isinstance(obj, type)):
                    name = getattr(obj, "__qualname__", name)
                self.seen.add(f"{kind} {name} from {rel}")


# --- pytest --------------------------------------------------------------------------------


class _PytestRecorder:
    """One pytest session's records: what it collected, each test's outcome, tampering."""

    def __init__(self, config: Any, records: _Records, mode: str) -> None:
        import unittest

        from _pytest import outcomes

        self.config = config
        self.records = records
        self.mode = mode
        self.only = _ids(ONLY)
        self.skip = _ids(EXCEPT)
        self.phases: dict[str, list[Phase]] = {}
        self.tampered: list[str] = []
        self.changed: list[str] = []
        self.counts: dict[str, int] = {}
        self.skipped_exc: tuple[type, ...] = (outcomes.Skipped, unittest.SkipTest)
        self.xfail_exc: tuple[type, ...] = (outcomes.XFailed,)
        self.plugins_before: set[int] = set()
        # id(plugin) -> (the plugin, kept alive so that its id stays its own; its file in
        # the tree, or None)
        self.where: dict[int, tuple[object, str | None]] = {}
        self.prefixes = {
            os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)
        }
        self.hooks = _TreeHooks()
        self.code = _TestCode(self.hooks.tree, config)

    def session_started(self) -> None:
        self.plugins_before = {id(p) for p in self.config.pluginmanager.get_plugins()}

    def tree_plugins(self) -> list[tuple[object, str]]:
        """Plugins whose code lies in the tree under test (not in an environment there);
        where each plugin lives is looked up once."""
        tree = os.environ.get(TREE)
        if not tree:
            return []
        tree = os.path.realpath(tree)
        found = []
        for plugin in self.config.pluginmanager.get_plugins():
            key = id(plugin)
            if key not in self.where:
                self.where[key] = (plugin, self._inside(plugin, tree))
            rel = self.where[key][1]
            if rel is not None:
                found.append((plugin, rel))
        return found

    def _inside(self, plugin: object, tree: str) -> str | None:
        """The file in the tree a plugin's code comes from: its module, or any of its
        hook functions (a plugin may be an object of a class defined anywhere)."""
        files = _code_files(plugin)
        where = getattr(plugin, "__file__", None)
        if isinstance(where, str):
            files.append(where)
        for name in dir(plugin):
            if name.startswith("pytest_"):
                try:
                    hook = getattr(plugin, name)
                except Exception:  # an attribute that raises: not a hook
                    continue
                files += _code_files(hook)
        for where in files:
            if not os.path.isabs(where):
                continue
            real = os.path.realpath(where)
            if real.startswith(tree + os.sep) and not _installed(real, self.prefixes):
                return os.path.relpath(real, tree)
        return None

    def check(self, when: str, everything: bool = False) -> None:
        """What changed in the runner since the snapshot: recorded as ``changed`` lines, which
        the judge compares with the base's (pytest and the environment's plugins change a
        few things themselves, at the base as in the judged run). After each test, pytest's
        runner; after collection and at the end (``everything``), every module of pytest,
        pluggy and unittest too."""
        snapshots = _PYTEST_SNAPSHOT[: None if everything else 1]
        problems = [p for snapshot in snapshots for p in snapshot.changes()]
        self.hooks.look()
        for plugin, rel in self.tree_plugins():
            if id(plugin) not in self.plugins_before and os.path.basename(rel) != "conftest.py":
                problems.append(f"a pytest plugin was registered from {rel}")
        for problem in problems:
            self.change(problem, when)

    def change(self, what: str, when: str = "") -> None:
        if what not in self.changed:
            self.changed.append(what)
            self.records.write("changed", what=what, when=when)

    def tamper(self, what: str, when: str = "") -> None:
        """What no test run does honestly (a report that lies about what a test raised)."""
        if what not in self.tampered:
            self.tampered.append(what)
            self.records.write("tamper", what=what, when=when)

    def collected(self, session: Any) -> None:
        plugins = sorted({rel for _, rel in self.tree_plugins()})
        tree = os.environ.get(TREE) or str(getattr(self.config, "rootpath", os.getcwd()))
        items = []
        for item in session.items:
            path = getattr(item, "path", None) or getattr(item, "fspath", None)
            rel = None
            if path is not None:
                try:  # relative to the tree, not to pytest's rootdir (a subdirectory's)
                    rel = os.path.relpath(os.path.realpath(str(path)), os.path.realpath(tree))
                except ValueError:
                    rel = str(path)
            items.append(
                {
                    "id": item.nodeid,
                    "file": rel,
                    "kind": type(item).__name__,
                    "code": self.verify(item),
                }
            )
        self.check("collection", everything=True)
        hooks = sorted(self.hooks.seen)
        self.records.write("collected", tests=items, plugins=plugins, hooks=hooks)

    def verify(self, item: Any) -> str | None:
        """The file the test's function comes from; a function that is not its file's is
        tampering."""
        if not hasattr(type(item), "obj"):
            return None  # not a function of a test module (a doctest, another plugin's)
        try:
            func = item.obj
        except Exception:  # pytest reports its own collection error
            return None
        where, problem = self.code.check(item.nodeid, func)
        if problem:
            self.change(problem, "collection")
        return where

    def key(self, item: Any) -> int | None:
        try:
            return self.code.key_of(item.obj) if hasattr(type(item), "obj") else None
        except Exception:  # pytest reports its own collection error
            return None

    def own_outcome(self, call: Any) -> str:
        """How a phase ended, from what it raised: not from any report."""
        excinfo = call.excinfo
        if excinfo is None:
            return "passed"
        if isinstance(excinfo.value, self.xfail_exc):
            return "xfailed"
        if isinstance(excinfo.value, self.skipped_exc):
            return "skipped"
        return "failed"

    def phase(self, item: Any, call: Any, before: str, report: Any) -> None:
        own = self.own_outcome(call)
        if before == "failed" and own != "failed":
            self.tamper(f"the exception {item.nodeid} raised in {call.when} was taken away")
            own = "failed"
        reported = str(report.outcome)
        xfail = hasattr(report, "wasxfail")
        forged = False
        if own == "failed":
            forged = not (reported == "failed" or (reported == "skipped" and xfail))
            forged = forged or (reported == "skipped" and xfail and not _marked_xfail(item))
        elif own == "passed":
            forged = reported == "skipped" and not xfail
        else:
            forged = reported == "passed" and not xfail
        if forged:
            said = reported + (" (xfail)" if xfail else "")
            self.tamper(
                f"{item.nodeid}: the report says {said} where the test {own} in {call.when}"
            )
        if call.when == "call":  # what the test's own frame says (its instrumented code)
            quiet = (*self.skipped_exc, *self.xfail_exc)
            own, problem = self.code.judged(item.nodeid, self.key(item), own, quiet)
            if problem:
                self.tamper(problem)
        self.phases.setdefault(item.nodeid, []).append((call.when, own, reported, xfail))

    def finished(self, item: Any) -> None:
        phases = self.phases.pop(item.nodeid, [])
        outcome = _final(phases)
        self.counts[outcome] = self.counts.get(outcome, 0) + 1
        self.records.write("test", id=item.nodeid, outcome=outcome, reported=_reported(phases))
        self.check(item.nodeid)


def _marked_xfail(item: Any) -> bool:
    try:
        return any(True for _ in item.iter_markers(name="xfail"))
    except Exception:  # an item of a plugin that has no markers
        return False


def _reported(phases: list[Phase]) -> str:
    """One test's outcome as its reports give it (what pytest itself would print)."""
    outcome = "error"
    for when, _, reported, xfail in phases:
        if when in ("setup", "teardown") and reported == "failed":
            return "error"
        if when == "setup" and reported == "skipped":
            return "xfailed" if xfail else "skipped"
        if when == "call":
            if reported == "skipped":
                outcome = "xfailed" if xfail else "skipped"
            elif reported == "passed":
                outcome = "xpassed" if xfail else "passed"
            else:
                outcome = "failed"
    return outcome


def _final(phases: list[Phase]) -> str:
    """One test's outcome from its phases, by what they raised."""
    outcome = "error"  # set up and never called, or no phase at all
    for when, own, reported, xfail in phases:
        if when == "setup":
            if own == "failed":
                return "error"
            if own in ("skipped", "xfailed"):
                return own
        elif when == "call":
            if own == "failed":
                outcome = "xfailed" if (reported == "skipped" and xfail) else "failed"
            elif own == "passed":  # a report of failure here is XPASS(strict)
                outcome = "failed" if reported == "failed" else "xpassed" if xfail else "passed"
            else:
                outcome = own
        elif when == "teardown" and own == "failed":
            return "error"
    return outcome


# Taken when pytest registers this plugin (PYTEST_PLUGINS): after pytest's own plugins and
# those the environment installs, before any conftest or test module of the repository.
_PYTEST_SNAPSHOT: list[_Snapshot] = []
_PYTEST_RECORDS: list[_Records] = []
_RECORDER: list[_PytestRecorder] = []


def _recorder() -> _PytestRecorder | None:
    return _RECORDER[0] if _RECORDER else None


def pytest_addoption(parser: Any) -> None:
    """Called when pytest registers this plugin, before it loads any conftest: the snapshot,
    and the record file with its start line (a process that ends before its session starts
    leaves a record without a seal, never none)."""
    directory = os.environ.get(DIR)
    if not directory or _PYTEST_SNAPSHOT:
        return
    _PYTEST_SNAPSHOT.append(_Snapshot(_PYTEST_MODULES + _UNITTEST_MODULES))
    _PYTEST_SNAPSHOT.append(
        _Snapshot(_runner_modules(()), skip=_PYTEST_MODULES + _UNITTEST_MODULES)
    )
    try:
        from _pytest.assertion import rewrite

        _REWRITE.append(rewrite.rewrite_asserts)  # the genuine one, before any code runs
    except (ImportError, AttributeError):
        pass
    try:
        records = _Records(directory, "pytest")
    except OSError:
        return
    _UNITTEST["off"] = True  # pytest runs the tests of this process
    records.write(
        "start",
        runner="pytest",
        mode=os.environ.get(MODE, "run"),
        argv=list(sys.argv),
        cwd=os.getcwd(),
        python=sys.version.split()[0],
    )
    _PYTEST_RECORDS.append(records)


def pytest_configure(config: Any) -> None:
    if not _PYTEST_RECORDS or _RECORDER:
        return
    mode = os.environ.get(MODE, "run")
    _RECORDER.append(_PytestRecorder(config, _PYTEST_RECORDS[0], mode))
    _PYTEST_RECORDS[0].write("configured", rootdir=str(getattr(config, "rootpath", "")))
    if mode == "collect":
        config.option.collectonly = True


def pytest_sessionstart(session: Any) -> None:
    recorder = _recorder()
    if recorder is not None:
        recorder.session_started()


def pytest_collectreport(report: Any) -> None:
    recorder = _recorder()
    if recorder is not None and report.failed:
        message = str(report.longrepr)[-2000:]
        recorder.records.write("collect_error", path=report.nodeid, message=message)


def _hookimpl(**kwargs: Any) -> Callable[[Any], Any]:
    try:
        import pytest
    except ImportError:  # not a pytest process: only the unittest part is used
        return lambda func: func
    return pytest.hookimpl(**kwargs)  # type: ignore[no-any-return]


@_hookimpl(trylast=True)
def pytest_collection_modifyitems(session: Any, config: Any, items: list[Any]) -> None:
    recorder = _recorder()
    if recorder is None or (recorder.only is None and recorder.skip is None):
        return
    kept = [i for i in items if _wanted(i.nodeid, recorder.only, recorder.skip)]
    dropped = [i for i in items if not _wanted(i.nodeid, recorder.only, recorder.skip)]
    if dropped:
        items[:] = kept
        config.hook.pytest_deselected(items=dropped)


def pytest_collection_finish(session: Any) -> None:
    recorder = _recorder()
    if recorder is not None:
        recorder.collected(session)


@_hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: Any, call: Any) -> Any:
    recorder = _recorder()
    before = recorder.own_outcome(call) if recorder is not None else "passed"
    outcome = yield
    if recorder is None:
        return
    try:
        report = outcome.get_result()
    except BaseException:  # the report was not made: pytest itself says why
        return
    recorder.phase(item, call, before, report)


@_hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: Any, nextitem: Any) -> Any:
    recorder = _recorder()
    if recorder is not None:
        recorder.verify(item)  # its function may have been replaced since collection
        key = recorder.key(item)
        if key is not None:
            recorder.code.marks.pop(key, None)
    yield
    if recorder is not None:
        recorder.finished(item)


@_hookimpl(hookwrapper=True, tryfirst=True)
def pytest_sessionfinish(session: Any, exitstatus: Any) -> Any:
    yield
    recorder = _recorder()
    if recorder is None:
        return
    recorder.check("end", everything=True)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    stats = {
        key: len(value)
        for key, value in getattr(reporter, "stats", {}).items()
        if key in ("passed", "failed", "skipped", "xfailed", "xpassed")
    }
    recorder.records.seal(
        exitstatus=int(getattr(session, "exitstatus", exitstatus) or 0),
        counts=recorder.counts,
        reported=stats,
        tampered=recorder.tampered,
        hooks=sorted(recorder.hooks.seen),
    )


# --- unittest ------------------------------------------------------------------------------

_UNITTEST: dict[str, bool] = {"installed": False, "off": False}
_UNITTEST_SNAPSHOT: list[_Snapshot] = []


class _UnittestRecorder:
    """One process's unittest records, kept through ``unittest.result.TestResult``."""

    def __init__(self, records: _Records, mode: str) -> None:
        self.records = records
        self.mode = mode
        self.only = _ids(ONLY)
        self.skip = _ids(EXCEPT)
        self.outcomes: dict[str, str] = {}
        self.counts: dict[str, int] = {}
        self.tampered: list[str] = []
        self.changed: list[str] = []
        self.run_end: dict[str, Any] | None = None
        self.depth = 0
        self.hooks = _TreeHooks()
        self.code = _TestCode(self.hooks.tree)

    def verify(self, test: Any) -> str | None:
        """The file the test's method comes from; a method that is not its file's is
        tampering."""
        name = getattr(test, "_testMethodName", None)
        func = getattr(type(test), name, None) if isinstance(name, str) else None
        if func is None:
            return None
        where, problem = self.code.check(_test_id(test), func)
        if problem:
            self.change(problem, "collection")
        return where

    def change(self, what: str, when: str) -> None:
        if what not in self.changed:
            self.changed.append(what)
            self.records.write("changed", what=what, when=when)

    def set(self, test: Any, outcome: str) -> None:
        test_id = _test_id(test)
        if self.outcomes.get(test_id) in ("failed", "error") and outcome in ("passed", "skipped"):
            return  # one of its subtests failed: the test failed
        self.outcomes[test_id] = outcome

    def method(self, test: Any) -> Any:
        name = getattr(test, "_testMethodName", None)
        return getattr(type(test), name, None) if isinstance(name, str) else None

    def start(self, test: Any) -> None:
        self.outcomes.setdefault(_test_id(test), "pending")
        key = self.code.key_of(self.method(test)) if self.method(test) else None
        if key is not None:
            self.code.marks.pop(key, None)

    def stop(self, test: Any) -> None:
        test_id = _test_id(test)
        outcome = self.outcomes.get(test_id, "error")
        if outcome == "pending":  # started, and nothing said how it ended
            outcome = "error"
        method = self.method(test)
        key = self.code.key_of(method) if method is not None else None
        outcome, problem = self.code.judged(test_id, key, outcome, (_SKIP_TEST[0],))
        overridden = _overridden(test)
        for found in [problem, *overridden]:
            if found and found not in self.tampered:
                self.tampered.append(found)
                self.records.write("tamper", what=found, when=test_id)
        if overridden and outcome == "passed":
            outcome = "failed"
        self.counts[outcome] = self.counts.get(outcome, 0) + 1
        self.records.write("test", id=test_id, outcome=outcome, file=_test_file(test))
        self.check(test_id)

    def check(self, when: str) -> None:
        self.hooks.look()
        if not _UNITTEST_SNAPSHOT:
            return
        for problem in _UNITTEST_SNAPSHOT[0].changes():
            self.change(problem, when)


_SKIP_TEST: list[type] = []  # unittest.SkipTest, once unittest is imported


def _overridden(test: Any) -> list[str]:
    """What a test's own instance holds in place of unittest's behaviour, from the code
    under test: an instance attribute shadowing a method of its class, or how a type's
    values are compared (``_type_equality_funcs``), set to a function of the tree that is
    not the test's module's."""
    found = []
    space = getattr(test, "__dict__", {})
    cls = type(test)
    module = sys.modules.get(getattr(cls, "__module__", "") or "")
    own = os.path.realpath(getattr(module, "__file__", "") or "") or None
    tree = os.environ.get(TREE)
    tree = os.path.realpath(tree) if tree else None

    def foreign(func: Any) -> bool:
        code = getattr(getattr(func, "__func__", func), "__code__", None)
        where = getattr(code, "co_filename", None)
        if not (isinstance(where, str) and tree):
            return False
        if not os.path.isabs(where):
            return True  # code made at run time
        real = os.path.realpath(where)
        return real.startswith(tree + os.sep) and real != own

    for name, value in list(space.items()):
        if callable(value) and callable(getattr(cls, name, None)) and foreign(value):
            found.append(f"{_test_id(test)}: its {name} was replaced on the test itself")
    for kind, func in list(space.get("_type_equality_funcs", {}).items()):
        if not isinstance(func, str) and foreign(func):
            what = getattr(kind, "__name__", str(kind))
            found.append(f"{_test_id(test)}: how it compares {what} values was replaced")
    return found


def _test_id(test: Any) -> str:
    try:
        return str(test.id())
    except Exception:  # a test object of a strange runner
        return repr(test)


def _test_file(test: Any) -> str | None:
    module = sys.modules.get(getattr(type(test), "__module__", "") or "")
    path = getattr(module, "__file__", None)
    if not isinstance(path, str):
        return None
    try:
        return os.path.relpath(path, os.environ.get(TREE) or os.getcwd())
    except ValueError:
        return path


def _flatten(suite: Any, out: list[Any]) -> list[Any]:
    for test in suite:
        if hasattr(test, "__iter__"):
            _flatten(test, out)
        else:
            out.append(test)
    return out


def _prune(suite: Any, only: set[str] | None, skip: set[str] | None) -> bool:
    """Drop the tests not wanted from ``suite`` in place; True when it still holds any."""
    kept = []
    for test in list(getattr(suite, "_tests", [])):
        if hasattr(test, "_tests"):
            if _prune(test, only, skip):
                kept.append(test)
        elif _wanted(_test_id(test), only, skip):
            kept.append(test)
    suite._tests = kept
    return bool(kept)


def _patch(cls: Any, name: str, make: Callable[[Any], Any]) -> None:
    """Replace ``cls.name`` with ``make(original)``, the original kept as ``__wrapped__``."""
    original = getattr(cls, name)
    method = make(original)
    method.__wrapped__ = original
    setattr(cls, name, method)


def install_unittest() -> None:
    """Record unittest's outcomes in this process (AgentOS's sitecustomize calls it)."""
    directory = os.environ.get(DIR)
    if not directory or _UNITTEST["installed"]:
        return
    _UNITTEST["installed"] = True
    import unittest  # every part of it, for the snapshot

    state: dict[str, _UnittestRecorder | None] = {}

    def recorder() -> _UnittestRecorder | None:
        if _UNITTEST["off"]:
            return None
        if "r" not in state:
            try:
                records = _Records(directory, "unittest")
            except OSError:
                state["r"] = None
                return None
            mode = os.environ.get(MODE, "run")
            state["r"] = rec = _UnittestRecorder(records, mode)
            records.write(
                "start",
                runner="unittest",
                mode=mode,
                argv=list(sys.argv),
                cwd=os.getcwd(),
                python=sys.version.split()[0],
            )
            atexit.register(_unittest_end, rec)
        return state["r"]

    result_cls = unittest.result.TestResult
    _SKIP_TEST.append(unittest.SkipTest)

    def outcome_method(outcome: str) -> Callable[[Any], Any]:
        def make(original: Any) -> Any:
            def method(self: Any, test: Any, *args: Any, **kwargs: Any) -> Any:
                rec = recorder()
                if rec is not None:
                    rec.set(test, outcome)
                return original(self, test, *args, **kwargs)

            return method

        return make

    for name, outcome in (
        ("addSuccess", "passed"),
        ("addFailure", "failed"),
        ("addError", "error"),
        ("addSkip", "skipped"),
        ("addExpectedFailure", "xfailed"),
        ("addUnexpectedSuccess", "xpassed"),
    ):
        _patch(result_cls, name, outcome_method(outcome))

    def subtest(original: Any) -> Any:
        def add_subtest(self: Any, test: Any, sub: Any, err: Any) -> Any:
            rec = recorder()
            if rec is not None and err is not None:
                rec.set(test, "failed" if issubclass(err[0], test.failureException) else "error")
            return original(self, test, sub, err)

        return add_subtest

    def start(original: Any) -> Any:
        def start_test(self: Any, test: Any) -> Any:
            rec = recorder()
            if rec is not None:
                rec.start(test)
            return original(self, test)

        return start_test

    def stop(original: Any) -> Any:
        def stop_test(self: Any, test: Any) -> Any:
            rec = recorder()
            if rec is not None:
                rec.stop(test)
            return original(self, test)

        return stop_test

    def stop_run(original: Any) -> Any:
        def stop_test_run(self: Any) -> Any:
            rec = recorder()
            if rec is not None:
                rec.run_end = {"run": getattr(self, "testsRun", None)}
            return original(self)

        return stop_test_run

    def run(original: Any) -> Any:
        def run_suite(self: Any, result: Any, debug: bool = False) -> Any:
            rec = recorder()
            if rec is None:
                return original(self, result, debug)
            if rec.depth == 0:  # the outermost suite: everything the run will run
                if rec.mode == "collect":
                    tests = [
                        {
                            "id": _test_id(t),
                            "file": _test_file(t),
                            "kind": "TestCase",
                            "code": rec.verify(t),
                        }
                        for t in _flatten(self, [])
                    ]
                    rec.check("collection")
                    hooks = sorted(rec.hooks.seen)
                    rec.records.write("collected", tests=tests, plugins=[], hooks=hooks)
                    return result
                if rec.only is not None or rec.skip is not None:
                    _prune(self, rec.only, rec.skip)
                tests = [
                    {"id": _test_id(t), "file": _test_file(t), "code": rec.verify(t)}
                    for t in _flatten(self, [])
                ]
                rec.check("collection")
                hooks = sorted(rec.hooks.seen)
                rec.records.write("collected", tests=tests, plugins=[], hooks=hooks)
            rec.depth += 1
            try:
                return original(self, result, debug)
            finally:
                rec.depth -= 1

        return run_suite

    _patch(result_cls, "addSubTest", subtest)
    _patch(result_cls, "startTest", start)
    _patch(result_cls, "stopTest", stop)
    _patch(result_cls, "stopTestRun", stop_run)
    _patch(unittest.suite.TestSuite, "run", run)
    _UNITTEST_SNAPSHOT.append(_Snapshot(_runner_modules(_UNITTEST_MODULES)))


def _unittest_end(rec: _UnittestRecorder) -> None:
    if _UNITTEST["off"]:
        return
    rec.check("end")
    rec.records.seal(
        counts=rec.counts,
        reported=rec.run_end,
        tampered=rec.tampered,
        hooks=sorted(rec.hooks.seen),
    )
