"""Starting an evolution: the suite, the package and the meta agent checked whole before
anything is written, then the evolution's git repository with the package as generation 0.

:class:`agentos.evolve.loop.Evolver` then drives it.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from agentos.errors import BadInput
from agentos.evals.harness import find_suite
from agentos.evals.suite import load_suite
from agentos.evolve.archive import Evolution, EvolutionSpec, write_json_model
from agentos.evolve.selection import METHODS
from agentos.hub.archive import package_files
from agentos.hub.store import Hub
from agentos.run.store import new_run_id
from agentos.runtimes import ready_package
from agentos.workspace.layout import Workspace
from agentos.workspace.settings import Backend
from agentos.worktrees import repo as wt

VAL_SPLIT = "val"


def create(
    ws: Workspace,
    package: str,
    suite: str,
    *,
    meta: str,
    generations: int = 5,
    children: int = 1,
    select: str = "score_child_prop",
    seed: int = 0,
    staged: bool = False,
    jobs: int = 1,
    split: str = "tasks",
    backend: Backend = "local",
) -> Evolution:
    """A new evolution, checked whole before anything is written: the suite, the package
    and the meta agent (installed, intact, able to start here); its repository holds the
    package as generation 0. :func:`run` then drives it."""
    if select not in METHODS:
        raise BadInput(
            f"unknown selection {select!r} (one of {', '.join(METHODS)})", field="--select"
        )
    for name, value in (("--generations", generations), ("--children", children), ("--jobs", jobs)):
        if value < 1:
            raise BadInput(f"must be at least 1, not {value}", field=name)
    loaded = load_suite(find_suite(ws, suite))
    loaded.tasks(split)
    if loaded.spec.mode != "answer":
        raise BadInput(
            f"suite {loaded.name!r} is a repo-mode suite; evolve scores answer-mode suites",
            field="--suite",
        )
    if staged and loaded.spec.staged is None:
        raise BadInput(f"suite {loaded.name!r} has no `staged:` section", field="--staged")
    val = VAL_SPLIT if VAL_SPLIT in loaded.splits() and split != VAL_SPLIT else None
    if val is not None:
        loaded.tasks(val)
    hub = Hub(ws.hub_dir)
    info, manifest = ready_package(hub, package, "PACKAGE")
    meta_info, _ = ready_package(hub, meta, "--meta")
    evo = Evolution(ws, new_run_id())
    spec = EvolutionSpec(
        id=evo.id,
        package=manifest.name,
        version=manifest.version,
        suite=str(loaded.root.resolve()),
        suite_name=loaded.name,
        split=split,
        val_split=val,
        meta=f"{meta_info.name}@{meta_info.version}",
        generations=generations,
        children=children,
        select=select,
        seed=seed,
        staged=staged,
        jobs=jobs,
        backend=backend,
        created_at=time.time(),
    )
    evo.root.mkdir(parents=True)
    try:
        _init_repo(evo.repo, info.path)
        write_json_model(evo.spec_file, spec)
        evo.set_state("created")
    except BaseException:
        shutil.rmtree(evo.root, ignore_errors=True)
        raise
    return evo


def _init_repo(repo: Path, package_dir: Path) -> None:
    repo.mkdir(parents=True)
    wt.run_git(repo, "init", "-q", "-b", "gen-0")
    for path in package_files(package_dir):
        dest = repo / path.relative_to(package_dir)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, dest, follow_symlinks=False)
        if not dest.is_symlink():
            dest.chmod(0o755 if os.access(path, os.X_OK) else 0o644)
    wt.run_git(repo, "add", "-A")
    commit(repo, "generation 0: the installed package")


def commit(tree: Path, message: str) -> None:
    wt.run_git(
        tree,
        "-c",
        "user.name=agentos-evolve",
        "-c",
        "user.email=evolve@agentos.invalid",
        "commit",
        "-q",
        "--allow-empty",
        "-m",
        message,
    )
