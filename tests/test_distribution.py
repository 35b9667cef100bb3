"""The distribution as a user installs it: an sdist and a wheel built from the checkout
(the wheel built from the sdist, as pip does), installed into a fresh virtual environment
outside the checkout, where the installed `agentos` makes a workspace from its bundled hub and
cards, says what it can run, and runs the demo's real `agentos run` on a fixture repository.

The fresh environment is a user's: no system site-packages, nothing of the checkout on its
path, AgentOS from the built wheel and its dependencies from a wheelhouse of their own
(`pip install --no-index --find-links WHEELHOUSE WHEEL`, which is `pip install agentos-kit`
without the network). scripts/fetch-test-projects keeps that wheelhouse, pinned, under
DIR/agentos/. Installing takes a while, so the sdist, the wheel and the environment are made
once per session, and shared by the pytest-xdist workers.
"""

from __future__ import annotations

import base64
import email
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest
from _projects import pypi_cache
from conftest import REPO_ROOT, git, make_repo
from filelock import FileLock

from agentos import DISTRIBUTION

pytestmark = pytest.mark.slow

LINT_DEMO = REPO_ROOT / "examples" / "lint-demo"
# The distribution's dependencies in the wheelhouse of scripts/fetch-test-projects.
DEPENDENCIES = "agentos"


def _clean_env() -> dict[str, str]:
    """This environment without what would show the checkout or its venv to a child, and
    without the machine's pip settings (an index, extra find-links)."""
    mine = (str(REPO_ROOT), str(Path(sys.executable).parent))
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("AGENTOS_HOME", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")
        and not k.startswith("PIP_")
    }
    env["PATH"] = os.pathsep.join(
        p for p in env.get("PATH", "").split(os.pathsep) if p and not p.startswith(mine)
    )
    env["PIP_CONFIG_FILE"] = os.devnull
    return env


def _build_and_install(out: Path) -> dict[str, float]:
    """`python -m build` (the sdist from the checkout, then the wheel from the sdist) into
    out/dist, then a user's install of the wheel into a fresh venv out/venv; the seconds each
    took."""
    seconds: dict[str, float] = {}
    start = time.monotonic()
    built = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out / "dist"), "."],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    seconds["build"] = time.monotonic() - start

    wheelhouse = pypi_cache() / DEPENDENCIES
    (wheel,) = (out / "dist").glob("*.whl")
    root = out / "venv"
    start = time.monotonic()
    # No system site-packages (venv's default); no pip in it: the checkout's pip installs.
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(root)],
        cwd=out,
        env=_clean_env(),
        check=True,
        timeout=120,
    )
    installed = subprocess.run(
        [
            *(sys.executable, "-m", "pip", "--python", str(root / "bin" / "python")),
            *("install", "--quiet", "--disable-pip-version-check"),
            *("--no-index", "--find-links", str(wheelhouse), str(wheel)),
        ],
        cwd=out,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert installed.returncode == 0, (
        f"{installed.stderr}\nA dependency missing from {wheelhouse}? AgentOS's own are pinned "
        "in scripts/fetch-test-projects (AGENTOS_DEPS)."
    )
    seconds["install"] = time.monotonic() - start
    # The demo's agent fixes lint with ruff: a user has it installed beside AgentOS. A copy,
    # not a link: the sandbox shows the agent this venv, not where a link would point.
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent))
    assert ruff is not None
    shutil.copy2(ruff, root / "bin" / "ruff")
    return seconds


@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with dist/ (the sdist and the wheel), venv/ (the wheel installed) and
    seconds.json (how long building and installing took): made once per session, by the
    first pytest-xdist worker that needs it (the others wait for it, then share it)."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        out = tmp_path_factory.mktemp("distribution")
        (out / "seconds.json").write_text(json.dumps(_build_and_install(out)))
        return out
    out = tmp_path_factory.getbasetemp().parent / "distribution"  # the session's, all workers'
    with FileLock(f"{out}.lock"):
        if not (out / "seconds.json").is_file():
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir()
            (out / "seconds.json").write_text(json.dumps(_build_and_install(out)))
    return out


