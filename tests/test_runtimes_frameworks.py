"""The langchain and crewai runtimes end to end: packages with the frameworks' own fake or
custom models (no network) under real runs; the bundled examples on their default Ollama
model, served by a loopback fake; and a missing extra stopping the run with the fix."""

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
from agentos.workspace.layout import Workspace

pytestmark = [needs_tmux, pytest.mark.usefixtures("tmux_socket")]

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
FIXED = "def greet():\n    return 'hello'\n"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo", {"hello.py": GREET, "README.md": "# greeter\n"})


def receipt_of_kind(ws: Workspace, ids: list[str], kind: str) -> str:
    texts = [read_receipt(ws, rid) for rid in ids]
    return [t for t in texts if f"\nkind: {kind}\n" in t][-1]


def install(
    ws: Workspace,
    tmp_path: Path,
    name: str,
    runtime: str,
    entry: str,
    files: dict[str, str],
    keyword: str,
    **fields: Any,
) -> None:
    src = write_package(
        tmp_path / "src" / name, name=name, runtime=runtime, entry=entry, files=files, **fields
    )
    Hub(ws.hub_dir).install(str(src))
    (ws.cards_dir / f"{name}.yaml").write_text(
        yaml.safe_dump(
            {
                "id": name,
                "agent": name,
                "description": "test card",
                "group": name,
                "triggers": {"keywords": [keyword]},
            }
        )
    )


