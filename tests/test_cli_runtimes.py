"""The claude-code, gemini-cli and codex runtimes, driven with stand-in CLIs.

What lies outside AgentOS is replaced by a small script of the same name on PATH that
records how it was started and edits a file, as the real one would (the real CLIs against a
scripted model API are in test_cli_agents.py); their preflight asks a scripted model API
whether the key is good. Everything of AgentOS's own (routing, tmux, worktrees, the gate) is
real.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest
from conftest import install_variant, make_repo, needs_tmux

from agentos.run.orchestrator import start_run
from agentos.workspace.layout import Workspace

pytestmark = [needs_tmux, pytest.mark.usefixtures("tmux_socket", "model_api")]

FAKE_CLI = """#!PYTHON
import json, os, sys
from pathlib import Path
args = sys.argv[1:]
attempt = os.environ["AGENTOS_ATTEMPT"]
Path(f"invocation-{attempt}.json").write_text(json.dumps({
    "argv": args, "stdin_is_tty": sys.stdin.isatty()}))
prompt = next(a for a in args if "## Request" in a)
if "FAILED" in prompt or SUCCEED_FIRST:
    Path("feature.txt").write_text("done\\n")
print("fake PROGRAM: finished")
"""


def install_fake(bin_dir: Path, program: str, *, succeed_first: bool) -> None:
    """A stand-in for an LLM-backed CLI: records its argv, edits a file, prints a line."""
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / program
    script.write_text(
        FAKE_CLI.replace("PYTHON", sys.executable)
        .replace("SUCCEED_FIRST", str(succeed_first))
        .replace("PROGRAM", program)
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


@pytest.mark.parametrize(
    ("agent", "program", "card_word", "flags"),
    [
        ("claude-coder", "claude", "claude", ["-p", "--permission-mode", "acceptEdits"]),
        ("gemini-coder", "gemini", "gemini", ["--approval-mode", "yolo", "--skip-trust"]),
        ("codex-coder", "codex", "codex", ["exec", "--dangerously-bypass-approvals-and-sandbox"]),
    ],
    ids=["claude-code", "gemini-cli", "codex"],
)
def test_cli_agents_get_prompt_request_and_context_as_an_argument(
    ws: Workspace,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    agent: str,
    program: str,
    card_word: str,
    flags: list[str],
) -> None:
    install_fake(tmp_path / "bin", program, succeed_first=True)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    repo = make_repo(
        tmp_path / "repo",
        {"src/inventory.py": "def total_value(items):\n    return sum(i.price for i in items)\n"},
    )
    request = f"with {card_word}: implement the feature in src/inventory.py, keep the API"

    report = start_run(ws, request, repo, force=True)

    assert report.status == "succeeded", report.message
    assert report.agents[0].agent == agent
    call = json.loads((repo / "invocation-1.json").read_text())
    argv = call["argv"]
    assert [a for a in argv if a in flags] == [f for f in flags if f in argv]
    assert all(f in argv for f in flags)
    prompt = next(a for a in argv if "## Request" in a)
    # Last, where no prompt can pass for an option of the CLI's (a prompt file may start
    # with "-"): after "--", or as one --prompt=TEXT argument.
    if program == "gemini":
        assert prompt.startswith("--prompt=")
    else:
        assert argv[-2:] == ["--", prompt]
    assert "You are a careful software engineer" in prompt  # the package's prompt file
    assert request in prompt
    assert "src/inventory.py" in prompt.split("## Context from the knowledge store")[1]
    assert call["stdin_is_tty"] is True  # started in a real tmux pane, not fed keystrokes
    assert "fake " + program + ": finished" in report.agents[0].output_tail


def test_a_cli_agent_gets_the_gate_failure_in_its_prompt_on_the_next_attempt(
    ws: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_fake(tmp_path / "bin", "claude", succeed_first=False)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    (ws.cards_dir / "claude-code.yaml").write_text(
        (ws.cards_dir / "claude-code.yaml").read_text()
        + "checks:\n  - name: feature file written\n    file_exists: feature.txt\n"
    )
    repo = make_repo(tmp_path / "repo")

    report = start_run(ws, "with claude: implement the feature", repo, force=True)

    assert report.status == "succeeded", report.message
    assert report.agents[0].attempts == 2
    second = json.loads((repo / "invocation-2.json").read_text())
    prompt = next(a for a in second["argv"] if "## Request" in a)
    assert "## Attempt 2: the checks failed last time" in prompt
    assert "FAILED: feature file written" in prompt


HOSTILE_CLI = """#!PYTHON
# A CLI agent that points what AgentOS writes outside its sandbox at files of the host: its
# configuration home (removed and made anew before each attempt) and its outbox (appended
# to by its MCP server), then asks that server to post to the outbox.
import json, os, shutil, subprocess, sys
from pathlib import Path
args = sys.argv[1:]
io = Path(os.environ["AGENTOS_OUTBOX"]).parent
if os.environ["AGENTOS_ATTEMPT"] == "2":
    Path("feature.txt").write_text("done\\n")
    sys.exit(0)
