"""The tests check's cost on a real project's suite, against the same suite run directly, in
one run (issue 31).

    .venv/bin/python benchmarks/gate_bench.py [--project humanize] [--rounds N]

On a real PyPI project (tests/_projects.py: its sdist as a git repository, its own .venv
with an editable install, a seeded regression), an agent's worktree holds the right fix.
Measured, each the median of N rounds:

- raw: the repository's own test command (`.venv/bin/python -m pytest -q`) run directly in
  the worktree: the primitive;
- raw, confined: the same command in the gate's sandbox (read-only tree, no network);
- gate: the tests check as a run's gate runs it, the base's collection already made (a
  run's preflight makes it once, before any agent starts): the diff read for findings, the
  judged tree made and checked out, the base's tests run there with the recorder, confined;
- gate, cold: the same with no base collection yet (``agentos gate run`` on a new base).

Target: gate <= 1.3x raw (measured here: humanize 1.13x; six 2.06x, a 0.46 s suite whose one
test file of 600 asserts the recorder compiles again to verify it). Also printed: the gate on
a tree that breaks a test (the failing test is re-run at the base, the only extra run a
failure costs).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from _projects import PROJECTS, build_project_repo  # noqa: E402

from agentos.gate.environment import gate_environment  # noqa: E402
from agentos.gate.repo import repo_profile  # noqa: E402
from agentos.gate.runner import run_gate, run_judging  # noqa: E402
from agentos.sandbox import choose  # noqa: E402
from agentos.sandbox.confine import CheckConfiner, Scene, venv_paths  # noqa: E402
from agentos.shared import process  # noqa: E402
from agentos.shared.checks import CheckSpec  # noqa: E402
from agentos.workspace.layout import init_workspace  # noqa: E402


def p50(samples: list[float]) -> float:
    return statistics.median(samples)


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--project", default="humanize", choices=["humanize", "six"])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("GIT_AUTHOR_NAME", "bench")
    os.environ.setdefault("GIT_AUTHOR_EMAIL", "bench@agentos.invalid")
    os.environ.setdefault("GIT_COMMITTER_NAME", "bench")
    os.environ.setdefault("GIT_COMMITTER_EMAIL", "bench@agentos.invalid")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        project = PROJECTS[args.project]
        proj = build_project_repo(project, root / args.project, regression=True)
        ws, _ = init_workspace(root / "ws")
        ws.settings_file.write_text("run: {guardian: false}\n")
        base = proj.base
        profile = repo_profile(ws, proj.repo, at=base)
        settings = ws.settings.sandbox
        sandbox = choose(settings)
        scene = Scene(
            settings,
            ws.root,
            proj.repo,
            Path(os.environ.get("HOME", "/")),
            tuple(venv_paths(profile.venv, profile.python)),
        )

        def worktree(name: str, fixed: bool) -> Path:
            tree = ws.worktrees_dir / "bench" / name
            tree.parent.mkdir(parents=True, exist_ok=True)
            git(proj.repo, "worktree", "add", "-q", "-b", f"bench/{name}", str(tree), base)
            from agentos.gate.repo import prepare_worktree

            prepare_worktree(profile, tree)
            path = tree / project.code.path
            text = path.read_text()
            if fixed:
                path.write_text(text.replace(project.code.bad, project.code.good))
            git(tree, "commit", "-qam", "fix" if fixed else "no fix", "--allow-empty")
            return tree

        fixed = worktree("fixed", True)
        broken = worktree("broken", False)
        env = gate_environment(profile, fixed)
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env["PYTEST_ADDOPTS"] = f"-o cache_dir={root / 'pytest-cache'}"
        command = profile.test_command()
        timeout = 900.0
        confiner = CheckConfiner(sandbox, scene, fixed, env["PATH"])
        check = CheckSpec(name="tests pass", tests=[])

        def raw() -> float:
            began = time.perf_counter()
            out = process.run_shell(command, fixed, env, timeout)
            assert out.passed, out.tail
            return time.perf_counter() - began

        def raw_confined() -> float:
            began = time.perf_counter()
            out = confiner.run(command, env, timeout)
            assert out.passed, out.tail
            return time.perf_counter() - began

        def gate(tree: Path, cold: bool, expect: bool) -> float:
            if cold:
                shutil.rmtree(ws.state_dir / "cache" / "gate", ignore_errors=True)
            began = time.perf_counter()
            result = run_gate(
                [check],
                tree,
                base=base,
                env=gate_environment(profile, tree),
                profile=profile,
                confiner=CheckConfiner(sandbox, scene, tree, env["PATH"]),
                judging=run_judging(ws, "bench", "agent", base),
            )
            seconds = time.perf_counter() - began
            assert result.passed is expect, result.results[0].output_tail
            return seconds

        gate(fixed, cold=True, expect=True)  # the base's collection, as a preflight makes it
        rows: dict[str, list[float]] = {
            "raw": [],
            "raw, confined": [],
            "gate": [],
            "gate, cold": [],
            "gate, a broken test": [],
        }
        for _ in range(args.rounds):
            rows["raw"].append(raw())
            rows["raw, confined"].append(raw_confined())
            rows["gate"].append(gate(fixed, cold=False, expect=True))
            rows["gate, a broken test"].append(gate(broken, cold=False, expect=False))
            rows["gate, cold"].append(gate(fixed, cold=True, expect=True))
        print(
            f"gate_bench: {args.project} ({project.version}), `{command}`, "
            f"{args.rounds} rounds, sandbox {sandbox.backend}"
        )
        reference = p50(rows["raw"])
        for name, samples in rows.items():
            print(f"  {name:22} {p50(samples):7.3f} s   {p50(samples) / reference:5.2f}x raw")
        ratio = p50(rows["gate"]) / reference
        print(f"target: gate <= 1.30x raw: {'met' if ratio <= 1.3 else 'NOT met'} ({ratio:.2f}x)")


if __name__ == "__main__":
    main()
