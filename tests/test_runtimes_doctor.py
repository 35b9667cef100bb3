"""``agentos doctor``: each tool and runtime, whether it is ready, and the fix."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from conftest import CliRunner
from fake_ollama import FakeOllama
from test_runtimes_frameworks import hiding

from agentos.workspace import Workspace

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
        ("sandbox", "tool", True, ""),
        ("keyctl", "tool", True, ""),
        # the bundled ollama/langchain/crewai examples all use this model
        (f"model {MODEL}", "model", True, ""),
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