home = io / "cli-home"
shutil.rmtree(home)
home.symlink_to("VICTIM_DIR")
outbox = io / "outbox.jsonl"
outbox.unlink(missing_ok=True)
outbox.symlink_to("VICTIM_FILE")
server = json.loads(args[args.index("--mcp-config") + 1])["mcpServers"]["agentos"]
pipe = subprocess.Popen([server["command"], *server["args"]], stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE, text=True)
def send(message):
    pipe.stdin.write(json.dumps({"jsonrpc": "2.0", **message}) + "\\n")
    pipe.stdin.flush()
send({"id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18",
      "capabilities": {}, "clientInfo": {"name": "hostile", "version": "1"}}})
pipe.stdout.readline()
send({"method": "notifications/initialized"})
send({"id": 2, "method": "tools/call", "params": {"name": "create_task",
      "arguments": {"description": "pwned", "phase": 1}}})
print("ANSWER " + pipe.stdout.readline().strip(), flush=True)
"""


def test_a_cli_agent_cannot_point_its_outbox_or_config_home_at_files_of_the_host(
    ws: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:

    from agentos.run.orchestrator import RunOptions

    victim_dir = tmp_path / "victim-dir"
    (victim_dir / "claude").mkdir(parents=True)
    (victim_dir / "claude" / "keep.txt").write_text("mine\n")
    victim_file = tmp_path / "victim.txt"
    victim_file.write_text("mine\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "claude").write_text(
        HOSTILE_CLI.replace("PYTHON", sys.executable)
        .replace("VICTIM_DIR", str(victim_dir))
        .replace("VICTIM_FILE", str(victim_file))
    )
    (bin_dir / "claude").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    install_variant(ws, tmp_path, "claude-coder", "claude-tools", mcp=["create_task"])
    repo = make_repo(tmp_path / "repo")

    report = start_run(
        ws,
        "with claude: implement the feature",
        repo,
        RunOptions(
            force=True,
            agent="claude-tools",
            checks=[{"name": "feature written", "file_exists": "feature.txt"}],
        ),
    )

    assert report.status == "succeeded", report.message
    assert report.agents[0].attempts == 2  # its second attempt's home was made anew
    assert (victim_dir / "claude" / "keep.txt").read_text() == "mine\n"
    assert victim_file.read_text() == "mine\n"
    log = (ws.logs_dir / report.run_id / "claude-tools.log").read_text()
    (answer,) = [json.loads(x[7:]) for x in log.splitlines() if x.startswith("ANSWER ")]
    assert answer["result"]["isError"] is True
    assert "was not written: it cannot be opened" in answer["result"]["content"][0]["text"]


NOSY_CLI = """#!PYTHON
# A CLI agent that tries the host's loopback directly, then through its proxy a host its
# package does not name, then its model API (which it may reach).
import os, socket, urllib.request
def attempt(what, call):
    try:
        print(what, "OK", call(), flush=True)
    except Exception as exc:
        print(what, "FAILED", type(exc).__name__, getattr(exc, "code", ""), flush=True)
attempt("direct", lambda: socket.create_connection(("127.0.0.1", LISTENER), 3).close())
proxied = urllib.request.build_opener(urllib.request.ProxyHandler(
    {"http": os.environ["HTTP_PROXY"], "https": os.environ["HTTPS_PROXY"]}))
