"""``agentos doctor``: each tool and runtime, whether it is ready, and the fix."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest
from conftest import CliRunner
from fake_ollama import FakeOllama
from test_runtimes_frameworks import hiding

from agentos.workspace.layout import Workspace

MODEL = "qwen2.5-coder:7b"


def no_clis_path(tmp_path: Path) -> str:
    """A PATH with tmux, git, bash and bwrap but none of the agent CLIs."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for tool in ("tmux", "git", "bash", "bwrap"):
        for base in ("/usr/bin", "/bin", "/usr/local/bin"):
            if Path(base, tool).exists():
                (bin_dir / tool).symlink_to(Path(base, tool))
                break
    return f"{bin_dir}:{Path(sys.executable).parent}"


def summary(doc: dict[str, Any]) -> list[tuple[object, ...]]:
    return [(c["name"], c["kind"], c["ready"], c["fix"]) for c in doc["checks"]]


@pytest.mark.process  # its PYTHONPATH hides the extras when Python starts
def test_doctor_lists_every_runtime_with_its_readiness_and_fix(
    cli: CliRunner, tmp_path: Path
) -> None:
    env = {"PATH": no_clis_path(tmp_path), **hiding(tmp_path, "crewai")}
    with FakeOllama(models=(MODEL, "llama3.2:latest")) as fake:
        result = cli("doctor", "--json", env={**env, "OLLAMA_HOST": fake.host})
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["ready"] is True
    assert summary(doc) == [
        ("tmux", "tool", True, ""),
        ("git", "tool", True, ""),
        ("ollama server", "server", True, ""),
        ("shell", "runtime", True, ""),
        ("python", "runtime", True, ""),
        ("claude-code", "runtime", False, "npm install -g @anthropic-ai/claude-code"),
        ("gemini-cli", "runtime", False, "npm install -g @google/gemini-cli"),
        ("codex", "runtime", False, "npm install -g @openai/codex"),
        ("ollama", "runtime", True, ""),
        ("langchain", "runtime", True, ""),
        ("crewai", "runtime", False, "pip install 'agentos-kit[crewai]'"),
        ("settings", "workspace", True, ""),
        ("state", "state", True, ""),
        ("sandbox", "tool", True, ""),
        ("keyctl", "tool", True, ""),
        # the bundled ollama/langchain/crewai examples all use this model
        (f"model {MODEL}", "model", True, ""),
        # ruff-fixer's check runs ruff: found beside AgentOS's interpreter, as a run finds it
        ("program ruff", "program", True, ""),
    ]
    checks = {c["name"]: c for c in doc["checks"]}
    assert checks["ollama server"]["detail"] == f"{fake.host}: {MODEL}, llama3.2:latest"
    assert checks["crewai"]["detail"] == "not installed: crewai"
    assert checks[f"model {MODEL}"]["detail"] == (
        "pulled; used by crewai-crew, langchain-coder, ollama-coder"
    )


def test_doctor_fails_on_an_invalid_agentos_yaml_as_every_command_does(
    cli: CliRunner, ws: Workspace
) -> None:
    ws.settings_file.write_text("run: {retries: two}\n")

    result = cli("doctor")

    assert result.returncode == 1
    assert f"settings: {ws.settings_file}: run.retries: Input should be a valid integer" in (
        result.stdout.replace("\n", " ")
    )
    assert "not ready: fix the workspace's agentos.yaml" in result.stdout


