"""What the sandbox adds, measured against the same process unconfined, in one run.

    .venv/bin/python benchmarks/sandbox_bench.py [--rounds N]

1. Starting an agent: an agent's policy made, its control group made, the confined
   `/bin/true` run to its end and the group removed, against `/bin/true` run directly.
   Target: <= 15 ms added per agent start.
2. One gate check through the gate's runner, confined (read-only tree, its own control
   group, no network) and not, on the bundled lint-demo example: its tests
   (`python -m pytest -q`, a typical check) and `ruff check .` (a check of a few
   milliseconds, where the sandbox's fixed cost shows most). Target: <= 1.2x.
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

from agentos.sandbox import Group, Sandbox, SandboxSettings, choose
from agentos.sandbox.confine import CheckConfiner, Scene, agent_policy, watch_writes
from agentos.shared import process

ROOT = Path(__file__).resolve().parent.parent


def p50(samples: list[float]) -> float:
    return statistics.median(samples)


def sh(*argv: str, cwd: Path) -> None:
    subprocess.run(argv, cwd=cwd, check=True, capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    settings = SandboxSettings()
    sandbox = choose(settings)
    home = Path(os.environ.get("HOME", "/"))
    # An agent's PATH, as agentos.run.launch makes it: AgentOS's own bin, then the system's.
    path_env = f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin"
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        ws = root / "ws"
        repo = root / "repo"
        shutil.copytree(ROOT / "examples" / "lint-demo", repo)
        sh("git", "init", "-q", "-b", "main", cwd=repo)
        sh("git", "add", "-A", cwd=repo)
        sh("git", "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", "i", cwd=repo)
        worktree = ws / ".agentos" / "worktrees" / "r" / "a"
        worktree.parent.mkdir(parents=True)
        sh("git", "worktree", "add", "-q", "-b", "bench", str(worktree), cwd=repo)
        run_dir = ws / ".agentos" / "runs" / "r" / "a"
        run_dir.mkdir(parents=True)
        log = ws / ".agentos" / "logs" / "r" / "a.log"
        log.parent.mkdir(parents=True)
        log.touch()
        package = ws / "hub" / "p" / "1.0.0"
        package.mkdir(parents=True)
        scene = Scene(settings, ws, repo, home)

        raw, confined = [], []
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            subprocess.run(["/bin/true"], check=True)
            raw.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            pol = agent_policy(
                scene,
                package=None,
                package_dir=package,
                worktree=worktree,
                own_files=[run_dir, log],
                path_env=path_env,
                persistent_home=None,
            )
            group = Group(pol.limits)
            watch_writes(group, pol, confined=sandbox.confined)
            subprocess.run(sandbox.command(pol, ["/bin/true"], group), check=True)
            group.close()
            confined.append(time.perf_counter() - t0)
        added = (p50(confined) - p50(raw)) * 1000
        print(f"sandbox: {sandbox.reason}")
        print(f"agent start, unconfined `/bin/true`: p50 {p50(raw) * 1000:.1f} ms")
        print(
            f"agent start, confined (policy, group, {sandbox.backend}): "
            f"p50 {p50(confined) * 1000:.1f} ms"
        )
        print(f"added per agent start: {added:.1f} ms (target <= 15 ms)")

        env = {"PATH": path_env, "HOME": str(home)}
        confiner = CheckConfiner(sandbox, scene, worktree, env["PATH"])
        for name, command in (
            ("tests `python -m pytest -q`", f"{sys.executable} -m pytest -q -p no:cacheprovider"),
            ("lint `ruff check .`", "ruff check --no-cache ."),
        ):
            plain, boxed = [], []
            for _ in range(max(5, args.rounds // 3)):
                t0 = time.perf_counter()
                process.run_shell(command + " >/dev/null || true", worktree, env, 120)
                plain.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                wrap, group = confiner.prepare(worktree, writes=False)
                process.run_shell(command + " >/dev/null || true", worktree, env, 120, wrap)
                group.close()
                boxed.append(time.perf_counter() - t0)
            print(
                f"gate check, {name}: unconfined p50 {p50(plain) * 1000:.1f} ms, confined "
                f"{p50(boxed) * 1000:.1f} ms = {p50(boxed) / p50(plain):.2f}x, "
                f"+{(p50(boxed) - p50(plain)) * 1000:.1f} ms (target <= 1.2x)"
            )

        overshoot(sandbox, scene, package, worktree, run_dir, log, path_env)


def overshoot(
    sandbox: Sandbox,
    scene: Scene,
    package: Path,
    worktree: Path,
    run_dir: Path,
    log: Path,
    path_env: str,
) -> None:
    """How far past its disk quota an agent writing as fast as it can gets: 1 MB writes
    into its worktree, under a 20 MB quota, until it is killed."""
    from agentos.sandbox import PackageSandbox

    quota = 20 << 20
    pol = agent_policy(
        scene,
        package=PackageSandbox(disk=quota, file_size=quota),
        package_dir=package,
        worktree=worktree,
        own_files=[run_dir, log],
        path_env=path_env,
        persistent_home=None,
    )
    sizes = []
    for round_ in range(5):
        target = worktree / f"fill{round_}"
        group = Group(pol.limits)
        watch_writes(group, pol, confined=sandbox.confined)
        writer = f"for i in $(seq 200); do head -c 1M /dev/zero > {target}$i; done"
        subprocess.run(sandbox.command(pol, ["/bin/sh", "-c", writer], group), check=False)
        hit = group.disk_hit
        group.close()
        written = sum(p.stat().st_blocks * 512 for p in worktree.glob(f"fill{round_}*"))
        for p in worktree.glob(f"fill{round_}*"):
            p.unlink()
        sizes.append(written - quota if hit else float("nan"))
    over = p50(sizes) / (1 << 20)
    print(
        f"disk quota 20 MB, 1 MB files written as fast as possible: stopped "
        f"{sum(s == s for s in sizes)}/5 times, p50 {over:.1f} MB past the quota "
        f"(file_size 20 MB)"
    )


if __name__ == "__main__":
    sys.exit(main())
