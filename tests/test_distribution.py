"""The distribution as a user installs it: an sdist and a wheel built from the checkout
(the wheel built from the sdist, as pip does), installed into a fresh virtual environment,
where the installed `agentos` makes a workspace from its bundled hub and cards and runs the
demo's real `agentos run` on a fixture repository.

The fresh environment gets AgentOS from the wheel and only from it; its dependencies come
from this checkout's environment through a .pth file (a path a .pth adds is not a site
directory, so the checkout's editable install is not visible there), so that the test
needs no network.
"""

from __future__ import annotations

import email
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO_ROOT, git, make_repo

from agentos import DISTRIBUTION

pytestmark = pytest.mark.slow

LINT_DEMO = REPO_ROOT / "examples" / "lint-demo"


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`python -m build`: the sdist from the checkout, then the wheel from the sdist."""
    out = tmp_path_factory.mktemp("dist")
    built = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(REPO_ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    return out


@pytest.fixture(scope="module")
def venv(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("venv") / "v"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    site = Path(
        subprocess.run(
            [
                str(root / "bin" / "python"),
                "-c",
                "import sysconfig; print(sysconfig.get_path('purelib'))",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    (site / "_checkout_dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    (wheel,) = dist.glob("*.whl")
    installed = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(root / "bin" / "python"),
            "install",
            "--no-deps",
            "--no-index",
            "-q",
            str(wheel),
        ],
        capture_output=True,
        text=True,
    )
    assert installed.returncode == 0, installed.stderr
    # The demo's agent fixes lint with ruff: a user has it installed beside AgentOS. A copy,
    # not a link: the sandbox shows the agent this venv, not where a link would point.
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent))
    assert ruff is not None
    shutil.copy2(ruff, root / "bin" / "ruff")
    yield root


def run_in(venv: Path, *argv: str, cwd: Path, **kw: Any) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("AGENTOS_HOME", "PYTHONPATH", "VIRTUAL_ENV")
    }
    env["PATH"] = f"{venv / 'bin'}:{env['PATH']}"
    return subprocess.run(
        list(argv), cwd=cwd, env=env, capture_output=True, text=True, timeout=300, **kw
    )


def test_the_sdist_and_the_wheel_hold_what_a_user_needs_and_nothing_else(dist: Path) -> None:
    (wheel,) = dist.glob("*.whl")
    (sdist,) = dist.glob("*.tar.gz")
    assert wheel.name.startswith("agentos_kit-0.1.0-") and sdist.name == "agentos_kit-0.1.0.tar.gz"
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops == {"agentos", "guardian", "mcp_server", "agentos_kit-0.1.0.dist-info"}
    assert "agentos/evals/_bundled/arithmetic/tasks.jsonl" in names  # the bundled eval suites
    for bundled in ("hub/ruff-fixer/1.0.0/agent.yaml", "routing_cards/fix-lint.yaml"):
        assert f"agentos/_bundled/{bundled}" in names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    meta = email.message_from_bytes(
        zipfile.ZipFile(wheel).read("agentos_kit-0.1.0.dist-info/METADATA")
    )
    assert meta["Name"] == DISTRIBUTION
    assert "all" in (meta.get_all("Provides-Extra") or [])
    requires = meta.get_all("Requires-Dist") or []
    everything = {r.split(">=")[0] for r in requires if r.endswith("extra == 'all'")}
    assert {"ollama", "langchain", "crewai"} <= everything  # the extras, spelled out
    assert not [r for r in requires if r.split("[")[0].split(">=")[0].strip() == "agentos"]
    with tarfile.open(sdist) as tar:
        members = tar.getnames()
    assert "agentos_kit-0.1.0/hub/ruff-fixer/1.0.0/run.sh" in members
    assert not [m for m in members if "/.venv/" in m or "/.git/" in m]


def test_the_installed_wheel_makes_a_workspace_and_runs_the_demo(
    venv: Path, tmp_path: Path, tmux_socket: str
) -> None:
    where = run_in(
        venv,
        str(venv / "bin" / "python"),
        "-c",
        "import agentos; print(agentos.__file__)",
        cwd=tmp_path,
    )
    assert where.stdout.startswith(str(venv)), where.stdout + where.stderr
    agentos = str(venv / "bin" / "agentos")
    assert run_in(venv, agentos, "--version", cwd=tmp_path).stdout == "agentos, version 0.1.0\n"

    made = run_in(venv, agentos, "init", str(tmp_path / "ws"), cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    ws = tmp_path / "ws"
    (ws / "agentos.yaml").write_text("run: {guardian: false}\n")
    listed = run_in(venv, agentos, "--workspace", str(ws), "hub", "list", "--json", cwd=tmp_path)
    assert "ruff-fixer" in listed.stdout, listed.stderr
    assert (ws / "routing_cards" / "fix-lint.yaml").is_file()

    repo = tmp_path / "lint-demo"
    shutil.copytree(LINT_DEMO, repo)
    make_repo(repo, {})
    base = git(repo, "rev-parse", "HEAD")
    request = (
        "Fix the ruff lint errors in app.py of the example project without changing its "
        "behaviour; done when ruff check passes."
    )
    done = run_in(
        venv,
        agentos,
        "--workspace",
        str(ws),
        "run",
        request,
        "--repo",
        str(repo),
        "--json",
        cwd=tmp_path,
    )

    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert git(repo, "rev-parse", "HEAD") != base
    assert run_in(venv, "ruff", "check", "--no-cache", ".", cwd=repo).returncode == 0