@pytest.fixture
def dist(installed: Path) -> Path:
    return installed / "dist"


@pytest.fixture
def venv(installed: Path) -> Path:
    return installed / "venv"


def run_in(venv: Path, *argv: str, cwd: Path, **kw: Any) -> subprocess.CompletedProcess[str]:
    env = _clean_env()
    env["PATH"] = f"{venv / 'bin'}:{env['PATH']}"
    return subprocess.run(
        list(argv), cwd=cwd, env=env, capture_output=True, text=True, timeout=300, **kw
    )


def tiny_wheel(out: Path, name: str, package: str, says: str) -> Path:
    """A minimal valid wheel (the binary distribution format, PEP 427) of the distribution
    `name` 1.0: the top-level package `package` (its `__init__` sets `SAYS`) and its
    .dist-info: METADATA, WHEEL and RECORD (each file's sha256 and size; RECORD's own left
    blank)."""
    info = f"{name.replace('-', '_')}-1.0.dist-info"
    files = {
        f"{package}/__init__.py": f"SAYS = {says!r}\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n",
        f"{info}/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: tests/test_distribution.py\n"
            "Root-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = []
    for path, text in files.items():
        data = text.encode()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}\n")
    files[f"{info}/RECORD"] = "".join(record) + f"{info}/RECORD,,\n"
    wheel = out / f"{name.replace('-', '_')}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        for path, text in files.items():
            zf.writestr(path, text)
    return wheel


def test_the_sdist_and_the_wheel_hold_what_a_user_needs_and_nothing_else(dist: Path) -> None:
    (wheel,) = dist.glob("*.whl")
    (sdist,) = dist.glob("*.tar.gz")
    assert wheel.name.startswith("agentos_kit-0.1.0-") and sdist.name == "agentos_kit-0.1.0.tar.gz"
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops == {"agentos", "agentos_kit-0.1.0.dist-info"}  # no other import name
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


def doctor(venv: Path, ws: Path, cwd: Path) -> dict[str, dict[str, object]]:
    """`agentos doctor`, in text and in JSON: it must say the installed wheel is ready to run
    agents; its checks by name."""
    agentos = str(venv / "bin" / "agentos")
    text = run_in(venv, agentos, "--workspace", str(ws), "doctor", cwd=cwd)
    assert text.returncode == 0 and text.stdout.rstrip().endswith("ready to run agents"), (
        text.stdout + text.stderr
    )
    out = run_in(venv, agentos, "--workspace", str(ws), "doctor", "--json", cwd=cwd)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["ready"] is True
    return {c["name"]: c for c in report["checks"]}


