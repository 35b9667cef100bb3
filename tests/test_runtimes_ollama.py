"""The ollama runtime: a scripted Ollama server drives the real ``ollama`` client inside a
real run (tmux, git worktree, gate, merge); preflight names the fix before anything starts;
the agent's tools stay inside its worktree."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import CliRunner, git, make_repo, needs_tmux, tmux_sessions, write_package
from fake_ollama import FakeOllama

from agentos.hub.store import Hub
from agentos.receipts import read_receipt
from agentos.runtimes.frameworks import parse_host
from agentos.runtimes.worktree_tools import WorktreeTools
from agentos.workspace.layout import Workspace

pytestmark = pytest.mark.usefixtures("tmux_socket")

MODEL = "qwen2.5-coder:7b"
GREET = "def greet():\n    return 'hi'\n"
# Workspace settings: the gate checks the greeting; no retries; no background guardian
# (it would outlive the test).
GREETING_GATE = {
    "run": {"retries": 0, "guardian": False},
    "checks": [
        {
            "name": "greet says hello",
            "run": "python -c \"import hello; assert hello.greet() == 'hello'\"",
        }
    ],
}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo", {"hello.py": GREET, "README.md": "# greeter\n"})


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def receipt_of_kind(ws: Workspace, ids: list[str], kind: str) -> str:
    """The text of the run's receipt of ``kind`` (the last one, when there are several)."""
    texts = [read_receipt(ws, rid) for rid in ids]
    return [t for t in texts if f"\nkind: {kind}\n" in t][-1]


def install_ollama_agent(ws: Workspace, tmp_path: Path, **fields: object) -> None:
    manifest: dict[str, Any] = {
        "runtime": "ollama",
        "entry": "prompt.md",
        "model": MODEL,
        "env": ["OLLAMA_HOST"],
        "sandbox": {"network": True},  # the (fake) Ollama server is on the host
    }
    manifest.update(fields)
    src = write_package(
        tmp_path / "src" / "local-coder",
        name="local-coder",
        files={"prompt.md": "You fix small things.\n"},
        **manifest,
    )
    Hub(ws.hub_dir).install(str(src))
    (ws.cards_dir / "local-coder.yaml").write_text(
        yaml.safe_dump(
            {
                "id": "local-coder",
                "agent": "local-coder",
                "description": "test card",
                "group": "local",
                "triggers": {"keywords": ["greeter"]},
            }
        )
    )


SCRIPT: list[dict[str, Any]] = [
    {
        "content": "Let me look at the code.",
        "tool_calls": [{"name": "list_files", "arguments": {}}],
    },
    {"content": "", "tool_calls": [{"name": "read_file", "arguments": {"path": "hello.py"}}]},
    {
        "content": "",
        "tool_calls": [
            {
                "name": "write_file",
                "arguments": {"path": "hello.py", "content": "def greet():\n    return 'hello'\n"},
            },
            {"name": "read_file", "arguments": {"path": "../outside.txt"}},
        ],
    },
    {
        "content": "",
        "tool_calls": [
            {
                "name": "run_command",
                "arguments": {"command": "python -c 'import hello; print(hello.greet())'"},
            }
        ],
    },
    {"content": "greet() now returns 'hello'. DONE-BY-OLLAMA"},
]


