"""The real Claude Code, Gemini CLI and Codex as agents of a run, end to end, against a
scripted model API on loopback (tests/scripted_model.py).

Everything is real but the model: AgentOS routes, makes the worktree, starts the CLI from
npm in its tmux pane and sandbox; the CLI sends its requests to the scripted server, which
answers with the tool calls of the test's script; the CLI edits files with its own tools;
the gate judges; AgentOS retries with the gate's feedback and merges. The server records
every request, so the tests assert what the CLI was told.

The CLIs come from npm: `scripts/install-mcp-clients` puts them in $AGENTOS_NPM_PREFIX
(default ~/.cache/agentos/npm); CI runs it first.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import (
    CliRunner,
    branches,
    git,
    install_variant,
    make_repo,
    needs_tmux,
    tmux_sessions,
    worktrees,
)
from scripted_model import KEY, Call, ScriptedModel
from test_mcp_clients import needs, npm_bin_dir

from agentos.receipts import list_receipts, load_receipt, verify_chain
from agentos.workspace.layout import Workspace

pytestmark = [needs_tmux, pytest.mark.usefixtures("tmux_socket")]

GREETING = "def greet(name):\n    return 'Hello!'\n"
TEST = (
    "from src.greeting import greet\n\n\n"
    "def test_greet_names_the_person():\n    assert greet('Ada') == 'Hello, Ada!'\n"
)
WRONG = "def greet(name):\n    return 'Hello, ' + name\n"
RIGHT = "def greet(name):\n    return f'Hello, {name}!'\n"
REQUEST = (
    "Fix greet in src/greeting.py so that it names the person: greet('Ada') returns "
    "'Hello, Ada!'; done when tests pass"
)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(
        tmp_path / "repo",
        {
            "src/__init__.py": "",
            "src/greeting.py": GREETING,
            "tests/test_greeting.py": TEST,
            ".agentos.yaml": f"python: {sys.executable}\n",
        },
    )


def cli_env(model: ScriptedModel, **extra: str) -> dict[str, str]:
    """The caller's environment for `agentos run`: the npm CLIs on PATH, the model's
    address and key in the variables the bundled packages pass through, nothing of the
    developer's own."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("CLAUDE", "ANTHROPIC", "GEMINI", "GOOGLE", "OPENAI", "CODEX"))
    }
    env["PATH"] = f"{npm_bin_dir()}:{env['PATH']}"
    env.update(extra)
    return env


FORKSERVER = "agentos.mcp_server.forkserver"