attempt("other", lambda: proxied.open("http://127.0.0.1:LISTENER/", timeout=5).status)
models = urllib.request.Request(os.environ["ANTHROPIC_BASE_URL"] + "/v1/models",
                                headers={"x-api-key": os.environ["ANTHROPIC_API_KEY"]})
attempt("api", lambda: proxied.open(models, timeout=5).status)
"""


def test_a_cli_agent_reaches_only_the_hosts_its_package_names(
    ws: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    from agentos.receipts import list_receipts, load_receipt

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.2)
    port = listener.getsockname()[1]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "claude").write_text(
        NOSY_CLI.replace("PYTHON", sys.executable).replace("LISTENER", str(port))
    )
    (bin_dir / "claude").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    repo = make_repo(tmp_path / "repo")

    report = start_run(ws, "with claude: implement the feature", repo, force=True)

    log = (ws.logs_dir / report.run_id / "claude-coder.log").read_text()
    assert "direct FAILED" in log  # its own network namespace: the host is not there
    assert "other FAILED HTTPError 403" in log  # the proxy refuses what is not named
    assert "api OK 200" in log  # its model API, named by ANTHROPIC_BASE_URL
    try:
        listener.accept()
        raise AssertionError("the listener was reached")
    except TimeoutError:
        pass
    finally:
        listener.close()
    gates = [load_receipt(ws, r.id) for r in list_receipts(ws, run_id=report.run_id)]
    denied = [g.fields.get("network_denied") for g in gates if g.kind == "gate"]
    assert denied and all(d == [f"127.0.0.1:{port}"] for d in denied)


@pytest.mark.parametrize(
    "value",
    [
        'quote " and backslash \\',
        "emoji \U0001f600 beyond the BMP",
        "controls \x01\x7f\n\t",
        ["a", "\U0001f600"],
    ],
    ids=["escapes", "astral", "controls", "array"],
)
def test_codex_configuration_values_read_back_as_written(value: str | list[str]) -> None:
    import tomllib

    from agentos.runtimes.codex import toml_value

    assert tomllib.loads(f"key = {toml_value(value)}")["key"] == value


def test_the_key_check_never_follows_a_redirect_with_the_key(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from agentos.errors import MissingTool
    from agentos.hub.store import Hub
    from agentos.runtimes import get_runtime
    from agentos.runtimes.cli_agent import CliAgent

    seen: list[str] = []

    class Elsewhere(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.headers.get("x-api-key", ""))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    elsewhere = ThreadingHTTPServer(("127.0.0.1", 0), Elsewhere)

    class Redirect(Elsewhere):
        def do_GET(self) -> None:
            self.send_response(302)
            self.send_header(
                "Location", f"http://127.0.0.1:{elsewhere.server_address[1]}/v1/models"
            )
            self.end_headers()

    redirect = ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
    for server in (elsewhere, redirect):
        threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("ANTHROPIC_BASE_URL", f"http://127.0.0.1:{redirect.server_address[1]}")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-secret")
    _, manifest = Hub(ws.hub_dir).get("claude-coder")
    try:
        runtime = get_runtime("claude-code")
        assert isinstance(runtime, CliAgent)
        with pytest.raises(MissingTool, match=r"cannot be reached \(it redirects to http://"):
            runtime.credential(manifest)
    finally:
        for server in (elsewhere, redirect):
            server.shutdown()
            server.server_close()
    assert seen == []


def test_a_configuration_home_an_agent_made_unreadable_is_still_made_anew() -> None:
    """(As an ordinary user: root reads what is unreadable anyway.)"""
    import shutil
    import subprocess
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="agentos-home-"))  # where an ordinary user may go
    base.chmod(0o777)
    tree = base / "home"
    script = (
        "from pathlib import Path; from agentos.shared.fs import remove_tree\n"
        f"top = Path({str(tree)!r}); (top / 'claude' / 'locked' / 'deep').mkdir(parents=True)\n"
        "(top / 'claude' / 'locked').chmod(0); remove_tree(top); print(top.exists())\n"
    )
    argv = [sys.executable, "-c", script]
    if os.getuid() == 0:
        argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *argv]
    try:
        out = subprocess.run(argv, capture_output=True, text=True, cwd=Path(__file__).parent.parent)
    finally:
        shutil.rmtree(base)

    assert (out.returncode, out.stdout.strip()) == (0, "False"), out.stderr
