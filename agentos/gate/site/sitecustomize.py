"""AgentOS's import shim: in an agent's worktree, the worktree's code, not the main checkout's.

A project's environment often holds an *editable install* of its main checkout: a ``.pth``
file that puts ``<checkout>/src`` (or the checkout itself) on ``sys.path``, or an import hook
that maps the package's name to the checkout's files. Run from a git worktree of that
checkout, such an interpreter would import the main checkout's code, and the tests would
check the wrong tree.

AgentOS puts this directory first on ``PYTHONPATH`` and names the trees in
``AGENTOS_SITE_MAP`` (JSON ``{main_checkout: worktree}``). Python imports ``sitecustomize``
after ``site`` has processed the ``.pth`` files, so by then every editable install is in
place, and this module:

- rewrites the ``sys.path`` entries under a main checkout to the same place in the worktree
  (when it exists there: a virtual environment inside the checkout is git-ignored and stays);
- rewrites the path mappings of the editable import hooks it knows: setuptools'
  ``__editable___*_finder`` modules (``MAPPING``, ``NAMESPACES``), the ``editables``
  redirector that hatchling and pdm-backend use, scikit-build-core's redirecting finder;
- takes its own directory off ``sys.path`` and imports the ``sitecustomize`` the environment
  had, if any, so that it never shadows one.

It must never break the user's Python: every change is computed first and applied only when
all of it could be computed; on any error nothing is changed. ``AGENTOS_SITE_DEBUG=1``
prints what was rewritten (or why nothing was) on stderr.

This file runs under the project's interpreter, which may be older than AgentOS's: it uses
only the standard library and syntax Python 3.7 understands.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    Pairs = list[tuple[str, str]]

MAP_VARIABLE = "AGENTOS_SITE_MAP"
DEBUG_VARIABLE = "AGENTOS_SITE_DEBUG"
_HERE = os.path.dirname(os.path.realpath(__file__))


def _debug(message: str) -> None:
    if os.environ.get(DEBUG_VARIABLE):
        sys.stderr.write("agentos-site: " + message + "\n")


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _pairs() -> Pairs:
    """(main checkout, worktree) pairs, real paths, the longest main checkout first."""
    data = json.loads(os.environ.get(MAP_VARIABLE) or "{}")
    if not isinstance(data, dict):
        return []
    pairs = [
        (os.path.realpath(main), os.path.realpath(tree))
        for main, tree in data.items()
        if isinstance(main, str) and isinstance(tree, str) and main and tree
    ]
    return sorted(pairs, key=lambda pair: len(pair[0]), reverse=True)


def _protected() -> list[str]:
    """The interpreter's own trees: a virtual environment inside the checkout is never moved."""
    roots = {sys.prefix, sys.exec_prefix, getattr(sys, "base_prefix", sys.prefix)}
    return [os.path.realpath(root) for root in roots if root]


def _moved(path: Any, pairs: Pairs, protected: list[str], must_exist: bool) -> str | None:
    """The worktree's counterpart of ``path`` when it lies under a main checkout, else None."""
    if not isinstance(path, str) or not path or path.startswith("__editable__"):
        return None
    real = os.path.realpath(path)
    if any(_under(real, root) for root in protected):
        return None
    for main, tree in pairs:
        if _under(real, tree):
            return None  # already in a worktree (one may live inside the main checkout)
        if _under(real, main):
            moved = tree + real[len(main) :]
            if must_exist and not os.path.exists(moved):
                return None
            return moved
    return None


def _moved_dict(mapping: Any, pairs: Pairs, protected: list[str]) -> dict[Any, Any] | None:
    """A copy of a {name: path or [paths]} mapping with its paths moved, None when unchanged."""
    if not isinstance(mapping, dict):
        return None
    out: dict[Any, Any] = {}
    changed = False
    for key, value in mapping.items():
        if isinstance(value, list):
            new_list = [_moved(p, pairs, protected, False) or p for p in value]
            changed = changed or new_list != value
            out[key] = new_list
        else:
            moved = _moved(value, pairs, protected, False)
            changed = changed or moved is not None
            out[key] = moved or value
    return out if changed else None


def _finder_tables() -> list[tuple[str, dict[Any, Any]]]:
    """The path tables of the editable import hooks this interpreter has loaded."""
    tables: list[tuple[str, dict[Any, Any]]] = []
    for name, module in list(sys.modules.items()):
        if name.startswith("__editable___") and name.endswith("_finder"):  # setuptools
            for attr in ("MAPPING", "NAMESPACES"):
                table = getattr(module, attr, None)
                if isinstance(table, dict):
                    tables.append((name + "." + attr, table))
    redirector = sys.modules.get("editables.redirector")  # hatchling, pdm-backend
    finder = getattr(redirector, "RedirectingFinder", None)
    table = getattr(finder, "_redirections", None)
    if isinstance(table, dict):
        tables.append(("editables.RedirectingFinder._redirections", table))
    for hook in sys.meta_path:  # scikit-build-core's redirect
        table = getattr(hook, "known_source_files", None)
        if isinstance(table, dict):
            tables.append((type(hook).__name__ + ".known_source_files", table))
    return tables