def left_running(ws: Workspace) -> list[str]:
    """Processes of this test's run still alive: any whose working directory lies in the
    workspace (the CLIs in their worktrees, the relays in their run files) or whose command
    line names it (the agents' MCP servers and pipes). The workspace's fork server of MCP
    servers outlives runs by design and is not counted; the servers it forked are (they
    have its command line, and it as their parent)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            cwd = os.readlink(entry / "cwd")
            parent = (entry / "stat").read_text().rpartition(")")[2].split()[1]
            parents_cmdline = Path(f"/proc/{parent}/cmdline").read_bytes()
        except (OSError, IndexError):
            continue
        if FORKSERVER in cmdline and FORKSERVER.encode() not in parents_cmdline:
            continue  # the fork server itself
        if cwd.startswith(str(ws.root)) or str(ws.root) in cmdline:
            found.append(f"{entry.name}: {cmdline[:200]}")
    return found


def assert_clean_end(ws: Workspace, repo: Path, tmux_socket: str, report: dict[str, Any]) -> None:
    """Merged, receipts intact, nothing left: no session, worktree, branch or process."""
    assert report["status"] == "succeeded", report.get("message")
    assert (repo / "src" / "greeting.py").read_text() == RIGHT
    assert git(repo, "status", "--porcelain") == ""
    assert verify_chain(ws) == []
    assert tmux_sessions(tmux_socket) == []
    assert worktrees(repo) == [str(repo)]
    assert branches(repo) == ["main"]
    assert left_running(ws) == []


@dataclass(frozen=True)
class Cli:
    """How one CLI is driven: the bundled agent, the variables that point it at the scripted
    model, its tools for reading and changing a file, and how a failed tool call reads."""

    agent: str
    program: str
    env: Callable[[ScriptedModel], dict[str, str]]
    read: Callable[[str], Call]
    write: Callable[[str, str], Call]
    edit: Callable[[str, str, str], Call]
    ok: Callable[[str], bool]  # whether a tool result says the call worked


def _shell(command: str) -> Call:
    """Codex's newer models call tools from JavaScript (its ``exec`` tool, "code mode"),
    the shell among them."""
    script = f"text(JSON.stringify(await tools.exec_command({{cmd: {json.dumps(command)}}})));"
    return Call("exec", {"input": script})


CLAUDE = Cli(
    "claude-coder",
    "claude",
    lambda m: {"ANTHROPIC_API_KEY": KEY, "ANTHROPIC_BASE_URL": m.url},
    lambda path: Call("Read", {"file_path": path}),
    lambda path, text: Call("Write", {"file_path": path, "content": text}),
    lambda path, old, new: Call("Edit", {"file_path": path, "old_string": old, "new_string": new}),
    lambda result: '"is_error": true' not in result,
)
GEMINI = Cli(
    "gemini-coder",
    "gemini",
    lambda m: {"GEMINI_API_KEY": KEY, "GOOGLE_GEMINI_BASE_URL": m.url},
    lambda path: Call("read_file", {"file_path": path}),
    lambda path, text: Call("write_file", {"file_path": path, "content": text}),
    lambda path, old, new: Call(
        "replace",
        {"file_path": path, "old_string": old, "new_string": new, "instruction": "name the person"},
    ),
    lambda result: '"error"' not in result,
)
CODEX = Cli(
    "codex-coder",
    "codex",
    lambda m: {"OPENAI_API_KEY": KEY, "OPENAI_BASE_URL": f"{m.url}/v1"},
    lambda path: _shell(f"cat {path}"),
    lambda path, text: _shell(f"cat > {path} <<'EOF'\n{text}EOF"),
    lambda path, old, new: _shell(f"cat > {path} <<'EOF'\n{new}EOF"),
    lambda result: '\\"exit_code\\":0' in result,
)


CASES = [
    pytest.param(CLAUDE, marks=needs("claude"), id="claude-code"),
    pytest.param(GEMINI, marks=needs("gemini"), id="gemini-cli"),
    pytest.param(CODEX, marks=needs("codex"), id="codex"),
]


def run_agent(
    cli: CliRunner, repo: Path, agent: str, model: ScriptedModel, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """`agentos run REQUEST --agent AGENT --json` against the scripted model."""
    return cli("run", REQUEST, "--repo", str(repo), "--agent", agent, "--json",
               env=cli_env(model, **env))  # fmt: skip


def commit(repo: Path, files: dict[str, str]) -> None:
    """Write ``files`` into ``repo`` and commit them."""
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "more")


@pytest.mark.parametrize("case", CASES)
def test_a_cli_agent_fixes_its_work_with_the_gates_feedback_and_it_is_merged(
    ws: Workspace, cli: CliRunner, repo: Path, tmux_socket: str, case: Cli
) -> None:
    source = "{cwd}/src/greeting.py"
    script = [  # as a model would: read the file, then write it; edit it on the retry
        [[case.read(source)], [case.write(source, WRONG)]],
        [[case.read(source)], [case.edit(source, WRONG, RIGHT)]],
    ]
    with ScriptedModel(script) as model:
        out = run_agent(cli, repo, case.agent, model, case.env(model))
        report = json.loads(out.stdout)
        first, second = model.conversation(0), model.conversation(1)

    assert out.returncode == 0, out.stderr + out.stdout
    (agent,) = report["agents"]
    assert agent["agent"] == case.agent and agent["attempts"] == 2
    # What the CLI was told: AgentOS's prompt with the request and the context...
    assert REQUEST in first[0].text() and "Context from the knowledge store" in first[0].text()
    assert "the checks failed last time" not in first[0].text()
    # ... and on the retry, the gate's failure: the test that failed and why.
    told = second[0].text()
    assert "Attempt 2: the checks failed last time" in told
    assert "test_greet_names_the_person" in told and "Hello, Ada" in told
    # Each attempt's tool calls were carried out by the CLI and their results sent back.
    assert [len(c) for c in (first, second)] == [3, 3]
    results = [r for c in (first, second) for r in c[-1].tool_results()]
    assert len(results) == 4 and all(case.ok(r) for r in results), results
    gates = [r for r in list_receipts(ws, run_id=report["run"]) if r.kind == "gate"]
    assert [load_receipt(ws, g.id).fields["accepted"] for g in gates] == [False, True]
    assert "merge" in [r.kind for r in list_receipts(ws, run_id=report["run"])]
    assert_clean_end(ws, repo, tmux_socket, report)


KEY_VARS = {"claude-coder": "ANTHROPIC_API_KEY", "gemini-coder": "GEMINI_API_KEY",
            "codex-coder": "OPENAI_API_KEY"}  # fmt: skip


@pytest.mark.parametrize("refused", [False, True], ids=["no-key", "key-refused"])
@pytest.mark.parametrize("case", CASES)
def test_a_cli_agent_without_a_key_its_api_takes_stops_the_run_before_any_worktree(
    ws: Workspace, cli: CliRunner, repo: Path, tmux_socket: str, case: Cli, refused: bool
) -> None:
    with ScriptedModel(status=401 if refused else 200) as model:
        env = case.env(model)
        if not refused:
            del env[KEY_VARS[case.agent]]
        env = cli_env(model, **env)
        out = cli("run", REQUEST, "--repo", str(repo), "--agent", case.agent, env=env)
        asked = [(r.api, r.path) for r in model.requests]
        doctor = cli("doctor", "--json", env=env)

    assert out.returncode == 2, out.stdout + out.stderr
    (line,) = [x for x in out.stderr.splitlines() if x.startswith("error:")]
    if refused:
        assert (
            line.startswith(f"error: env: {case.agent}: the ")
            and "refused the key: HTTP 401" in line
        )
        assert f"({KEY_VARS[case.agent]}); export {KEY_VARS[case.agent]}" in line
        assert all(r == asked[0] for r in asked) and asked[0][0] == (  # the key check only
            "gemini" if case is GEMINI else "models"
        )
    else:
        assert line.startswith(f"error: env: {case.agent} has no key for the ")
        assert f"; export {KEY_VARS[case.agent]}" in line
        assert asked == []
    # Nothing was started: no worktree, no branch, no session, no agent log.
    assert worktrees(repo) == [str(repo)] and branches(repo) == ["main"]
    assert tmux_sessions(tmux_socket) == [] and not list(ws.logs_dir.glob(f"*/{case.agent}.log"))
    checks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
    check = checks[f"key {case.agent}"]
    assert (check["kind"], check["ready"]) == ("key", False)
    assert check["fix"].startswith(f"export {KEY_VARS[case.agent]}")
    assert doctor.returncode == 0  # a key only matters to the packages that need it


@pytest.mark.parametrize("case", CASES)
def test_doctor_says_which_key_a_cli_agent_uses_and_that_its_api_takes_it(
    cli: CliRunner, case: Cli
) -> None:
    with ScriptedModel() as model:
        doctor = cli("doctor", "--json", env=cli_env(model, **case.env(model)))

    checks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
    check = checks[f"key {case.agent}"]
    assert check["ready"] is True
    base = case.env(model).get("OPENAI_BASE_URL", model.url)
    assert check["detail"] == f"{KEY_VARS[case.agent]} accepted by {base}"


@needs("claude")
def test_a_claude_code_agent_searches_the_knowledge_store_through_agentos_mcp_server(
    ws: Workspace, cli: CliRunner, repo: Path, tmux_socket: str
) -> None:
    style = (
        "# Greeting style\n\nA greeting names the person and ends with an exclamation mark: "
        "the zanzibar convention.\n"
    )
    commit(repo, {"docs/style.md": style})
    source = "{cwd}/src/greeting.py"
    script = [
        [
            [Call("mcp__agentos__kb_search", {"query": "zanzibar convention", "k": 3})],
            [Call("Read", {"file_path": source})],
            [Call("Write", {"file_path": source, "content": RIGHT})],
        ]
    ]
    with ScriptedModel(script) as model:
        out = run_agent(cli, repo, "claude-coder", model, CLAUDE.env(model))
        talk = model.conversation(0)

    assert out.returncode == 0, out.stderr + out.stdout
    report = json.loads(out.stdout)
    assert report["agents"][0]["attempts"] == 1
    # Claude Code was offered AgentOS's server with exactly the tool its package asks for.
    offered = [t for t in talk[0].tool_names() if t.startswith("mcp__")]
    assert offered == ["mcp__agentos__kb_search"]
    # The tool ran in AgentOS, over the workspace the agent cannot see, and its result
    # reached the model in the next request.
    (result,) = talk[1].tool_results()
    assert "docs/style.md" in result and "zanzibar" in result
    assert '"is_error": true' not in result
    assert_clean_end(ws, repo, tmux_socket, report)


def with_tools(ws: Workspace, tmp_path: Path, agent: str, tools: list[str]) -> str:
    """A copy of a bundled CLI agent that asks for AgentOS's MCP ``tools``, its prompt file
    starting as a list (no CLI may take it for one of its options)."""
    return install_variant(
        ws, tmp_path, agent, f"{agent}-tools", prompt_prefix="- Work in small steps.\n", mcp=tools
    )


# how each CLI's model calls AgentOS's MCP tool NAME
MCP_CALL: dict[str, Callable[[str, dict[str, Any]], Call]] = {
    "claude-coder": lambda name, args: Call(f"mcp__agentos__{name}", args),
    "gemini-coder": lambda name, args: Call(f"mcp_agentos_{name}", args),
    # Codex's code mode: MCP tools are called from JavaScript (not listed, found by name)
    "codex-coder": lambda name, args: Call(
        "exec",
        {"input": f"text(JSON.stringify(await tools.mcp__agentos__{name}({json.dumps(args)})));"},
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_every_cli_calls_its_mcp_tools_and_what_changes_anything_goes_to_its_outbox(
    ws: Workspace, cli: CliRunner, repo: Path, tmp_path: Path, tmux_socket: str, case: Cli
) -> None:
    # The repository names MCP servers of its own for each CLI: none may start in a run.
    rogue = {"command": "sh", "args": ["-c", "touch rogue-server-started; sleep 30"]}
    servers = json.dumps({"mcpServers": {"rogue": rogue}})
    commit(
        repo,
        {
            "docs/style.md": "A greeting follows the zanzibar convention.\n",
            ".mcp.json": servers,
            ".gemini/settings.json": servers,
            ".codex/config.toml": (
                f"[mcp_servers.rogue]\ncommand = 'sh'\nargs = {json.dumps(rogue['args'])}\n"
            ),
        },
    )
    agent = with_tools(ws, tmp_path, case.agent, ["kb_search", "create_task"])
    call = MCP_CALL[case.agent]
    source = "{cwd}/src/greeting.py"
    script = [
        [
            [call("kb_search", {"query": "zanzibar convention", "k": 3})],
            [call("create_task", {"description": "Document the zanzibar convention", "phase": 1})],
            [case.read(source)],
            [case.write(source, RIGHT)],
        ]
    ]
    with ScriptedModel(script) as model:
        out = run_agent(cli, repo, agent, model, case.env(model))
        talk = model.conversation(0)

    assert out.returncode == 0, out.stderr + out.stdout
    report = json.loads(out.stdout)
    assert "- Work in small steps." in talk[0].text() and REQUEST in talk[0].text()
    assert not any("rogue" in n for n in talk[0].tool_names())
    assert not (repo / "rogue-server-started").exists()
    if case is not CODEX:  # (Codex defers MCP tools: found by name, not listed)
        offered = [n for n in talk[0].tool_names() if "agentos" in n]
        assert sorted(offered) == sorted(call(n, {}).tool for n in ("kb_search", "create_task"))
    found = talk[1].tool_results()[-1]
    assert "docs/style.md" in found and "zanzibar" in found
    posted = talk[2].tool_results()[-1]
    assert "AgentOS decides on it when this run ends" in posted
    kept = ws.logs_dir / report["run"] / f"{agent}.outbox.jsonl"
    assert [json.loads(line) for line in kept.read_text().splitlines()] == [
        {"kind": "task", "description": "Document the zanzibar convention", "phase": 1}
    ]
    assert_clean_end(ws, repo, tmux_socket, report)


# -- cost per run -----------------------------------------------------------------------------

USAGE = (1200, 34)  # input and output tokens every answer of the scripted API reports
PRICE = {"input": 3.0, "output": 15.0}  # per million tokens, in agentos.yaml's prices
# The model each CLI names its tokens by: Claude Code the one it asked for (it reports its own
# cost), Gemini CLI the one the API answered with (its modelVersion), Codex none (its events
# do not name one): a package's `model` is priced (Codex's own default, whose tools it knows).
CODEX_MODEL = "gpt-6.1-sol"
PRICED_MODEL = {"claude-coder": None, "gemini-coder": "scripted", "codex-coder": CODEX_MODEL}


def priced_agent(ws: Workspace, tmp_path: Path, case: Cli, settings: dict[str, Any]) -> str:
    """The agent of ``case`` with the price table (and ``settings``) in agentos.yaml."""
    prices = {m: PRICE for m in PRICED_MODEL.values() if m}
    ws.settings_file.write_text(json.dumps({"run": {"guardian": False}, "prices": prices}
                                           | settings))  # fmt: skip
    if case is CODEX:
        return install_variant(ws, tmp_path, case.agent, "codex-priced", model=CODEX_MODEL)
    return case.agent


def cli_costs(log: Path) -> float:
    """What Claude Code itself said its attempts cost: its result events' total_cost_usd."""
    events = [json.loads(x) for x in log.read_text().splitlines() if x.startswith('{"type":"res')]
    return float(sum(e["total_cost_usd"] for e in events))