@needs_tmux
def test_a_scripted_ollama_server_drives_the_bundled_agent_to_a_merged_change(
    cli: CliRunner, ws: Workspace, repo: Path, tmux_socket: str
) -> None:
    ws.settings_file.write_text(yaml.safe_dump(GREETING_GATE))
    head = git(repo, "rev-parse", "HEAD")

    with FakeOllama(list(SCRIPT), models=(MODEL,)) as fake:
        result = cli(
            "run",
            "fix the greeting bug in hello.py with ollama",
            "--repo",
            str(repo),
            "--force",
            "--json",
            env={"OLLAMA_HOST": fake.host},
        )
        chats = fake.chat_requests()

    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["status"] == "succeeded"
    assert [(s["agent"], s["card"]) for s in report["decision"]["selected"]] == [
        ("ollama-coder", "ollama")
    ]
    # The agent reported the tokens the server counted, every turn's, to the run.
    assert fake.tokens > 100
    assert report["agents"][0]["usage"] == {"tokens": fake.tokens}
    assert f"\nusage:\n  tokens: {fake.tokens}\n" in receipt_of_kind(ws, report["receipts"], "gate")
    # The change is merged into the target branch, on top of where it was.
    assert (repo / "hello.py").read_text() == "def greet():\n    return 'hello'\n"
    assert git(repo, "rev-parse", "HEAD") != head
    git(repo, "merge-base", "--is-ancestor", head, "HEAD")
    assert git(repo, "status", "--porcelain") == ""
    # The real client sent the package's model, prompt, request and tools, then each tool's
    # result back, in order; the escape attempt came back as an error.
    assert [(c["model"], c["options"]["num_ctx"]) for c in chats] == [(MODEL, 16384)] * 5
    first = chats[0]["messages"]
    assert first[0]["role"] == "system" and "careful software engineer" in first[0]["content"]
    assert "fix the greeting bug in hello.py with ollama" in first[1]["content"]
    assert "Context from the knowledge store" in first[1]["content"]
    assert {t["function"]["name"] for t in chats[0]["tools"]} == {
        "read_file",
        "write_file",
        "list_files",
        "run_command",
    }
    tool_replies = [m for m in chats[-1]["messages"] if m["role"] == "tool"]
    assert [m["tool_name"] for m in tool_replies] == [
        "list_files",
        "read_file",
        "write_file",
        "read_file",
        "run_command",
    ]
    assert "hello.py" in tool_replies[0]["content"].splitlines()
    assert tool_replies[1]["content"] == GREET
    assert tool_replies[3]["content"] == "error: '../outside.txt' is outside the worktree"
    assert tool_replies[4]["content"] == "exit code: 0\nhello\n"
    # The gate passed, and the pane's streamed output is in the run receipt.
    assert "\naccepted: true\n" in receipt_of_kind(ws, report["receipts"], "gate")
    tail = receipt_of_kind(ws, report["receipts"], "run")
    assert "Let me look at the code." in tail
    assert "[tool] write_file(path='hello.py'" in tail
    assert "DONE-BY-OLLAMA" in tail
    assert tmux_sessions(tmux_socket) == []


@needs_tmux
def test_an_ollama_server_error_fails_the_agent_and_nothing_is_merged(
    cli: CliRunner, ws: Workspace, tmp_path: Path, repo: Path, tmux_socket: str
) -> None:
    install_ollama_agent(ws, tmp_path)
    ws.settings_file.write_text("run: {retries: 0, guardian: false}\n")
    head = git(repo, "rev-parse", "HEAD")

    with FakeOllama([], models=(MODEL,)) as fake:  # no scripted reply: every chat is a 500
        result = cli(
            "run",
            "greeter",
            "--repo",
            str(repo),
            "--force",
            "--json",
            env={"OLLAMA_HOST": fake.host},
        )

    assert result.returncode == 1
    report = json.loads(result.stdout)
    assert report["status"] == "failed"
    assert report["agents"][0]["exit_code"] == 1
    assert (
        "the Ollama server refused: the fake server has no scripted reply left"
        in (report["agents"][0]["output_tail"])
    )
    assert git(repo, "rev-parse", "HEAD") == head


def _branches(repo: Path) -> list[str]:
    return git(repo, "branch", "--format=%(refname:short)").split()


