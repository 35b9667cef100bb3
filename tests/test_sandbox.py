"""The sandbox, with real processes in real namespaces: a hostile agent confined, a check
that cannot change what it judges, and what happens where no sandbox can be had."""

from __future__ import annotations

import json
import re
import socket
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from conftest import (
    CliRunner,
    add_agent,
    git,
    make_repo,
    needs_bwrap,
    needs_tmux,
    processes_named,
    tree_listing,
)

from agentos.receipts import list_receipts, read_receipt
from agentos.workspace.layout import Workspace

pytestmark = [needs_tmux, pytest.mark.usefixtures("tmux_socket")]

HOSTILE = r"""
repo="$AGENTOS_REPO"; ws="$AGENTOS_WORKSPACE"
attempt() {  # each attempt must fail inside the sandbox
  if sh -c "$2" >/dev/null 2>&1; then echo "ESCAPED: $1"; else echo "blocked: $1"; fi
}
echo "legit change" > legit.txt
attempt "write the main working tree" "echo pwned > '$repo/pwned.txt'"
common='$(git rev-parse --git-common-dir)'
attempt "write beside the git common dir" "echo pwned > \"$common/../pwned2.txt\""
attempt "plant a hook in the git common dir" "echo 'echo pwned' > \"$common/hooks/post-commit\""
attempt "edit its own package" "echo pwned >> '$AGENTOS_PACKAGE_DIR/run.sh'"
attempt "edit a card" "echo pwned >> '$ws/routing_cards/hostile.yaml'"
attempt "edit agentos.yaml" "echo pwned >> '$ws/agentos.yaml'"
attempt "edit state.db" "echo pwned >> '$ws/.agentos/state.db'"
attempt "edit a receipt" "echo pwned >> '$ws/receipts/00000001.txt'"
attempt "read the ssh key" "grep -q FAKE-KEY ~/.ssh/id_rsa"
attempt "unmount what hides the workspace" "umount -l '$ws' && ls '$ws/agentos.yaml'"
attempt "remount the system writable" "mount -o remount,rw,bind / && touch /agentos-pwned"
attempt "leave its control group" "mount -o remount,rw /sys/fs/cgroup/memory"
unix="import socket; socket.socket(socket.AF_UNIX).connect('SOCKET')"
attempt "reach a host service on a Unix socket" "python3 -c \"$unix\""
connect="import socket; socket.create_connection(('127.0.0.1', PORT), 2)"
attempt "connect to the host" "python3 -c \"$connect\""
setsid bash -c 'exec -a MARKER sleep 1000' &
python3 -c 'x = bytearray(2 << 30)'; echo "2 GB allocation exited $?"
timeout -s KILL 5 bash -c ':(){ :|:& };:' 2>/dev/null; echo "fork bomb over"
echo "still here"
"""


@pytest.fixture
def fake_home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("-----BEGIN FAKE-KEY-----\n")
    (home / ".fake-cli").mkdir()
    (home / ".fake-cli" / "token").write_text("fake-cli-token\n")
    return home


@pytest.fixture
def listener() -> Iterator[int]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    yield server.getsockname()[1]
    server.close()


def snapshot(ws: Workspace, repo: Path) -> dict[str, bytes]:
    """Every file of the hub, the cards, agentos.yaml and the main working tree (git's own
    files aside: AgentOS's merge changes those)."""
    files = {}
    roots = (ws.hub_dir, ws.cards_dir, ws.settings_file, repo)
    for root in roots:
        for path in [root] if root.is_file() else sorted(root.rglob("*")):
            if path.is_file() and "/.git/" not in str(path):
                files[str(path)] = path.read_bytes()
    return files