def _pth_paths() -> list[str]:
    """The directories the ``.pth`` files of this interpreter's site directories name, as
    ``site`` reads them: ``site`` leaves out those that do not exist, and in a sandbox the
    main checkout does not (only its worktree does)."""
    import site

    dirs = list(site.getsitepackages()) if hasattr(site, "getsitepackages") else []
    if site.ENABLE_USER_SITE and hasattr(site, "getusersitepackages"):
        dirs.append(site.getusersitepackages())
    found: list[str] = []
    for sitedir in dirs:
        try:
            names = sorted(n for n in os.listdir(sitedir) if n.endswith(".pth"))
        except OSError:
            continue
        for name in names:
            try:
                with open(os.path.join(sitedir, name), encoding="utf-8") as fh:
                    lines = fh.read().splitlines()
            except (OSError, UnicodeDecodeError):
                continue
            for line in lines:
                line = line.strip()
                if line and not line.startswith(("#", "import ", "import\t")):
                    found.append(os.path.join(sitedir, line))
    return found


def _plan(pairs: Pairs) -> tuple[list[str], list[tuple[dict[Any, Any], dict[Any, Any]]], list[str]]:
    """What to change: the new sys.path, each finder table's new content, and a log."""
    protected = _protected()
    log: list[str] = []
    new_path: list[str] = []
    for entry in sys.path:
        moved = _moved(entry, pairs, protected, True)
        if moved is not None:
            log.append("sys.path " + entry + " -> " + moved)
        new_path.append(moved or entry)
    for entry in _pth_paths():  # a .pth entry site left out: its main checkout is hidden
        if entry in sys.path:
            continue
        moved = _moved(entry, pairs, protected, True)
        if moved is not None and moved not in new_path:
            log.append(".pth " + entry + " -> " + moved)
            new_path.append(moved)
    updates: list[tuple[dict[Any, Any], dict[Any, Any]]] = []
    for label, table in _finder_tables():
        new_table = _moved_dict(table, pairs, protected)
        if new_table is not None:
            updates.append((table, new_table))
            log.append(label + " -> " + repr(new_table))
    return new_path, updates, log


def _apply(new_path: list[str], updates: list[tuple[dict[Any, Any], dict[Any, Any]]]) -> None:
    old_path = list(sys.path)
    sys.path[:] = new_path
    for entry in old_path:
        if entry not in new_path:
            sys.path_importer_cache.pop(entry, None)
    for table, new_table in updates:
        table.clear()
        table.update(new_table)
    importlib.invalidate_caches()


def _redirect() -> None:
    try:
        pairs = _pairs()
        if not pairs:
            _debug("no " + MAP_VARIABLE + ": nothing to redirect")
            return
        new_path, updates, log = _plan(pairs)
    except Exception as exc:  # a broken shim must never break the user's Python
        _debug("left everything as it was: " + repr(exc))
        return
    _apply(new_path, updates)
    for line in log or ["nothing under " + ", ".join(main for main, _ in pairs)]:
        _debug(line)


def _chain() -> None:
    """Step aside: drop this directory from sys.path and run the environment's sitecustomize."""
    mine = sys.modules.get(__name__)
    sys.path[:] = [p for p in sys.path if os.path.realpath(p or os.curdir) != _HERE]
    sys.modules.pop(__name__, None)
    try:
        importlib.import_module("sitecustomize")  # the environment's own, when it has one
    except ImportError as exc:
        if exc.name != "sitecustomize":
            _report_chained(exc)
    except Exception as exc:  # reported as site.py reports it, never raised
        _report_chained(exc)
    if "sitecustomize" not in sys.modules and mine is not None:
        sys.modules[__name__] = mine  # the import system expects its module back


def _report_chained(exc: BaseException) -> None:
    sys.stderr.write(
        "Error in sitecustomize; set PYTHONVERBOSE for traceback:\n"
        + type(exc).__name__
        + ": "
        + str(exc)
        + "\n"
    )


def _gate() -> None:
    """Under AgentOS's gate (``AGENTOS_GATE_DIR`` set): record unittest's outcomes in this
    process before any of the repository's code runs (see ``_agentos_gate``)."""
    if not os.environ.get("AGENTOS_GATE_DIR"):
        return
    try:
        # A sibling of this file on sys.path at run time (AgentOS's package is not there).
        import _agentos_gate  # type: ignore[import-not-found]

        _agentos_gate.install_unittest()
    except Exception as exc:  # the recorder must never break the user's Python
        _debug("the gate's recorder could not start: " + repr(exc))


if __name__ == "sitecustomize":
    _redirect()
    _gate()
    _chain()