def run(
    cli: CliRunner, repo: Path, request: str, env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    result = cli("run", request, "--repo", str(repo), "--force", "--json", env=env)
    report = json.loads(result.stdout) if result.stdout.strip() else {}
    return result, report


# -- packages with their frameworks' own fake models --------------------------------------

LANGCHAIN_AGENT = '''
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage


class ScriptedToolModel(GenericFakeChatModel):
    """LangChain's own fake chat model, made to accept tools (it replays its script)."""

    def bind_tools(self, tools, **kwargs):
        return self


def build(tools, request, repo):
    model = ScriptedToolModel(messages=iter([
        AIMessage(content="", tool_calls=[{
            "name": "write_file", "id": "call-1",
            "args": {"path": "NOTES.md", "content": f"request: {request}\\n"}}]),
        AIMessage(content="LANGCHAIN-DONE: the notes are written"),
    ]))
    return create_agent(model, tools, system_prompt=f"You work in {repo}.")
'''

CREWAI_CREW = '''
from crewai import Agent, Crew, Task
from crewai.llms.base_llm import BaseLLM


class ScriptedLLM(BaseLLM):
    """A custom CrewAI LLM: a tool call in CrewAI's ReAct text format, then the answer."""

    replies: list[str] = []
    seen: list[str] = []

    def call(self, messages, tools=None, callbacks=None, available_functions=None,
             from_task=None, from_agent=None, response_model=None):
        self.seen.append(str(messages))
        return self.replies.pop(0)

    def supports_function_calling(self):
        return False


def build(inputs, tools):
    import os
    print("crewai env:", *(os.environ.get(name) for name in (
        "CREWAI_DISABLE_TELEMETRY", "OTEL_SDK_DISABLED", "CREWAI_TRACING_ENABLED")))
    print("crewai storage:", os.environ.get("CREWAI_STORAGE_DIR"))
    llm = ScriptedLLM(model="scripted", replies=[
        "Thought: I will write the report.\\nAction: write_file\\n"
        'Action Input: {"path": "REPORT.md", "content": "report for: '
        + inputs["request"] + '"}',
        "Thought: the report is written.\\nFinal Answer: CREWAI-DONE: report written",
    ])
    writer = Agent(role="writer", goal="Write the report", backstory="A careful writer.",
                   llm=llm, tools=tools)
    task = Task(description="Request: {request}", expected_output="a report", agent=writer)
    return Crew(agents=[writer], tasks=[task])
'''


def test_a_langchain_agent_on_a_fake_chat_model_changes_the_repo_and_reports_in_the_receipt(
    cli: CliRunner, ws: Workspace, tmp_path: Path, repo: Path, tmux_socket: str
) -> None:
    install(
        ws,
        tmp_path,
        "lc-notes",
        "langchain",
        "notes_agent:build",
        {"notes_agent.py": LANGCHAIN_AGENT},
        "notes",
        checks=[
            {
                "name": "notes written",
                "file_contains": {
                    "path": "NOTES.md",
                    "pattern": "^request: write the notes please$",
                },
            }
        ],
    )

    # No OLLAMA_HOST and no model: nothing may reach for a network.
    result, report = run(cli, repo, "write the notes please")

    assert result.returncode == 0, result.stdout + result.stderr
    assert report["status"] == "succeeded"
    assert (repo / "NOTES.md").read_text() == "request: write the notes please\n"
    run_receipt = receipt_of_kind(ws, report["receipts"], "run")
    assert "[tool] write_file(" in run_receipt
    assert "[tool result] wrote 32 characters to NOTES.md" in run_receipt
    assert "[agentos] langchain result:\n" in report["agents"][0]["output_tail"]
    assert "LANGCHAIN-DONE: the notes are written" in run_receipt
    assert tmux_sessions(tmux_socket) == []


def test_a_crewai_crew_on_a_custom_llm_changes_the_repo_and_reports_in_the_receipt(
    cli: CliRunner, ws: Workspace, tmp_path: Path, repo: Path, tmux_socket: str
) -> None:
    install(
        ws,
        tmp_path,
        "crew-report",
        "crewai",
        "report_crew:build",
        {"report_crew.py": CREWAI_CREW},
        "report",
        checks=[
            {
                "name": "report written",
                "file_contains": {"path": "REPORT.md", "pattern": "^report for: write the report$"},
            }
        ],
    )

    result, report = run(cli, repo, "write the report")

    assert result.returncode == 0, result.stdout + result.stderr
    assert report["status"] == "succeeded"
    assert (repo / "REPORT.md").read_text() == "report for: write the report"
    run_receipt = receipt_of_kind(ws, report["receipts"], "run")
    assert "[tool] write_file(" in run_receipt
    assert "CREWAI-DONE: report written" in run_receipt
    tail = report["agents"][0]["output_tail"]
    assert "[agentos] crewai result:\n" in tail
    # Telemetry and tracing off (offline, crewai would wait ~15 s on them)...
    assert "crewai env: true true false\n" in tail
    # ...and its databases kept with the run, outside the worktree, removed at teardown.
    storage = ws.state_dir / "runs" / report["run"] / "crew-report" / "io" / "crewai"
    assert f"crewai storage: {storage}\n" in tail
    assert not storage.exists()
    # crewai kept its databases with the run, not in the worktree (nothing else merged).
    assert sorted(git(repo, "ls-files").split()) == ["README.md", "REPORT.md", "hello.py"]


# -- the bundled examples, on their default Ollama model ---------------------------------


def _greeting_gate(ws: Workspace) -> None:
    ws.settings_file.write_text(yaml.safe_dump(GREETING_GATE))


WRITE_FIX = {"name": "write_file", "arguments": {"path": "hello.py", "content": FIXED}}


def test_the_bundled_langchain_coder_uses_its_ollama_model_through_langchain_ollama(
    cli: CliRunner, ws: Workspace, repo: Path
) -> None:
    _greeting_gate(ws)
    script: list[dict[str, Any]] = [
        {"content": "", "tool_calls": [{"name": "read_file", "arguments": {"path": "hello.py"}}]},
        {"content": "", "tool_calls": [WRITE_FIX]},
        {"content": "Fixed greet(). LC-OLLAMA-DONE"},
    ]
    with FakeOllama(script, models=(MODEL,)) as fake:
        result, report = run(
            cli,
            repo,
            "fix the greeting bug in hello.py with langchain",
            env={"OLLAMA_HOST": fake.host},
        )
        chats = fake.chat_requests()

    assert result.returncode == 0, result.stdout + result.stderr
    assert [s["agent"] for s in report["decision"]["selected"]] == ["langchain-coder"]
    assert (repo / "hello.py").read_text() == FIXED
    assert [(c["model"], c["options"]["num_ctx"]) for c in chats] == [(MODEL, 16384)] * 3
    assert {t["function"]["name"] for t in chats[0]["tools"]} == {
        "read_file",
        "write_file",
        "list_files",
        "run_command",
    }
    assert "fix the greeting bug in hello.py with langchain" in json.dumps(chats[0]["messages"])
    tool_results = [m["content"] for m in chats[2]["messages"] if m["role"] == "tool"]
    assert tool_results == [GREET, "wrote 32 characters to hello.py"]
    assert "LC-OLLAMA-DONE" in receipt_of_kind(ws, report["receipts"], "run")


@pytest.mark.slow
def test_the_bundled_crewai_crew_uses_its_ollama_model_for_both_agents(
    cli: CliRunner, ws: Workspace, repo: Path
) -> None:
    _greeting_gate(ws)
    script: list[dict[str, Any]] = [
        {"content": "", "tool_calls": [WRITE_FIX]},  # engineer
        {"content": "Changed hello.py so greet() returns 'hello'."},
        {"content": "Reviewed hello.py: correct. CREW-OLLAMA-DONE"},
    ]  # reviewer
    with FakeOllama(script, models=(MODEL,)) as fake:
        result, report = run(
            cli,
            repo,
            "fix the greeting bug in hello.py with crewai",
            env={"OLLAMA_HOST": fake.host},
        )
        requests = list(fake.requests)

    assert result.returncode == 0, result.stdout + result.stderr
    assert [s["agent"] for s in report["decision"]["selected"]] == ["crewai-crew"]
    assert (repo / "hello.py").read_text() == FIXED
    assert [r["path"] for r in requests] == ["/v1/chat/completions"] * 3
    assert {r["body"]["model"] for r in requests} == {MODEL}
    assert "fix the greeting bug in hello.py with crewai" in json.dumps(requests[0]["body"])
    assert "CREW-OLLAMA-DONE" in receipt_of_kind(ws, report["receipts"], "run")


# -- a missing extra -------------------------------------------------------------------------

HIDE = '''
import sys

HIDDEN = {hidden!r}


class HideExtras:
    """Make these modules unfindable, exactly as if they were not installed."""

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name.split(".")[0] in HIDDEN:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None


sys.meta_path.insert(0, HideExtras)
'''


def hiding(tmp_path: Path, *modules: str) -> dict[str, str]:
    """An environment whose Python cannot import ``modules`` (a sitecustomize on PYTHONPATH)."""
    site = tmp_path / "hide-extras"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(HIDE.format(hidden=set(modules)))
    return {"PYTHONPATH": str(site)}


@pytest.mark.process  # its PYTHONPATH hides the extra when Python starts
@pytest.mark.parametrize(
    ("runtime", "entry", "hidden", "message"),
    [
        (
            "langchain",
            "agent:build",
            ("langchain_core",),
            "the langchain runtime needs langchain-core, which is not installed: "
            "run `pip install 'agentos-kit[langchain]'`",
        ),
        (
            "langchain",
            "agent:build",
            ("langchain_ollama",),
            "the langchain runtime needs langchain-ollama, which is not installed: "
            "run `pip install 'agentos-kit[langchain]'`",
        ),
        (
            "crewai",
            "agent:build",
            ("crewai",),
            "the crewai runtime needs crewai, which is not installed: "
            "run `pip install 'agentos-kit[crewai]'`",
        ),
        (
            "ollama",
            "agent.py",
            ("ollama",),
            "the ollama runtime needs ollama, which is not installed: "
            "run `pip install 'agentos-kit[ollama]'`",
        ),
    ],
    ids=["langchain-core", "langchain-ollama", "crewai", "ollama"],
)
def test_a_missing_extra_stops_the_run_before_anything_starts_naming_the_pip_command(
    cli: CliRunner,
    ws: Workspace,
    tmp_path: Path,
    repo: Path,
    tmux_socket: str,
    runtime: str,
    entry: str,
    hidden: tuple[str, ...],
    message: str,
) -> None:
    install(
        ws,
        tmp_path,
        "needs-extra",
        runtime,
        entry,
        {"agent.py": "def build(): pass\n"},
        "extra",
        model=MODEL,
    )
    env = hiding(tmp_path, *hidden)
    # The trick is honest: this Python really cannot import the module.
    probe = subprocess.run(
        [sys.executable, "-c", f"import {hidden[0]}"],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
    )
    assert f"ModuleNotFoundError: No module named '{hidden[0]}'" in probe.stderr

    result = cli("run", "extra", "--repo", str(repo), "--force", "--json", env=env)

    assert result.returncode == 2
    assert result.stderr == f"error: runtime: {message}\n"
    assert result.stdout == ""
    assert git(repo, "branch", "--format=%(refname:short)").split() == ["main"]
    assert git(repo, "worktree", "list").count("\n") == 0
    assert tmux_sessions(tmux_socket) == []


# -- the in-pane program on its own ------------------------------------------------------

PARROT_CHAIN = """
from langchain_core.language_models.fake_chat_models import ParrotFakeChatModel
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.output_parsers import StrOutputParser

chain = (ChatPromptTemplate.from_messages([("human", "Do {request} in {repo}.")])
         | ParrotFakeChatModel() | StrOutputParser())
"""


def _entry(
    tmp_path: Path, framework: str, entry: str, files: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    package = write_package(tmp_path / "pkg", files=files)
    work = make_repo(tmp_path / "wt")
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "agentos.runtimes.framework_entry",
            framework,
            str(package),
            entry,
            str(tmp_path / "state"),
        ],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=120,
        env={
            "PATH": os.environ["PATH"],
            "HOME": os.environ.get("HOME", "/tmp"),
            "AGENTOS_REQUEST": "the thing",
        },
    )