@needs_bwrap
def test_a_hostile_agent_is_confined_and_its_legitimate_edit_still_merges(
    ws: Workspace,
    cli: CliRunner,
    tmp_path: Path,
    fake_home: Path,
    listener: int,
) -> None:
    marker = f"agentos-escapee-{tmp_path.name}"
    repo = make_repo(tmp_path / "repo", {"README.md": "# target\n"})
    unix = socket.socket(socket.AF_UNIX)  # a host service, outside /tmp
    unix_path = Path("/run") / f"agentos-test-{uuid.uuid4().hex[:12]}.sock"
    unix.bind(str(unix_path))
    unix.listen(1)
    add_agent(
        ws,
        tmp_path,
        "hostile",
        HOSTILE.replace("PORT", str(listener))
        .replace("MARKER", marker)
        .replace("SOCKET", str(unix_path)),
        checks=[{"name": "legit", "file_exists": "legit.txt"}],
    )
    ws.settings_file.write_text(
        "run: {guardian: false, retries: 0}\nsandbox: {memory: 512M, processes: 256}\n"
    )
    before = snapshot(ws, repo)

    out = cli(
        "run",
        "hostile-task",
        "--repo",
        str(repo),
        "--force",
        "--json",
        env={"HOME": str(fake_home)},
    )

    unix.close()
    unix_path.unlink()
    report = json.loads(out.stdout)
    assert out.returncode == 0, report["message"]
    log = Path(report["agents"][0]["log"]).read_text()
    tried = re.findall(r"^(ESCAPED|blocked): (.*)$", log, re.MULTILINE)
    assert len(tried) == 14, log
    assert [what for verdict, what in tried if verdict == "ESCAPED"] == []
    assert "still here" in log  # the machine and the agent survived the fork bomb
    assert not Path("/agentos-pwned").exists()
    # Nothing outside the worktree changed, and the legitimate edit merged.
    after = snapshot(ws, repo)
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    assert changed == [str(repo / "legit.txt")], changed
    assert b"pwned" not in ws.state_db.read_bytes()
    assert cli("receipts", "verify").returncode == 0
    assert not any("pwned" in p.read_text() for p in ws.receipts_dir.glob("*.txt"))
    assert git(repo, "show", "HEAD:legit.txt") == "legit change"
    assert not (repo / ".git" / "hooks" / "post-commit").exists()
    # The double fork died with the agent; the 2 GB allocation met the memory cap.
    assert processes_named(marker) == []
    (agent,) = report["agents"]
    assert agent["limit"] == "memory"
    assert agent["sandbox"]["backend"] == "bwrap" and agent["sandbox"]["network"] is False
    gate = next(r for r in list_receipts(ws, run_id=report["run"]) if r.kind == "gate")
    text = read_receipt(ws, gate.id)
    assert "sandbox: bwrap" in text and "limit: memory" in text


@needs_bwrap
def test_network_and_home_files_are_opened_only_to_what_a_package_asks(
    ws: Workspace,
    cli: CliRunner,
    tmp_path: Path,
    fake_home: Path,
    listener: int,
) -> None:
    repo = make_repo(tmp_path / "repo", {"README.md": "# target\n"})
    script = (
        f"python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {listener}), 2)' "
        "&& echo connected > net.txt\n"
        "cat ~/.fake-cli/token > token.txt\n"
        "cat ~/.ssh/id_rsa > key.txt 2>&1 || echo no-key > key.txt\n"
    )
    add_agent(
        ws,
        tmp_path,
        "reacher",
        script,
        sandbox={"network": True, "read": ["~/.fake-cli"]},
    )
    ws.settings_file.write_text("run: {guardian: false, retries: 0}\n")

    out = cli(
        "run",
        "reacher-task",
        "--repo",
        str(repo),
        "--force",
        "--json",
        env={"HOME": str(fake_home)},
    )

    report = json.loads(out.stdout)
    assert out.returncode == 0, report["message"]
    assert (repo / "net.txt").read_text() == "connected\n"
    assert (repo / "token.txt").read_text() == "fake-cli-token\n"
    assert (repo / "key.txt").read_text() == "no-key\n"
    (agent,) = report["agents"]
    assert agent["sandbox"]["home_reads"] == [str(fake_home / ".fake-cli")]
    run_receipt = next(r for r in list_receipts(ws, run_id=report["run"]) if r.kind == "run")
    assert str(fake_home / ".fake-cli") in read_receipt(ws, run_receipt.id)


