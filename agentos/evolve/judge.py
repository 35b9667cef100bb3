"""Judging a generation the meta agent made: the checks that reject it (it changed nothing,
or more than the package's own files, or fails the smoke test), and the evals that score it.

Each takes the :class:`~agentos.evolve.loop.Evolver` that drives the evolution.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentos.errors import AgentOSError
from agentos.evals.harness import EvalReport, run_eval
from agentos.evolve.archive import Generation
from agentos.hub.manifest import Manifest, load_manifest
from agentos.runtimes import get_runtime
from agentos.sandbox.confine import Scene

if TYPE_CHECKING:
    from agentos.evolve.loop import Evolver

PYTHON_RUNTIMES = ("python", "langchain", "crewai")
SMOKE_TIMEOUT = 60.0  # seconds the entry's import may take
# The package's own files: anything but a top-level dotfile (.git*, .agentos*), whose
# effect reaches past the package (git attributes, AgentOS's own files).
PACKAGE_FILES = "[!.]*"


def invalid(
    ev: Evolver, tree: Path, parent: Generation, commit: str | None, tampered: list[str]
) -> str | None:
    """Why the generation cannot be a package version (None: it can)."""
    if tampered:
        return f"the meta agent changed the suite's files (put back): {', '.join(tampered[:5])}"
    if commit is None:
        return "the meta agent changed nothing"
    from agentos.gate import builtin

    # the gate's no_changes_outside check, on what the commit changed.
    outcome = builtin.no_changes_outside(
        builtin.changes(tree, parent.commit), parent.commit, [PACKAGE_FILES]
    )
    if not outcome.passed:
        outside = outcome.tail.strip().splitlines()
        return (
            "package files only (no_changes_outside "
            f"{PACKAGE_FILES}): {'; '.join(line.strip() for line in outside[:4])}"
        )
    return smoke(ev, tree)


def smoke(ev: Evolver, tree: Path) -> str | None:
    """The manifest loads, names the same package, widens nothing; the entry imports."""
    try:
        manifest = load_manifest(tree)
    except AgentOSError as exc:
        return f"smoke test: {exc}"
    if manifest.name != ev.initial.name:
        return f"smoke test: the manifest names {manifest.name!r}, not {ev.initial.name!r}"
    for field in ("runtime", "env", "sandbox"):
        if getattr(manifest, field) != getattr(ev.initial, field):
            return f"smoke test: agent.yaml's {field} changed (a generation may not widen it)"
    try:
        get_runtime(manifest.runtime).preflight(manifest, tree)
    except AgentOSError as exc:
        return f"smoke test: {exc}"
    if manifest.runtime in PYTHON_RUNTIMES:
        return import_check(ev, tree, manifest.entry)
    return None


def import_check(ev: Evolver, tree: Path, entry: str) -> str | None:
    """The entry's module imports and names a callable, confined as a gate check."""
    from agentos.sandbox.confine import CheckConfiner, python_check_env

    module, _, attr = entry.partition(":")
    code = (
        "import importlib, sys; sys.path.insert(0, '.'); "
        f"m = importlib.import_module({module!r}); "
        f"sys.exit(0 if callable(getattr(m, {attr!r}, None)) else 3)"
    )
    env = python_check_env()
    scene = Scene(
        ev.ws.settings.sandbox, ev.ws.root, ev.evo.repo, Path(os.environ.get("HOME", "/"))
    )
    outcome = CheckConfiner(ev.sandbox, scene, tree, env["PATH"]).run(
        f"{shlex.quote(sys.executable)} -c {shlex.quote(code)}", env, SMOKE_TIMEOUT
    )
    if outcome.passed:
        return None
    if outcome.exit_code == 3:
        return f"smoke test: {entry} is not a callable"
    last = [line for line in outcome.tail.splitlines() if line.strip()][-1:]
    return f"smoke test: {entry} does not import" + (f": {last[0]}" if last else "")


def score(ev: Evolver, gen: int, package: tuple[Manifest, Path]) -> dict[str, Any]:
    """The training eval (kept in $AGENTOS_EVAL_DIR for later meta agents), then the
    validation eval; the score parents are chosen by."""
    label = f"{ev.spec.package}@{ev.spec.version} (evolve {ev.evo.id} gen {gen})"
    jobs = 1 if ev.spec.children > 1 and ev.spec.jobs > 1 else ev.spec.jobs
    splits = [ev.spec.split, *([ev.spec.val_split] if ev.spec.val_split else [])]
    scores: dict[str, dict[str, Any]] = {}
    reports: dict[str, EvalReport] = {}
    for split in splits:
        started = time.monotonic()
        report = run_eval(
            ev.ws,
            Path(ev.spec.suite),
            label,
            split=split,
            jobs=jobs,
            package=package,
            staged=ev.spec.staged,
            cancel=ev.cancel,
            backend=ev.spec.backend,
        )
        reports[split] = report
        scores[split] = {
            "eval": report.id,
            "composite": report.composite,
            "passed": report.passed,
            "dimensions": report.dimensions,
            "complete": not (report.staged and not report.staged["complete"]),
            "seconds": round(time.monotonic() - started, 3),  # the whole eval, report too
        }
    shown = ev.evo.evals / f"gen-{gen}"
    shown.mkdir(parents=True, exist_ok=True)
    kept = ev.ws.state_dir / "evals" / reports[ev.spec.split].id
    for name in ("report.json", "predictions.json"):
        shutil.copyfile(kept / name, shown / name)
    chosen = scores[ev.spec.val_split or ev.spec.split]
    perfect = chosen["complete"] and chosen["dimensions"].get("correctness") == 1.0
    return {"score": chosen["composite"], "perfect": perfect, "scores": scores}