@needs_tmux
def test_an_unreachable_ollama_server_stops_the_run_before_anything_starts(
    cli: CliRunner, ws: Workspace, tmp_path: Path, repo: Path, tmux_socket: str
) -> None:
    install_ollama_agent(ws, tmp_path)
    host = f"http://127.0.0.1:{closed_port()}"

    result = cli(
        "run", "greeter", "--repo", str(repo), "--force", "--json", env={"OLLAMA_HOST": host}
    )

    assert result.returncode == 2
    assert result.stderr == (
        f"error: runtime: the ollama runtime needs an Ollama server, and none answers at "
        f"{host}: start one with `ollama serve`\n"
    )
    assert _branches(repo) == ["main"]
    assert git(repo, "worktree", "list").count("\n") == 0
    assert tmux_sessions(tmux_socket) == []


def test_a_model_the_server_has_not_pulled_is_named_with_the_pull_command(
    cli: CliRunner, ws: Workspace, tmp_path: Path, repo: Path
) -> None:
    install_ollama_agent(ws, tmp_path, model="llama3.2")
    with FakeOllama([], models=(MODEL,)) as fake:
        result = cli(
            "run",
            "greeter",
            "--repo",
            str(repo),
            "--force",
            "--json",
            env={"OLLAMA_HOST": fake.host},
        )
    assert result.returncode == 2
    assert result.stderr == (
        f"error: model: the Ollama server at {fake.host} does not have "
        "the model 'llama3.2': run `ollama pull llama3.2`\n"
    )


@needs_tmux
def test_a_model_named_without_a_tag_matches_the_latest_tag(
    cli: CliRunner, ws: Workspace, tmp_path: Path, repo: Path, tmux_socket: str
) -> None:
    install_ollama_agent(ws, tmp_path, model="llama3.2")
    ws.settings_file.write_text("run: {retries: 0, guardian: false}\n")
    with FakeOllama([{"content": "nothing to do"}], models=("llama3.2:latest",)) as fake:
        result = cli(
            "run",
            "greeter",
            "--repo",
            str(repo),
            "--force",
            "--json",
            env={"OLLAMA_HOST": fake.host},
        )
    assert json.loads(result.stdout)["agents"][0]["exit_code"] == 0, result.stderr


def test_ollama_host_set_but_not_listed_in_env_is_explained(
    cli: CliRunner, ws: Workspace, tmp_path: Path, repo: Path
) -> None:
    if _default_ollama_answers():
        pytest.skip("an Ollama server is running on the default address")
    install_ollama_agent(ws, tmp_path, env=[])
    with FakeOllama([], models=(MODEL,)) as fake:
        # The agent would not receive OLLAMA_HOST, so the default address is what counts.
        result = cli(
            "run",
            "greeter",
            "--repo",
            str(repo),
            "--force",
            "--json",
            env={"OLLAMA_HOST": fake.host},
        )
    assert result.returncode == 2
    assert (
        "none answers at http://127.0.0.1:11434 (OLLAMA_HOST is set here, but the "
        "package does not list it in `env`, so its agent uses the default address)" in result.stderr
    )


def _default_ollama_answers() -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", 11434)) == 0


def test_an_ollama_package_without_a_model_is_bad_input_naming_the_field(
    cli: CliRunner, ws: Workspace, tmp_path: Path, repo: Path
) -> None:
    install_ollama_agent(ws, tmp_path, model=None)
    result = cli("run", "greeter", "--repo", str(repo), "--force", "--json")
    assert result.returncode == 2
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    assert result.stderr.rstrip().endswith(
        "agent.yaml: model: the ollama runtime needs a model (e.g. qwen2.5-coder:7b)"
    )