@needs_bwrap
def test_a_check_cannot_change_the_tree_it_judges_unless_it_writes(
    ws: Workspace, tmp_path: Path
) -> None:
    from agentos.run.orchestrator import start_run

    repo = make_repo(tmp_path / "repo", {"app.py": "x = 1\n"})
    add_agent(
        ws,
        tmp_path,
        "editor",
        "echo 'x = 2' > app.py\n",
        checks=[{"name": "sneaky", "run": "echo 'x = 3' > app.py"}],
    )
    add_agent(
        ws,
        tmp_path,
        "formatted",
        "echo 'y = 2' > other.py\n",
        checks=[{"name": "formatter", "run": "echo '# formatted' >> other.py", "writes": True}],
    )
    ws.settings_file.write_text("run: {guardian: false, retries: 0}\n")

    refused = start_run(ws, "editor-task", repo, force=True)
    allowed = start_run(ws, "formatted-task", repo, force=True)

    assert refused.status == "failed"
    gate = refused.agents[0].gate
    assert gate is not None
    (check,) = gate.results
    assert "Read-only file system" in check.output_tail
    assert "the tree is read-only for checks" in check.output_tail
    assert "`writes: true`" in check.output_tail
    assert allowed.status == "succeeded", allowed.message
    assert (repo / "other.py").read_text() == "y = 2\n"  # what a check wrote never lands


def without_sandboxes(tmp_path: Path, keep: tuple[str, ...] = ()) -> str:
    """A PATH holding every program of this machine but bwrap and unshare (but ``keep``)."""
    bin_dir = tmp_path / "bin-without-sandboxes"
    bin_dir.mkdir()
    drop = {"bwrap", "unshare"} - set(keep)
    for directory in ("/usr/local/bin", "/usr/bin", "/usr/sbin"):
        for program in Path(directory).iterdir() if Path(directory).is_dir() else []:
            if program.name not in drop and not (bin_dir / program.name).exists():
                (bin_dir / program.name).symlink_to(program)
    return f"{bin_dir}:{Path(sys.executable).parent}"


def test_no_sandbox_to_be_had_refuses_to_run_unless_not_required(
    ws: Workspace, cli: CliRunner, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "repo", {"README.md": "# target\n"})
    add_agent(ws, tmp_path, "plain", "echo done > done.txt\n")
    path = without_sandboxes(tmp_path)
    before = tree_listing(repo)

    refused = cli("run", "plain-task", "--repo", str(repo), "--force", env={"PATH": path})

    assert refused.returncode == 2
    assert refused.stderr.splitlines()[-1] == (
        "error: sandbox.backend: no sandbox for agents: bwrap is not installed; unshare is "
        "not installed: install bubblewrap (apt-get install bubblewrap; scripts/setup does it "
        "as root), or set `sandbox: {required: false}` in agentos.yaml to run agents with "
        "limits only"
    )
    assert tree_listing(repo) == before
    ws.settings_file.write_text("run: {guardian: false}\nsandbox: {required: false}\n")

    allowed = cli("run", "plain-task", "--repo", str(repo), "--force", "--json", env={"PATH": path})

    report = json.loads(allowed.stdout)
    assert allowed.returncode == 0, report["message"]
    kinds = {r.kind: read_receipt(ws, r.id) for r in list_receipts(ws, run_id=report["run"])}
    assert "sandbox: none" in kinds["gate"] and "sandbox: none" in kinds["run"]


