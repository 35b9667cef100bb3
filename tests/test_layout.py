"""The layout is the architecture: one folder per concept, no import circles, and imports
that point one way, down the layers docs/architecture.md states."""

from __future__ import annotations

import ast
import functools
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

from conftest import REPO_ROOT

PACKAGE = REPO_ROOT / "agentos"
ARCHITECTURE = REPO_ROOT / "docs" / "architecture.md"
# Not imported as modules: code AgentOS puts on an agent's PYTHONPATH, and fixtures.
NOT_MODULES = ("agentos/gate/site/", "agentos/evals/_bundled/", "agentos/workflows/_bundled/")


def tracked(pattern: str) -> list[str]:
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", pattern],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [name for name in out.splitlines() if (REPO_ROOT / name).exists()]


def module_files() -> dict[str, Path]:
    modules = {}
    for name in tracked("agentos/**.py"):
        if name.startswith(NOT_MODULES):
            continue
        parts = name[: -len(".py")].split("/")
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = REPO_ROOT / name
    return modules


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _assigns_face(node: ast.AST) -> bool:
    """``FACE = {...}`` or ``FACE: dict[str, str] = {...}`` (agentos.shared.faces)."""
    if isinstance(node, ast.Assign):
        return any(isinstance(t, ast.Name) and t.id == "FACE" for t in node.targets)
    return isinstance(node, ast.AnnAssign) and getattr(node.target, "id", None) == "FACE"


_BY_NAME = ("import_module", "find_spec", "__import__")


def _imports_by_name(node: ast.Call) -> bool:
    """``importlib.import_module("agentos.x")`` and its kin, with the name written out."""
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    return (
        name in _BY_NAME
        and bool(node.args)
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
        and node.args[0].value.split(".")[0] == "agentos"
    )


def imported(module: str, path: Path, modules: dict[str, Path]) -> Iterator[tuple[str, int]]:
    """Every module ``module`` imports, with the line: at the top and inside functions alike
    (a circle is not broken by moving an import into a function), the names of a lazy public
    face (``FACE``, see agentos.shared.faces) too; not what only a type checker reads."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    def walk(node: ast.AST) -> Iterator[tuple[str, int]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for other in child.orelse:
                    yield from walk_one(other)
                continue
            yield from walk_one(child)

    def walk_one(node: ast.AST) -> Iterator[tuple[str, int]]:
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, *([node.module] if node.module else [])])
            for alias in node.names:
                full = f"{base}.{alias.name}"
                yield (full if full in modules else base), node.lineno
        elif _assigns_face(node):
            value = node.value  # type: ignore[attr-defined]
            assert isinstance(value, ast.Dict), f"{path}: FACE is a dict literal"
            for module in value.values:
                assert isinstance(module, ast.Constant), f"{path}: FACE names modules literally"
                yield str(module.value), getattr(node, "lineno", 0)
        else:
            if isinstance(node, ast.Call) and _imports_by_name(node):
                yield node.args[0].value, node.lineno  # type: ignore[attr-defined]
            yield from walk(node)

    for name, line in walk(tree):
        target = known(name)
        if target is None or target == module:
            continue
        yield target, line
        # Importing a.b.c runs the __init__ of a.b first (unless a.b is one's own package).
        parts = target.split(".")
        for i in range(2, len(parts)):
            parent = ".".join(parts[:i])
            if parent in modules and parent != module and not module.startswith(parent + "."):
                yield parent, line


@functools.cache
def import_graph() -> dict[str, dict[str, int]]:
    modules = module_files()
    return {m: dict(imported(m, p, modules)) for m, p in modules.items()}


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(graph.get(nxt, {}))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def layers() -> list[list[str]]:
    """The layer table of docs/architecture.md, bottom first: each row's parts, in order."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    table = text.split("<!-- layers -->")[1].split("<!-- /layers -->")[0]
    rows = [line for line in table.splitlines() if line.startswith("|")][2:]
    return [re.findall(r"`([\w.]+)`", row.split("|")[2]) for row in rows]


def unit(module: str) -> str:
    """The part of the layout a module belongs to: its top-level folder or module."""
    parts = module.split(".")
    return "agentos" if len(parts) == 1 else f"agentos.{parts[1]}"