@pytest.mark.parametrize("case", CASES)
def test_a_cli_agent_records_the_tokens_its_model_api_reported_and_their_cost(
    ws: Workspace, cli: CliRunner, repo: Path, tmp_path: Path, tmux_socket: str, case: Cli
) -> None:
    agent = priced_agent(ws, tmp_path, case, {})
    source = "{cwd}/src/greeting.py"
    with ScriptedModel([[[case.read(source)], [case.write(source, RIGHT)]]], usage=USAGE) as model:
        out = run_agent(cli, repo, agent, model, case.env(model))
        tokens_in, tokens_out = model.reported()

    assert out.returncode == 0, out.stderr + out.stdout
    report = json.loads(out.stdout)
    run_id = report["run"]
    assert tokens_in and tokens_in % USAGE[0] == 0  # every answer's usage, none other
    if case is CLAUDE:  # the cost Claude Code reported, never AgentOS's own guess
        cost = cli_costs(ws.logs_dir / run_id / f"{agent}.log")
        assert cost > 0
    else:  # the price table's
        cost = (tokens_in * PRICE["input"] + tokens_out * PRICE["output"]) / 1_000_000
    used = {"tokens": tokens_in + tokens_out, "cost": pytest.approx(cost)}
    (reported,) = report["agents"]
    assert reported["usage"] == used
    (gate,) = [r for r in list_receipts(ws, run_id=run_id) if r.kind == "gate"]
    assert load_receipt(ws, gate.id).fields["usage"] == used
    shown = json.loads(cli("runs", "show", run_id, "--json").stdout)
    assert [a["usage"] for a in shown["agents"]] == [used] and shown["usage"] == used
    (listed,) = json.loads(cli("runs", "list", "--json").stdout)["runs"]
    assert listed["usage"] == used and listed["agents"][0]["usage"] == used
    text = cli("runs", "show", run_id).stdout
    assert f"used:    {tokens_in + tokens_out} tokens, cost {cost:.4g} (all its agents)" in text
    assert_clean_end(ws, repo, tmux_socket, report)