def test_bad_sandbox_settings_are_one_line_naming_the_key(
    ws: Workspace, cli: CliRunner, tmp_path: Path
) -> None:
    for text, expected in [
        ("sandbox: {memory: 12XB}\n", "sandbox.memory: '12XB' is not a size like 512M or 2G"),
        ("sandbox: {cpu: -5}\n", "sandbox.cpu: Input should be greater than 0"),
        ("sandbox: {backend: docker}\n", "sandbox.backend: Input should be"),
        ("sandbox: {colour: red}\n", "sandbox.colour: unknown field"),
    ]:
        ws.settings_file.write_text(text)
        out = cli("hub", "list")
        assert out.returncode == 2
        assert out.stderr.startswith(f"error: {ws.settings_file}: {expected}"), out.stderr
    src = tmp_path / "pkg"
    src.mkdir()
    (src / "agent.yaml").write_text(
        yaml.safe_dump(
            {
                "name": "greedy",
                "version": "1.0.0",
                "description": "x",
                "runtime": "shell",
                "entry": "run.sh",
                "sandbox": {"read": ["/etc/shadow"]},
            }
        )
    )
    (src / "run.sh").write_text("true\n")
    ws.settings_file.write_text("")
    out = cli("hub", "install", str(src))
    assert out.returncode == 2
    assert out.stderr == (
        f"error: {src / 'agent.yaml'}: sandbox.read: '/etc/shadow' must be a path under ~/, "
        "like ~/.claude\n"
    )


@pytest.mark.process  # the sandboxed command writes to the process's own stdout
@needs_bwrap
def test_sandbox_run_and_doctor_from_the_cli(ws: Workspace, cli: CliRunner, tmp_path: Path) -> None:
    out = cli(
        "sandbox",
        "run",
        "--json",
        "--memory",
        "64M",
        "--",
        sys.executable,
        "-c",
        "x = bytearray(256 << 20)",
    )
    doc = json.loads(out.stdout)
    assert out.returncode == 137
    assert (doc["exit_code"], doc["limit"], doc["backend"]) == (137, "memory", "bwrap")
    written = tmp_path / "out"
    written.mkdir()
    wrote = cli(
        "sandbox",
        "run",
        "--write",
        str(written),
        "--",
        "sh",
        "-c",
        f"echo ok > {written}/ok; echo scratch > {tmp_path}/no; echo no > /etc/agentos-no",
    )
    assert wrote.returncode != 0  # the system is read-only
    assert (written / "ok").read_text() == "ok\n"
    assert not (tmp_path / "no").exists()  # /tmp is the sandbox's own, gone with it
    assert not Path("/etc/agentos-no").exists()
    timed = json.loads(
        cli("sandbox", "run", "--json", "--timeout", "1", "--", "sleep", "30").stdout
    )
    assert timed["limit"] == "time" and timed["wall"] < 10
    # Of your variables, only PATH, HOME, LANG, TERM and those named with --env.
    seen = cli(
        "sandbox",
        "run",
        "--env",
        "AGENTOS_TEST_NAMED",
        "--",
        "sh",
        "-c",
        "env",
        env={"AGENTOS_TEST_NAMED": "named", "AGENTOS_TEST_SECRET": "secret"},
    )
    assert "AGENTOS_TEST_NAMED=named" in seen.stdout.splitlines()
    assert "secret" not in seen.stdout
    doctor = cli("sandbox", "doctor", "--json")
    report = json.loads(doctor.stdout)
    assert doctor.returncode == 0, report
    assert report["backend"] == "bwrap" and report["ok"] is True
    assert [p["name"] for p in report["probes"]] == [
        "network blocked",
        "memory cap",
        "hidden and read-only",
        "no capabilities",
        "no escape of a double fork",
    ]
    view = {v["path"]: v["seen"] for v in report["view"]}
    assert view["/usr"] == "read-only" and view["/tmp"] == "empty, private"
    assert view[str(ws.root)] == "hidden (empty)" and view["/etc/shadow"] == "hidden (unreadable)"
    assert report["keyring"] == "its own"


def test_unshare_confines_agents_where_bubblewrap_is_missing(
    ws: Workspace, cli: CliRunner, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "repo", {"README.md": "# target\n"})
    add_agent(
        ws,
        tmp_path,
        "plain",
        f"echo done > done.txt\necho pwned > {repo}/pwned.txt || echo refused > refused.txt\n",
    )
    path = without_sandboxes(tmp_path, keep=("unshare",))

    out = cli("run", "plain-task", "--repo", str(repo), "--force", "--json", env={"PATH": path})

    report = json.loads(out.stdout)
    assert out.returncode == 0, report["message"]
    assert report["agents"][0]["sandbox"]["backend"] == "unshare"
    assert (repo / "refused.txt").exists() and not (repo / "pwned.txt").exists()