def against(graph: dict[str, dict[str, int]], order: list[str]) -> list[str]:
    """Every import of a part by a part below it in ``order`` (bottom first)."""
    rank = {part: i for i, part in enumerate(order)}
    return [
        f"{module}:{line} imports {target} (layer order: {unit(module)} is below {unit(target)})"
        for module, targets in sorted(graph.items())
        for target, line in sorted(targets.items())
        if rank[unit(target)] > rank[unit(module)]
    ]


def test_the_import_graph_has_no_circles() -> None:
    found = cycles(import_graph())
    assert not found, "import circles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_imports_point_down_the_layers_that_docs_architecture_states() -> None:
    order = [part for row in layers() for part in row]  # bottom first, each row in order
    rank = {part: i for i, part in enumerate(order)}
    graph = import_graph()
    units = {unit(m) for m in graph}
    assert units == set(rank), (
        f"docs/architecture.md's layers miss {sorted(units - set(rank))} "
        f"or name what does not exist {sorted(set(rank) - units)}"
    )
    found = against(graph, order)
    assert not found, "\n".join(found)


def test_a_circle_or_an_import_up_the_layers_is_found(tmp_path: Path) -> None:
    """The graph the two tests above judge sees what they must: an import inside a function,
    a lazy face, and not an import only a type checker reads."""
    root = tmp_path / "agentos"
    (root / "low").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "low" / "__init__.py").write_text('FACE = {"X": "agentos.low.a"}\n')
    (root / "low" / "a.py").write_text("def f():\n    from agentos.low import b\n")
    (root / "low" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from agentos import high\n"
        "from agentos.low import a\n"
    )
    (root / "high.py").write_text("import agentos.low.b\n")
    (root / "mid").mkdir()
    (root / "mid" / "__init__.py").write_text("FACE: dict[str, str] = {'Y': 'agentos.mid.x'}\n")
    (root / "mid" / "x.py").write_text("from . import y\n")
    (root / "mid" / "y.py").write_text(
        "import importlib\n\ndef g():\n    return importlib.import_module('agentos.mid.z')\n"
    )
    (root / "mid" / "z.py").write_text("from agentos.mid import x\nfrom agentos import high\n")
    modules = {
        "agentos": root / "__init__.py",
        "agentos.low": root / "low" / "__init__.py",
        "agentos.low.a": root / "low" / "a.py",
        "agentos.low.b": root / "low" / "b.py",
        "agentos.high": root / "high.py",
        "agentos.mid": root / "mid" / "__init__.py",
        "agentos.mid.x": root / "mid" / "x.py",
        "agentos.mid.y": root / "mid" / "y.py",
        "agentos.mid.z": root / "mid" / "z.py",
    }
    graph = {m: dict(imported(m, p, modules)) for m, p in modules.items()}
    assert graph["agentos.low"] == {"agentos.low.a": 1}
    assert graph["agentos.low.b"] == {"agentos.low.a": 4}  # not agentos.high: TYPE_CHECKING
    assert graph["agentos.high"] == {"agentos.low.b": 1, "agentos.low": 1}
    assert graph["agentos.mid"] == {"agentos.mid.x": 1}  # an annotated face
    assert graph["agentos.mid.x"] == {"agentos.mid.y": 1}  # a relative import
    assert graph["agentos.mid.y"] == {"agentos.mid.z": 4}  # a module imported by its name
    assert sorted(cycles(graph)) == [  # a circle of three, through a function's import
        ["agentos.low.a", "agentos.low.b"],
        ["agentos.mid.x", "agentos.mid.y", "agentos.mid.z"],
    ]
    order = ["agentos", "agentos.low", "agentos.mid", "agentos.high"]
    assert against(graph, order) == [
        "agentos.mid.z:2 imports agentos.high (layer order: agentos.mid is below agentos.high)"
    ]
    assert against(graph, ["agentos", "agentos.high", "agentos.low", "agentos.mid"]) == [
        "agentos.high:1 imports agentos.low (layer order: agentos.high is below agentos.low)",
        "agentos.high:1 imports agentos.low.b (layer order: agentos.high is below agentos.low)",
    ]