def test_the_agent_program_streams_text_and_tool_results_to_stdout(tmp_path: Path) -> None:
    work = make_repo(tmp_path / "wt", {"a.txt": "one\n"})
    prompt = tmp_path / "prompt.md"
    prompt.write_text("Be brief.\n")
    script: list[dict[str, Any]] = [
        {
            "content": "Writing b.txt now.",
            "tool_calls": [
                {"name": "write_file", "arguments": {"path": "sub/b.txt", "content": "two\n"}}
            ],
        },
        {"content": "", "tool_calls": [{"name": "no_such_tool", "arguments": {}}]},
        {"content": "finished"},
    ]
    with FakeOllama(script) as fake:
        proc = subprocess.run(
            [sys.executable, "-m", "agentos.runtimes.ollama_agent", str(prompt), MODEL],
            cwd=work,
            capture_output=True,
            text=True,
            timeout=60,
            env={
                "PATH": os.environ["PATH"],
                "OLLAMA_HOST": fake.host,
                "AGENTOS_REQUEST": "add b.txt",
                "AGENTOS_HEARTBEAT_FILE": str(tmp_path / "heartbeat"),
            },
        )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout == (
        f"[agentos] model {MODEL} on the Ollama server at {fake.host}; up to 40 turns\n"
        "Writing b.txt now.\n"
        "[tool] write_file(path='sub/b.txt', content='two\\n') -> wrote 4 characters to "
        "sub/b.txt\n"
        "[tool] no_such_tool() -> error: there is no tool 'no_such_tool'; use one of "
        "read_file, write_file, list_files, run_command\n"
        "finished\n"
        "[agentos] the model finished after 3 turn(s)\n"
    )
    assert (work / "sub" / "b.txt").read_text() == "two\n"
    assert (tmp_path / "heartbeat").exists()  # the guardian sees it working


# -- the tools and the host, without a run -------------------------------------------------


@pytest.mark.parametrize(
    ("path", "error"),
    [
        ("../x.txt", "'../x.txt' is outside the worktree"),
        ("/etc/passwd", "'/etc/passwd' is outside the worktree"),
        ("link/secret.txt", "'link/secret.txt' is outside the worktree"),
        (".git/config", "'.git/config' is inside .git, which tools may not touch"),
        ("", "a path is required"),
    ],
    ids=["dotdot", "absolute", "symlink-out", "git-dir", "empty"],
)
def test_tools_refuse_paths_outside_the_worktree(tmp_path: Path, path: str, error: str) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret\n")
    work = make_repo(tmp_path / "wt")
    (work / "link").symlink_to(outside)
    tools = WorktreeTools(work)
    for name, args in (
        ("read_file", {"path": path}),
        ("write_file", {"path": path, "content": "x"}),
    ):
        assert tools.call(name, args) == f"error: {error}"
    assert (outside / "secret.txt").read_text() == "secret\n"


def test_tools_list_read_write_and_run_inside_the_worktree(tmp_path: Path) -> None:
    work = make_repo(tmp_path / "wt", {"src/a.py": "A = 1\n"})
    tools = WorktreeTools(work)
    assert tools.call("write_file", {"path": "src/b.py", "content": "B = 2\n"}) == (
        "wrote 6 characters to src/b.py"
    )
    assert tools.call("list_files", {}) == "src/a.py\nsrc/b.py"
    assert tools.call("list_files", {"path": "src"}) == "src/a.py\nsrc/b.py"
    assert tools.call("read_file", {"path": "src/b.py"}) == "B = 2\n"
    assert tools.call("run_command", {"command": "pwd; exit 3"}) == (
        f"exit code: 3\n{work.resolve()}\n"
    )
    assert tools.call("read_file", {"path": "src"}) == "error: 'src' is not a file"
    assert tools.call("write_file", {"path": "c.txt"}).startswith(
        "error: bad arguments for write_file"
    )


@pytest.mark.parametrize(
    ("value", "host"),
    [
        (None, "http://127.0.0.1:11434"),
        ("", "http://127.0.0.1:11434"),
        ("1.2.3.4", "http://1.2.3.4:11434"),
        (":56789", "http://127.0.0.1:56789"),
        ("example.com:56789/path/", "http://example.com:56789/path"),
        ("http://1.2.3.4", "http://1.2.3.4:80"),
        ("https://example.com", "https://example.com:443"),
    ],
    ids=["unset", "empty", "bare", "port-only", "path", "http-url", "https-url"],
)
def test_ollama_host_is_read_the_way_the_ollama_client_reads_it(
    value: str | None, host: str
) -> None:
    assert parse_host(value) == host