def test_a_runnable_chain_is_invoked_with_the_request_and_the_repository_path(
    tmp_path: Path,
) -> None:
    proc = _entry(tmp_path, "langchain", "chain_mod:chain", {"chain_mod.py": PARROT_CHAIN})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout == (
        "[agentos] langchain entry chain_mod:chain\n"
        "[agentos] langchain result:\n"
        f"Do the thing in {(tmp_path / 'wt').resolve()}.\n"
    )


def test_a_factory_asking_for_something_unknown_is_named_in_the_pane(tmp_path: Path) -> None:
    proc = _entry(
        tmp_path, "langchain", "f:build", {"f.py": "def build(request, database):\n    pass\n"}
    )
    assert proc.returncode == 2
    assert proc.stdout.splitlines()[-1] == (
        "[agentos] f:build: the entry asks for 'database'; it can ask for request, context, "
        "feedback, repo, worktree, inputs, model, llm, tools"
    )


def test_a_crewai_entry_that_is_not_a_crew_is_named_in_the_pane(tmp_path: Path) -> None:
    proc = _entry(tmp_path, "crewai", "f:build", {"f.py": "def build(inputs):\n    return 42\n"})
    assert proc.returncode == 2
    assert proc.stdout.splitlines()[-1] == "[agentos] f:build: the entry gave int, not a Crew"


@pytest.mark.parametrize(("word", "runtime"), [("langchain", "langchain"), ("crewai", "crewai")])
def test_a_bundled_example_without_its_ollama_server_stops_before_anything_starts(
    cli: CliRunner, repo: Path, tmp_path: Path, tmux_socket: str, word: str, runtime: str
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        host = f"http://127.0.0.1:{s.getsockname()[1]}"
    result = cli(
        "run",
        f"fix the greeting bug in hello.py with {word}",
        "--repo",
        str(repo),
        "--force",
        "--json",
        env={"OLLAMA_HOST": host},
    )
    assert result.returncode == 2
    assert result.stderr == (
        f"error: runtime: the {runtime} runtime needs an Ollama server, "
        f"and none answers at {host}: start one with `ollama serve`\n"
    )
    assert git(repo, "branch", "--format=%(refname:short)").split() == ["main"]
    assert tmux_sessions(tmux_socket) == []