def test_agentos_has_one_folder_per_concept_and_few_modules_beside_them() -> None:
    entries = {name.split("/")[1] for name in tracked("agentos/**")}
    assert len(entries) <= 26, sorted(entries)  # 22 folders (STYLE.md's map, cluster/ last)
    folders = {e for e in entries if (PACKAGE / e).is_dir()}
    loose = sorted(e for e in entries - folders if e.endswith(".py"))
    assert loose == ["__init__.py", "__main__.py", "errors.py", "sdk.py"], loose
    # No module is named after a sibling concept (the old _interview_lexicon.py beside
    # interview.py): at every level, a module's name does not start with a sibling folder's.
    for directory in sorted({(REPO_ROOT / n).parent for n in tracked("agentos/**.py")}):
        if str(directory.relative_to(REPO_ROOT)).startswith(NOT_MODULES):
            continue
        concepts = {d.name for d in directory.iterdir() if (d / "__init__.py").is_file()}
        for module in directory.glob("*.py"):
            stem = module.stem.lstrip("_")
            clash = [c for c in concepts if stem != c and stem.startswith(c + "_")]
            assert not clash, f"{module.relative_to(REPO_ROOT)} is named after {clash}"


def test_every_lazy_face_lists_its_names_and_serves_them() -> None:
    import importlib

    for init in sorted(PACKAGE.glob("*/__init__.py")):
        module = importlib.import_module(f"agentos.{init.parent.name}")
        face = getattr(module, "FACE", None)
        if face is None:
            continue
        assert set(face) <= set(module.__all__), init
        eager = set(module.__all__) - set(face)  # imported by the __init__ itself
        assert all(name in vars(module) for name in eager), (init, eager)
        # A face's name is never also a submodule's: once the submodule is imported, the
        # package's attribute would be the module, not the name the face serves.
        assert not {n for n in face if (init.parent / f"{n}.py").exists()}, init
        for name, where in face.items():
            assert getattr(module, name) is getattr(importlib.import_module(where), name)
        assert set(face) <= set(dir(module)), init
        # What a type checker reads (the TYPE_CHECKING imports) is the face, name for name.
        typed = {
            alias.name: node.module
            for block in ast.parse(init.read_text()).body
            if isinstance(block, ast.If) and _is_type_checking(block)
            for node in block.body
            if isinstance(node, ast.ImportFrom)
            for alias in node.names
            if node.module and node.module.startswith(module.__name__ + ".")
        }
        assert typed == dict(face), init


def test_the_wheel_installs_no_top_level_name_but_agentos() -> None:
    """mcp_server and guardian live inside the package (PyPI's `guardian` and `mcp-server`
    install those import names); the wheel's build lists the package alone."""
    pyproject = (REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert re.search(r'^packages = \["agentos"\]$', pyproject, re.M)
    for name in ("guardian", "mcp_server"):
        assert not (REPO_ROOT / name).exists(), name


def test_the_newcomers_questions_each_have_one_folder_and_one_file() -> None:
    """docs/architecture.md's "Where to look": each answer names a file that exists and the
    function in it that does the thing."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    table = text.split("<!-- where -->")[1].split("<!-- /where -->")[0]
    rows = [line for line in table.splitlines() if line.startswith("|")][2:]
    assert len(rows) >= 5
    for row in rows:
        question, answer = (cell.strip() for cell in row.strip("|").split("|")[:2])
        path, function = re.findall(r"`([^`]+)`", answer)[:2]
        assert path.startswith("agentos/") and path.count("/") == 2, (question, path)
        source = (REPO_ROOT / path).read_text(encoding="utf-8")
        assert re.search(rf"^\s*def {re.escape(function.rstrip('()'))}\(", source, re.M), question


def test_the_library_starts_no_adapter_and_writes_sql_only_in_its_stores() -> None:
    """The library imports no adapter (the layer test) and starts no `python -m agentos`
    (but for the Claude Code Stop hook's command line); SQL is written only in the stores."""
    stores = {
        "agentos/state/sqlite.py",
        "agentos/state/postgres.py",
        "agentos/state/transfer.py",
        "agentos/receipts/table.py",
        "agentos/run/store.py",
        "agentos/knowledge/store.py",
        "agentos/workflows/store.py",
        "agentos/workflows/index.py",  # deduplication's index, over the workflow store's connection
        "agentos/guardian/store.py",
    }
    adapters = ("agentos/cli/", "agentos/mcp_server/", "agentos/guardian/")
    for name in tracked("agentos/**.py"):
        text = (REPO_ROOT / name).read_text(encoding="utf-8")
        if not name.startswith(adapters) and name != "agentos/gate/hook.py":
            assert '"-m", "agentos"' not in text, name
        if name not in stores:
            assert not re.search(r"\.execute(many|script)?\(", text), f"SQL in {name}"