def test_the_wheel_installed_as_a_user_makes_a_workspace_says_what_it_runs_and_runs_the_demo(
    installed: Path,
    venv: Path,
    tmp_path: Path,
    tmux_socket: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    seconds = json.loads((installed / "seconds.json").read_text())
    with capsys.disabled():
        print(
            f"\nagentos-kit: sdist and wheel built in {seconds['build']:.1f}s; the wheel and "
            f"its dependencies installed into a fresh venv in {seconds['install']:.1f}s"
        )
    python = str(venv / "bin" / "python")
    # Isolated: AgentOS from this venv; no site-packages but its own, nothing of the checkout.
    where = run_in(
        venv,
        python,
        "-c",
        "import sys, agentos; print(agentos.__file__); print(*sys.path, sep='\\n')",
        cwd=tmp_path,
    )
    assert where.returncode == 0, where.stderr
    module, *path = where.stdout.splitlines()
    assert module.startswith(f"{venv}/lib/"), module
    assert not [p for p in path if str(REPO_ROOT) in p]
    assert [p for p in path if "site-packages" in p and not p.startswith(str(venv))] == []
    assert "include-system-site-packages = false" in (venv / "pyvenv.cfg").read_text()

    agentos = str(venv / "bin" / "agentos")
    assert run_in(venv, agentos, "--version", cwd=tmp_path).stdout == "agentos, version 0.1.0\n"

    made = run_in(venv, agentos, "init", str(tmp_path / "ws"), cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    ws = tmp_path / "ws"
    (ws / "agentos.yaml").write_text("run: {guardian: false}\n")
    # Ready: tmux, git, a sandbox, the workspace's settings. A plain install has no extra:
    # doctor names the runtimes they bring as not ready, each with the extra to install.
    checks = doctor(venv, ws, tmp_path)
    required = {name for name, c in checks.items() if c["required"]}
    assert {"tmux", "git", "sandbox", "settings"} <= required
    assert all(checks[name]["ready"] for name in required)
    assert checks["settings"]["detail"] == str(ws / "agentos.yaml")
    assert checks["shell"]["ready"] and checks["python"]["ready"]
    for runtime in ("ollama", "langchain", "crewai"):
        assert checks[runtime]["ready"] is False
        assert checks[runtime]["fix"] == f"pip install 'agentos-kit[{runtime}]'"

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


def test_a_top_level_guardian_or_mcp_server_from_another_package_leaves_agentos_working(
    venv: Path, tmp_path: Path
) -> None:
    python = str(venv / "bin" / "python")
    others = {"guardian": "guardian", "mcp-server": "mcp_server"}  # PyPI's names, import names
    for package in others.values():
        absent = run_in(venv, python, "-c", f"import {package}", cwd=tmp_path)
        assert f"ModuleNotFoundError: No module named '{package}'" in absent.stderr

    # Stand-ins for PyPI's `guardian` and `mcp-server`, installed beside AgentOS.
    wheels = [
        tiny_wheel(tmp_path, name, pkg, f"not AgentOS: {name}") for name, pkg in others.items()
    ]
    beside = run_in(
        venv,
        *(sys.executable, "-m", "pip", "--python", python, "install", "--quiet"),
        *("--disable-pip-version-check", "--no-index", *map(str, wheels)),
        cwd=tmp_path,
    )
    assert beside.returncode == 0, beside.stderr
    theirs = run_in(
        venv,
        python,
        "-c",
        "import guardian, mcp_server, agentos.guardian, agentos.mcp_server.server as s\n"
        "print(guardian.SAYS, mcp_server.SAYS, sep='\\n')\n"
        "print(agentos.guardian.__file__, s.__file__, sep='\\n')",
        cwd=tmp_path,
    )
    assert theirs.returncode == 0, theirs.stderr
    site = theirs.stdout.splitlines()[2].split("/agentos/")[0]
    assert theirs.stdout.splitlines() == [
        "not AgentOS: guardian",
        "not AgentOS: mcp-server",
        f"{site}/agentos/guardian/__init__.py",
        f"{site}/agentos/mcp_server/server.py",
    ]
    assert site.startswith(str(venv))

    # AgentOS still works, its guardian and its MCP server among it.
    agentos = str(venv / "bin" / "agentos")
    helped = run_in(venv, agentos, "--help", cwd=tmp_path)
    assert helped.returncode == 0 and "guardian" in helped.stdout and "mcp" in helped.stdout
    ws = tmp_path / "ws"
    assert run_in(venv, agentos, "init", str(ws), cwd=tmp_path).returncode == 0
    assert doctor(venv, ws, tmp_path)["settings"]["ready"]
    listed = run_in(venv, agentos, "--workspace", str(ws), "hub", "list", "--json", cwd=tmp_path)
    assert "ruff-fixer" in listed.stdout, listed.stderr
    status = run_in(
        venv, agentos, "--workspace", str(ws), "guardian", "status", "--json", cwd=tmp_path
    )
    assert json.loads(status.stdout)["running"] is False, status.stderr
    # mcp doctor starts `agentos mcp serve` and talks MCP to it (initialize, tools/list).
    mcp = run_in(venv, agentos, "--workspace", str(ws), "mcp", "doctor", "--json", cwd=tmp_path)
    server = {c["name"]: c for c in json.loads(mcp.stdout)["checks"]}["server"]
    assert server["status"] == "ok", mcp.stdout + mcp.stderr
