"""What the meta agent is asked, and what it may not keep: its request, and the suite's
files, snapshotted before it runs and put back after."""

from __future__ import annotations

from pathlib import Path

from agentos.evals.suite import Suite
from agentos.evolve.archive import EvolutionSpec, Generation
from agentos.shared.fs import atomic_write


def render_prompt(
    spec: EvolutionSpec, suite: Suite, parent: Generation, left: int, eval_dir: Path
) -> str:
    """The meta agent's request: what to improve, how it scores now, what is left, where
    the earlier training evaluations are."""
    score = parent.score or 0.0
    if parent.perfect:
        focus = (
            f"The current agent scores {score:.1%}: every task passes. Do NOT make changes "
            "unless you see a clear improvement."
        )
    else:
        focus = f"The current agent scores {score:.1%}. Focus on the tasks it fails."
    return (
        f"Improve the agent package `{spec.package}` in the current directory (your "
        f"working directory holds its files: agent.yaml and what its entry names).\n\n"
        f"It is scored by the eval suite `{spec.suite_name}`"
        + (f" ({suite.spec.description.strip()})" if suite.spec.description.strip() else "")
        + f". You are improving generation {parent.gen}. {focus}\n\n"
        f"You have {left} iteration(s) left after this one.\n\n"
        f"The training evaluations of the earlier generations are in {eval_dir}: one folder "
        "per generation (gen-<n>), with report.json (the scores) and predictions.json (each "
        "task's answer, score and feedback). Read the failures there.\n\n"
        "Change only the package's own files. Keep agent.yaml's name, runtime, env and "
        "sandbox as they are. Do not try to read or change the suite: a generation that "
        "does is rejected."
    )


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file of the suite's folder, to put back if the meta agent changes them."""
    out: dict[str, bytes] = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            out[str(path.relative_to(root))] = path.read_bytes()
    return out


def restore(root: Path, before: dict[str, bytes]) -> list[str]:
    """Put the suite's files back as they were; what had changed."""
    now = snapshot(root)
    changed = sorted(k for k in before.keys() | now.keys() if before.get(k) != now.get(k))
    for rel in changed:
        path = root / rel
        if rel in before:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(path, before[rel])
        else:
            path.unlink(missing_ok=True)
    return changed