def test_doctor_names_ollama_serve_when_the_server_is_down(cli: CliRunner, tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        host = f"http://127.0.0.1:{s.getsockname()[1]}"
    result = cli("doctor", "--json", env={"OLLAMA_HOST": host})
    assert result.returncode == 0
    checks = {c["name"]: c for c in json.loads(result.stdout)["checks"]}
    assert (checks["ollama server"]["ready"], checks["ollama server"]["detail"]) == (
        False,
        f"no answer at {host}",
    )
    assert checks["ollama server"]["fix"].startswith("ollama serve")
    assert (checks["ollama"]["ready"], checks["ollama"]["fix"]) == (False, "ollama serve")
    # langchain and crewai packages that bring their own model still run.
    assert (checks["langchain"]["ready"], checks["langchain"]["fix"]) == (True, "ollama serve")
    assert not [name for name in checks if name.startswith("model ")]


def test_doctor_fails_when_tmux_and_git_are_missing(cli: CliRunner, tmp_path: Path) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    result = cli("doctor", env={"PATH": str(empty)})
    assert result.returncode == 1
    assert "not ready: install what the required tools' fixes name" in result.stdout
    doc = json.loads(cli("doctor", "--json", env={"PATH": str(empty)}).stdout)
    assert doc["ready"] is False
    assert [(c["name"], c["ready"], c["fix"]) for c in doc["checks"][:2]] == [
        ("tmux", False, "apt-get install tmux  (macOS: brew install tmux)"),
        ("git", False, "apt-get install git  (macOS: brew install git)"),
    ]


def test_doctor_runs_from_any_directory(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "agentos", "doctor", "--json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["checks"][0]["name"] == "tmux"


def python_without_ruff(tmp_path: Path) -> Path:
    """An interpreter with AgentOS and its dependencies but no ruff beside it, as in a
    virtual environment AgentOS was installed into without ruff (a run's checks look for
    their programs on PATH and beside AgentOS's interpreter): a venv that shares this
    one's packages."""
    venv = tmp_path / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120
    )
    (site,) = venv.glob("lib/python*/site-packages")
    shared = sysconfig.get_paths()["purelib"]
    (site / "shared.pth").write_text(f"import site; site.addsitedir({shared!r})\n")
    assert not (venv / "bin" / "ruff").exists()
    return venv / "bin" / "python"


def test_doctor_names_a_program_a_check_runs_that_is_missing_and_is_not_ready(
    ws: Workspace, tmp_path: Path
) -> None:
    """The bundled ruff-fixer's check runs `ruff`: with no ruff on PATH or beside AgentOS,
    a run of it stops before any agent starts, so doctor names ruff with its fix and does
    not say ready (exit 1), in text and in JSON; with ruff on PATH it is ready again. A
    program the workspace's own checks run is needed by every agent."""
    python = python_without_ruff(tmp_path)
    path = f"{no_clis_path(tmp_path).split(':')[0]}:{python.parent}"

    def doctor(*args: str, path: str = path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(python), "-m", "agentos", "--workspace", str(ws.root), "doctor", *args],
            capture_output=True,
            text=True,
            env={**os.environ, "PATH": path},
            timeout=120,
        )

    text = doctor()
    assert text.returncode == 1, text.stdout + text.stderr
    lines = text.stdout.splitlines()
    missing = (
        "`ruff` is not on PATH, and check 'lint clean' of ruff-fixer@1.0.0 runs it: a run "
        "with that check stops before any agent starts"
    )
    fix = "pip install ruff  (or remove the agent: agentos hub remove ruff-fixer@1.0.0)"
    assert f"program: {missing}; fix: {fix}" in lines
    assert "ready to run agents" not in text.stdout
    assert lines[-1] == "not ready: install what the required tools' fixes name"

    out = doctor("--json")
    assert out.returncode == 1, out.stderr
    doc = json.loads(out.stdout)
    checks = {c["name"]: c for c in doc["checks"]}
    assert doc["ready"] is False
    assert checks["program ruff"] == {
        "name": "program ruff",
        "kind": "program",
        "ready": False,
        "detail": missing,
        "fix": fix,
        "required": True,
    }
    agents = {a["name"]: a for a in doc["agents"]}
    assert agents["ruff-fixer"] == {
        "name": "ruff-fixer",
        "version": "1.0.0",
        "ready": False,
        "needs": ["program ruff"],
    }
    assert agents["test-runner"]["ready"] is True

    ruff_dir = tmp_path / "ruff-bin"
    ruff_dir.mkdir()
    (ruff_dir / "ruff").symlink_to(Path(sys.executable).parent / "ruff")
    ready = doctor(path=f"{path}:{ruff_dir}")
    assert ready.returncode == 0, ready.stdout + ready.stderr
    assert ready.stdout.splitlines()[-1] == "ready to run agents"

    ws.settings_file.write_text(
        "run: {guardian: false}\nchecks: [{name: house style, run: no-such-linter --all}]\n"
    )
    doc = json.loads(doctor("--json", path=f"{path}:{ruff_dir}").stdout)
    checks = {c["name"]: c for c in doc["checks"]}
    assert (doc["ready"], checks["program no-such-linter"]["fix"]) == (
        False,
        "install no-such-linter on PATH  (or change the check in agentos.yaml)",
    )
    assert {a["name"] for a in doc["agents"] if "program no-such-linter" in a["needs"]} == {
        a["name"] for a in doc["agents"]
    }