@needs_bwrap
def test_an_agent_cannot_point_agentos_git_at_the_main_branch(
    ws: Workspace, tmp_path: Path
) -> None:
    from agentos.run.orchestrator import start_run

    repo = make_repo(tmp_path / "repo", {"app.py": "x = 1\n"})
    # The worktree's .git file is the agent's to write; its admin directory (HEAD: the
    # branch AgentOS commits to) is not. Both tried, then a change made.
    script = (
        f"echo 'gitdir: {repo}/.git' > .git\n"
        "admin=$(sed -n 's/^gitdir: //p' .git)\n"
        f"echo 'ref: refs/heads/main' > {repo}/.git/worktrees/redirector/HEAD "
        "|| echo refused > head.txt\n"
        "echo 'x = 2' > app.py\n"
    )
    add_agent(ws, tmp_path, "redirector", script, checks=[{"name": "never", "run": "false"}])
    ws.settings_file.write_text("run: {guardian: false, retries: 0}\n")
    main_before = git(repo, "rev-parse", "main")

    report = start_run(ws, "redirector-task", repo, force=True)

    assert report.status == "failed"
    assert git(repo, "rev-parse", "main") == main_before, "the agent's work reached main"
    branch = f"agentos/{report.run_id}/redirector"
    assert git(repo, "show", f"{branch}:app.py") == "x = 2"
    assert git(repo, "show", f"{branch}:head.txt") == "refused"


@needs_bwrap
def test_links_an_agent_plants_never_make_agentos_write_outside(
    ws: Workspace, tmp_path: Path
) -> None:
    from agentos.run.orchestrator import start_run

    repo = make_repo(tmp_path / "repo", {"README.md": "# target\n"})
    script = (
        'if [ "$AGENTOS_ATTEMPT" = 1 ]; then\n'
        f"  ln -sf {repo}/README.md AGENTOS_FEEDBACK.md\n"
        f'  ln -sf {repo}/README.md "$(dirname "$AGENTOS_HEARTBEAT_FILE")/../agent.env" '
        "|| echo refused > refused.txt\n"
        "  exit 1\n"
        "fi\n"
        "echo fixed > fixed.txt\n"
    )
    add_agent(ws, tmp_path, "linker", script)
    ws.settings_file.write_text("run: {guardian: false, retries: 1}\n")

    report = start_run(ws, "linker-task", repo, force=True)

    assert report.status == "succeeded", report.message
    assert (repo / "README.md").read_text() == "# target\n"
    assert (repo / "refused.txt").read_text() == "refused\n"  # its run files are AgentOS's


@needs_bwrap
def test_a_repository_made_inside_the_worktree_fails_the_gate(
    ws: Workspace, tmp_path: Path
) -> None:
    from agentos.run.orchestrator import start_run

    repo = make_repo(tmp_path / "repo", {"README.md": "# target\n"})
    script = (  # a repository of its own, out of reach of the git AgentOS gives it
        "unset GIT_INDEX_FILE GIT_OBJECT_DIRECTORY GIT_ALTERNATE_OBJECT_DIRECTORIES\n"
        "mkdir sub && cd sub && git init -q && echo impl > impl.txt && git add . && "
        "git -c user.name=a -c user.email=a@a commit -qm impl\n"
    )
    add_agent(
        ws,
        tmp_path,
        "nester",
        script,
        checks=[{"name": "impl", "file_contains": {"path": "sub/impl.txt", "pattern": "impl"}}],
    )
    ws.settings_file.write_text("run: {guardian: false, retries: 0}\n")
    main_before = git(repo, "rev-parse", "main")

    report = start_run(ws, "nester-task", repo, force=True)

    assert report.status == "failed"
    assert git(repo, "rev-parse", "main") == main_before
    gate = report.agents[0].gate
    assert gate is not None
    failing = [c for c in gate.as_dict()["checks"] if not c["passed"]]
    assert [c["name"] for c in failing] == ["no nested repositories"]
    assert failing[0]["output_tail"].startswith("sub: a git repository made inside the worktree")


