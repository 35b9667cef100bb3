"""Evolutions from the outside: started in the background, cancelled, shown (a family
tree, a score chart), and a generation promoted to a hub version."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from agentos.errors import BadInput, NotFound, OperationFailed
from agentos.evolve.archive import Evolution, Generation
from agentos.hub.archive import package_files
from agentos.hub.manifest import MANIFEST
from agentos.hub.store import Hub, InstallResult
from agentos.receipts import write_receipt
from agentos.run.store import pid_alive
from agentos.shared.models import SemVer, all_errors
from agentos.worktrees import repo as wt

CANCEL_WAIT = 60.0  # seconds `cancel` waits for the process to stop
BAR = 30  # characters of a full bar in the chart
_VERSION_LINE = re.compile(r"^version:[^\n]*$", re.MULTILINE)


def start_detached(evo: Evolution) -> Path:
    """Drive ``evo`` in a background process; returns its log. Returns once the process
    has said it runs (or has ended)."""
    log = evo.root / "evolve.log"
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "agentos.evolve.detached", str(evo.ws.root), evo.id],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,
        )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and proc.poll() is None:
        if evo.state().get("pid") == proc.pid:
            break
        time.sleep(0.02)
    return log


def cancel(evo: Evolution) -> str:
    """Stop the process driving ``evo`` (the generation under way is dropped); returns
    once it has stopped. Not running: exit 2."""
    state = evo.state()
    pid, started = state.get("pid"), state.get("pid_start")
    if state.get("status") != "running" or pid is None or not pid_alive(pid, started):
        raise BadInput(f"evolution {evo.id} is not running ({describe(evo)})", field="EVO")
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + CANCEL_WAIT
    while pid_alive(pid, started) and time.monotonic() < deadline:
        time.sleep(0.05)
    if pid_alive(pid, started):
        raise OperationFailed(f"evolution {evo.id} (pid {pid}) did not stop in {CANCEL_WAIT:g}s")
    return describe(evo)


def describe(evo: Evolution) -> str:
    """One line: whether it runs, and why it stopped."""
    state = evo.state()
    status = state.get("status", "created")
    if status == "running" and not pid_alive(state.get("pid"), state.get("pid_start")):
        return f"interrupted: its process died (`agentos evolve resume {evo.id}` continues)"
    if status == "running":
        return f"running (pid {state.get('pid')})"
    if status == "created":
        return f"not started (`agentos evolve resume {evo.id}` starts it)"
    return f"{status}: {state.get('reason', '')}".rstrip(": ")


def promote(evo: Evolution, gen: int, version: str) -> InstallResult:
    """Install generation ``gen`` as version ``version`` of the package (the normal hub
    rules: hashed, locked, active; ``hub use`` rolls back). An invalid generation: exit 1."""
    try:
        TypeAdapter(SemVer).validate_python(version)
    except ValidationError as exc:
        raise BadInput(all_errors(exc)[0][1], field="--version") from None
    spec = evo.spec()
    found = evo.generations().get(gen)
    if found is None:
        raise NotFound(f"evolution {evo.id} has no generation {gen}", field="GEN")
    if not found.valid_parent:
        raise OperationFailed(f"generation {gen} is invalid and cannot be promoted: {found.reason}")
    hub = Hub(evo.ws.hub_dir)
    with tempfile.TemporaryDirectory(dir=evo.root) as tmp:
        checkout, package = Path(tmp) / "checkout", Path(tmp) / spec.package
        wt.run_git(evo.repo, "worktree", "add", "-q", "--detach", str(checkout), found.commit)
        try:
            for path in package_files(checkout):
                dest = package / path.relative_to(checkout)
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, dest, follow_symlinks=False)
        finally:
            wt.run_git(evo.repo, "worktree", "remove", "--force", str(checkout))
        manifest = package / MANIFEST
        text = manifest.read_text(encoding="utf-8")
        if len(_VERSION_LINE.findall(text)) != 1:
            raise OperationFailed(f"generation {gen}'s agent.yaml has no one `version:` line")
        manifest.write_text(_VERSION_LINE.sub(f"version: {version}", text), encoding="utf-8")
        result = hub.install(str(package))
    write_receipt(
        evo.ws,
        "promote",
        {
            "evolution": evo.id,
            "generation": gen,
            "package": f"{result.name}@{result.version}",
            "from": f"{spec.package}@{spec.version}",
            "commit": found.commit,
            "score": found.score,
            "package_sha256": result.sha256,
        },
        run_id=evo.id,
    )
    return result


def tree_lines(gens: dict[int, Generation]) -> list[str]:
    """The family tree, one generation a line, children under their parent."""
    children: dict[int | None, list[int]] = {}
    for g in gens.values():
        children.setdefault(g.parent, []).append(g.gen)
    lines: list[str] = []

    def walk(gen: int, prefix: str, last: bool, top: bool) -> None:
        g = gens[gen]
        score = "invalid" if g.score is None else f"{g.score:.3f}"
        label = f"{gen} [{g.verdict}] {score}"
        lines.append(label if top else f"{prefix}{'└── ' if last else '├── '}{label}")
        below = sorted(children.get(gen, []))
        inner = "" if top else prefix + ("    " if last else "│   ")
        for i, child in enumerate(below):
            walk(child, inner, i == len(below) - 1, False)

    for root in sorted(children.get(None, [])):
        walk(root, "", True, True)
    return lines


def chart_lines(gens: dict[int, Generation]) -> list[str]:
    """The score of each generation as a bar, and the best so far."""
    lines = []
    best = -1.0
    for g in gens.values():
        score = g.score if g.score is not None else 0.0
        best = max(best, score if g.valid_parent else best)
        bar = "█" * round(score * BAR)
        shown = "  —  " if g.score is None else f"{score:.3f}"
        lines.append(f"{g.gen:>4} {bar:<{BAR}} {shown} {g.verdict:<7} best {max(best, 0.0):.3f}")
    return lines


def summary(evo: Evolution) -> dict[str, Any]:
    """What `evolve status --json` prints."""
    spec = evo.spec()
    gens = evo.generations()
    valid = [g for g in gens.values() if g.valid_parent and g.score is not None]
    best = max(valid, key=lambda g: (g.score or 0.0, g.gen)) if valid else None
    return {
        "id": evo.id,
        "package": f"{spec.package}@{spec.version}",
        "suite": spec.suite_name,
        "meta": spec.meta,
        "select": spec.select,
        "seed": spec.seed,
        "generations": {"made": max(0, len(gens) - 1), "asked": spec.generations},
        "state": evo.state(),
        "status": describe(evo),
        "best": None if best is None else {"generation": best.gen, "score": best.score},
        "archive": [g.model_dump(mode="json") for g in gens.values()],
    }