@pytest.mark.parametrize("case", CASES)
def test_a_cli_agent_without_a_price_or_a_cost_of_its_own_records_tokens_only(
    ws: Workspace, cli: CliRunner, repo: Path, tmux_socket: str, case: Cli
) -> None:
    source = "{cwd}/src/greeting.py"
    script = [[[case.read(source)], [case.write(source, RIGHT)]]]
    with ScriptedModel(script, usage=USAGE) as model:
        out = run_agent(cli, repo, case.agent, model, case.env(model))
        tokens = sum(model.reported())

    assert out.returncode == 0, out.stderr + out.stdout
    (agent,) = json.loads(out.stdout)["agents"]
    assert agent["usage"]["tokens"] == tokens
    assert ("cost" in agent["usage"]) is (case is CLAUDE)  # a cost is never invented


@pytest.mark.parametrize("case", CASES)
def test_a_budget_below_what_a_cli_agent_uses_stops_it_with_limit_budget(
    ws: Workspace, cli: CliRunner, repo: Path, tmp_path: Path, tmux_socket: str, case: Cli
) -> None:
    agent = priced_agent(ws, tmp_path, case, {"run": {"guardian": False, "budget": {
        "tokens": USAGE[0] // 2}}})  # fmt: skip
    source = "{cwd}/src/greeting.py"
    # The wrong change: without the budget, the gate's failure would bring a second attempt.
    script = [[[case.read(source)], [case.write(source, WRONG)]]]
    # Claude Code streams each model turn's tokens: it is stopped while the API holds its
    # second request. Gemini CLI and Codex report theirs when their run ends.
    hold = 1 if case is CLAUDE else None
    with ScriptedModel(script, usage=USAGE, hold=hold) as model:
        out = run_agent(cli, repo, agent, model, case.env(model))
        held = model.held()

    assert out.returncode == 1, out.stderr + out.stdout
    report = json.loads(out.stdout)
    (reported,) = report["agents"]
    assert reported["attempts"] == 1 and reported["limit"] == "budget"
    assert reported["usage"]["tokens"] > USAGE[0] // 2
    if case is CLAUDE:
        # Stopped during its attempt (killed, 137), by its first turn's tokens: before it
        # asked for a second turn, or while the API held that request.
        assert reported["exit_code"] == 137
        assert all(h.turn == 1 for h in held)
    (gate,) = [r for r in list_receipts(ws, run_id=report["run"]) if r.kind == "gate"]
    fields = load_receipt(ws, gate.id).fields
    assert (fields["limit"], fields["accepted"]) == ("budget", False)
    assert fields["usage"] == reported["usage"]
    assert (repo / "src" / "greeting.py").read_text() == GREETING  # nothing landed
    assert tmux_sessions(tmux_socket) == [] and left_running(ws) == []


@pytest.mark.parametrize(
    "budget",
    [{"tokens": 0}, {"tokens": "many"}, {"cost": -1}, {"cost": ".inf"}, {"dollars": 5}],
    ids=["zero-tokens", "words", "negative-cost", "infinite-cost", "unknown-field"],
)
def test_a_bad_budget_is_one_line_naming_the_file_and_field(
    ws: Workspace, cli: CliRunner, repo: Path, budget: dict[str, Any]
) -> None:
    body = json.dumps(budget).replace('".inf"', ".inf")  # (YAML's infinity)
    ws.settings_file.write_text(f"run: {{guardian: false, budget: {body}}}\n")
    out = cli("run", REQUEST, "--repo", str(repo), "--agent", "claude-coder")

    assert out.returncode == 2
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith(f"error: {ws.settings_file}: run.budget.")