def test_an_agents_egress_proxy_serves_a_bounded_number_of_connections(tmp_path: Path) -> None:
    """Each connection is a thread of the run's process: an agent that opens them without
    end (the proxy's socket is in its reach) gets no more than MAX_CONNECTIONS at once."""
    import socket as _socket

    from agentos.sandbox.egress import MAX_CONNECTIONS, Egress

    egress = Egress(tmp_path / "egress.sock", ["api.example.com"])
    held = []
    try:
        for _ in range(MAX_CONNECTIONS + 20):
            conn = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
            conn.connect(str(tmp_path / "egress.sock"))
            held.append(conn)
        extra = held[-1]
        extra.settimeout(5)
        assert extra.recv(1) == b""  # closed at once: no thread for it
        first = held[0]
        first.sendall(b"CONNECT other.example.com:443 HTTP/1.1\r\n\r\n")
        first.settimeout(5)
        assert first.recv(100).startswith(b"HTTP/1.1 403")  # the first ones are served
        assert egress.denied == ["other.example.com:443"]
    finally:
        for conn in held:
            conn.close()
        egress.close()


FLOODER = r"""python3 - <<'PY'
# The relay to its proxy (127.0.0.1:3128 in its own network namespace), attacked: hundreds of
# connections held open, random bytes, connections reset or half-closed, a burst opened and
# closed at once; then what it may reach must still be reached, and nothing else.
import os, socket, struct, time, urllib.error, urllib.request
relay = ("127.0.0.1", 3128)
held = []
for _ in range(300):
    try:
        held.append(socket.create_connection(relay, 5))
    except OSError:
        break
print("held", len(held) >= 100, flush=True)
for s in held[:50]:
    try:
        s.sendall(os.urandom(4096))
    except OSError:
        pass
for s in held[50:100]:  # reset, not closed
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()
for s in held[100:150]:
    try:
        s.shutdown(socket.SHUT_WR)
    except OSError:
        pass
for _ in range(300):
    try:
        socket.create_connection(relay, 5).close()
    except OSError:
        pass
for s in held:
    s.close()
proxied = urllib.request.build_opener(urllib.request.ProxyHandler(
    {"http": os.environ["HTTP_PROXY"]}))
deadline = time.monotonic() + 60  # the proxy frees the flood's connections as they close
while True:
    try:
        print("allowed", proxied.open("http://127.0.0.1:ALLOWED/", timeout=10).read().decode())
        break
    except (OSError, urllib.error.URLError) as exc:
        if time.monotonic() > deadline:
            print("allowed FAILED", exc)
            break
try:
    proxied.open("http://127.0.0.1:1/", timeout=10)
    print("other reached")
except urllib.error.HTTPError as exc:
    print("other", exc.code)
PY
"""


@needs_bwrap
def test_the_relay_to_an_agents_proxy_outlives_a_flood_of_connections_and_garbage(
    ws: Workspace, tmp_path: Path
) -> None:
    """The relay binds first and imports what serves after it went to the background: an
    agent that floods it, sends it garbage, resets and half-closes its connections still
    reaches what its package names, and only that."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from agentos.run.orchestrator import start_run

    class Hello(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "5")
            self.end_headers()
            self.wfile.write(b"hello")

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    repo = make_repo(tmp_path / "repo", {"README.md": "# target\n"})
    add_agent(
        ws,
        tmp_path,
        "flooder",
        FLOODER.replace("ALLOWED", str(port)),
        sandbox={"network": [f"127.0.0.1:{port}"]},
    )
    ws.settings_file.write_text("run: {guardian: false, retries: 0}\n")
    try:
        report = start_run(ws, "flooder-task", repo, force=True)
    finally:
        server.shutdown()
        server.server_close()

    log = (ws.logs_dir / report.run_id / "flooder.log").read_text()
    lines = [line for line in log.splitlines() if line.startswith(("held", "allowed", "other"))]
    assert lines == ["held True", "allowed hello", "other 403"], log
    gate = next(r for r in list_receipts(ws, run_id=report.run_id) if r.kind == "gate")
    assert "127.0.0.1:1" in read_receipt(ws, gate.id)  # network_denied
