"""The sandbox, with real processes in real namespaces: a hostile agent confined, a check
that cannot change what it judges, and what happens where no sandbox can be had."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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
    requires,
    tree_listing,
    wait_until,
)

from agentos.receipts import list_receipts, read_receipt
from agentos.sandbox.policy import Policy
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
    # The double fork died with the agent (the kernel ends a pid namespace's processes as
    # its init exits, not by the time the run returns: under load, one allocating against
    # the memory cap took a while); the 2 GB allocation met the memory cap.
    wait_until(lambda: processes_named(marker) == [], timeout=30, what="the escapees' end")
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


@needs_bwrap
def test_a_nested_repository_is_found_though_a_check_points_the_worktrees_git_elsewhere(
    ws: Workspace, tmp_path: Path
) -> None:
    # A check that may write (a formatter's kind) rewrites the worktree's .git to point at
    # a repository of its own, where git would see no gitlink: the gate asks the main
    # repository about the commit it judged.
    from agentos.run.events import read_events
    from agentos.run.orchestrator import start_run
    from agentos.workspace.files import RunFiles

    repo = make_repo(tmp_path / "repo", {"README.md": "# target\n"})
    script = (
        "unset GIT_INDEX_FILE GIT_OBJECT_DIRECTORY GIT_ALTERNATE_OBJECT_DIRECTORIES\n"
        "mkdir sub && cd sub && git init -q && echo impl > impl.txt && git add . && "
        "git -c user.name=a -c user.email=a@a commit -qm impl\n"
    )
    decoy = (
        'git init -q ../decoy 2>/dev/null || git init -q "$TMPDIR/decoy"; '
        'echo "gitdir: $(cd ../decoy 2>/dev/null || cd "$TMPDIR/decoy"; pwd)/.git" > .git'
    )
    add_agent(
        ws,
        tmp_path,
        "nester",
        script,
        checks=[{"name": "decoy", "run": decoy, "writes": True}],
    )
    ws.settings_file.write_text("run: {guardian: false, retries: 0}\n")
    main_before = git(repo, "rev-parse", "main")

    report = start_run(ws, "nester-task", repo, force=True)

    assert report.status == "failed", report.message
    assert git(repo, "rev-parse", "main") == main_before
    gate = report.agents[0].gate
    assert gate is not None
    failing = [c["name"] for c in gate.as_dict()["checks"] if not c["passed"]]
    assert failing == ["no nested repositories"]
    events, _ = read_events(RunFiles.of(ws, report.run_id).events)
    assert "nester: a check rewrote its worktree's .git file; restored" in [
        e.message for e in events
    ]


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


# --- each backend's arguments, seen from inside ----------------------------------------------

SYSTEM_PYTHON = "/usr/bin/python3"  # in the view (/usr), whoever runs the test
BACKENDS = [
    pytest.param("bwrap", marks=needs_bwrap),
    pytest.param(
        "unshare",
        marks=requires(
            os.geteuid() == 0 and shutil.which("unshare") is not None,
            "util-linux unshare makes a mount namespace only as root",
        ),
    ),
]

# What a confined process finds out about itself, as one JSON document: its namespaces,
# session, capabilities, directory and variables, its mounts, where it may write, its /dev.
INSIDE = r"""
import ctypes, errno, json, os, socket, sys
cfg = json.loads(sys.argv[1])
out = {"ns": {n: os.readlink(f"/proc/self/ns/{n}") for n in cfg["namespaces"]}}
out["sid"] = os.getsid(0)  # 0: the session's leader is outside its pid namespace
status = dict(line.split(":\t", 1) for line in open("/proc/self/status") if ":\t" in line)
out["caps"] = {k: status[k].strip() for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")}
out["no_new_privs"] = status["NoNewPrivs"].strip()
libc = ctypes.CDLL(None, use_errno=True)
pid = os.fork()
if pid == 0:
    os._exit(0 if libc.unshare(0x10000000) == 0 else ctypes.get_errno())  # CLONE_NEWUSER
code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
out["user_namespace"] = errno.errorcode.get(code, "made")
out["cwd"] = os.getcwd()
out["env"] = {k: os.environ.get(k) for k in ("PATH", "TMPDIR", "AGENTOS_PROBE")}
mounts = {}
for line in open("/proc/self/mountinfo"):
    fields = line.split()
    rest = fields[fields.index("-") + 1 :]
    mounts[fields[4]] = {"options": fields[5].split(","), "type": rest[0]}
out["mounts"] = mounts

def wrote(directory):
    try:
        with open(os.path.join(directory, "written-inside"), "w") as fh:
            fh.write("inside\n")
        return "written"
    except OSError as exc:
        return errno.errorcode[exc.errno]

out["writes"] = {d: wrote(d) for d in cfg["dirs"]}
try:
    with open(cfg["file"], "a") as fh:
        fh.write("inside\n")
    out["file_write"] = "written"
except OSError as exc:
    out["file_write"] = errno.errorcode[exc.errno]
out["file"] = open(cfg["file"]).read()
out["listing"] = {d: sorted(os.listdir(d)) for d in cfg["listed"]}
out["nulls"] = {f: os.stat(f).st_rdev for f in cfg["nulls"]}
out["dev"] = {}
for n in os.listdir("/dev"):
    p = f"/dev/{n}"
    out["dev"][n] = os.readlink(p) if os.path.islink(p) else oct(os.stat(p).st_mode)
out["ptmx"] = oct(os.stat("/dev/pts/ptmx").st_mode & 0o777)
out["modes"] = {p: oct(os.stat(p).st_mode & 0o7777) for p in ("/", "/tmp", cfg["home"])}
out["sizes"] = {p: os.statvfs(p).f_blocks * os.statvfs(p).f_frsize for p in ("/tmp", cfg["home"])}
out["links"] = {p: os.readlink(p) for p in cfg["links"]}
out["old"] = sorted(os.listdir("/.old")) if os.path.exists("/.old") else None
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen(1)
socket.create_connection(server.getsockname(), 5).close()
out["loopback"] = "up"
print(json.dumps(out))
"""


def seen_inside(backend: str, tmp_path: Path, *, network: bool, disk: int | None) -> dict[str, Any]:
    """What a process confined by ``backend`` reports of itself, and the lab around it."""
    from dataclasses import replace

    from agentos.sandbox import SandboxSettings, choose, policy
    from agentos.sandbox.view import kept_from_others, system_mounts

    lab = tmp_path / f"lab-{backend}-{network}"
    work, shown, home, persistent = lab / "work", lab / "shown", lab / "home", lab / "persistent"
    hidden = shown / "hidden"
    for d in (work, hidden, home, persistent):
        d.mkdir(parents=True)
    (hidden / "secret.txt").write_text("hidden\n")
    shown_file = lab / "shown.txt"  # a file shown alone, not a directory
    shown_file.write_text("shown\n")
    pol = policy(
        settings=SandboxSettings(network=network, disk=disk),
        package=None,
        hidden=[hidden],
        writable=[work],
        readable=[shown, shown_file],
        home=home,
        home_dir=None if disk else persistent,
        cwd=work,
    )
    pol = replace(pol, extra_env={"AGENTOS_PROBE": "it's $HOME; `not run`"})
    guarded = kept_from_others()
    cfg = {
        "namespaces": ["user", "pid", "ipc", "uts", "net", "cgroup", "mnt"],
        "dirs": [str(d) for d in (work, shown, hidden, home, "/", "/tmp", "/etc", "/usr")]
        + ["/dev/shm"],
        "file": str(shown_file),
        "listed": [str(hidden), *(str(p) for p, is_dir in guarded if is_dir)],
        "nulls": [str(p) for p, is_dir in guarded if not is_dir],
        "home": str(home),
        "links": [str(m.path) for m in system_mounts() if m.kind == "link"],
    }
    sandbox = choose(SandboxSettings.model_validate({"backend": backend}))
    argv = sandbox.command(pol, [SYSTEM_PYTHON, "-I", "-c", INSIDE, json.dumps(cfg)])
    root = sorted(os.listdir("/"))
    out = subprocess.run(
        argv, capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"}, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert sorted(os.listdir("/")) == root  # the view is made in its own root, not the host's
    return {
        "inside": json.loads(out.stdout),
        "cfg": cfg,
        "work": work,
        "shown": shown,
        "hidden": hidden,
        "home": home,
        "persistent": persistent,
        "shown_file": shown_file,
    }


def plain_policy(
    tmp_path: Path,
    work: Path,
    *,
    hidden: list[Path] | None = None,
    readable: list[Path] | None = None,
    cwd: Path | None = None,
) -> Policy:
    """A default-settings policy writing ``work`` only, its home in ``tmp_path``."""
    from agentos.sandbox import SandboxSettings, policy

    return policy(
        settings=SandboxSettings(),
        package=None,
        hidden=hidden or [],
        writable=[work],
        readable=readable or [],
        home=tmp_path / "home",
        home_dir=None,
        cwd=cwd or work,
    )


def host_namespaces() -> dict[str, str]:
    names = ("user", "pid", "ipc", "uts", "net", "cgroup", "mnt")
    return {n: os.readlink(f"/proc/self/ns/{n}") for n in names}


@pytest.mark.parametrize("backend", BACKENDS)
def test_each_backend_confines_a_process_as_its_policy_says(backend: str, tmp_path: Path) -> None:
    """The namespaces, session, capabilities, directory, variables, file system and /dev a
    backend gives a process, seen by that process (and its writes, seen from the host)."""
    from agentos.sandbox.view import kept_from_others

    got = seen_inside(backend, tmp_path, network=False, disk=64 << 20)
    inside, cfg = got["inside"], got["cfg"]
    host = host_namespaces()
    own = ["user", "pid", "ipc", "uts", "net", "mnt"] + (["cgroup"] if backend == "bwrap" else [])
    assert [n for n in own if inside["ns"][n] == host[n]] == []
    assert inside["sid"] != 0  # a session of its own: not the caller's terminal's
    assert set(inside["caps"].values()) == {"0000000000000000"}
    assert inside["no_new_privs"] == "1"
    assert inside["user_namespace"] in ("ENOSPC", "EPERM")  # no namespace of its own to make
    assert inside["cwd"] == str(got["work"])
    assert inside["env"] == {  # the caller's PATH (the setup's own is the system's)
        "PATH": "/usr/bin:/bin",
        "TMPDIR": "/tmp",
        "AGENTOS_PROBE": "it's $HOME; `not run`",
    }
    work, shown, hidden, home = (str(got[k]) for k in ("work", "shown", "hidden", "home"))
    assert inside["writes"] == {
        work: "written",
        shown: "EROFS",
        hidden: "EROFS",
        home: "written",
        "/": "EROFS",
        "/tmp": "written",
        "/etc": "EROFS",
        "/usr": "EROFS",
        "/dev/shm": "written",
    }
    assert (got["work"] / "written-inside").read_text() == "inside\n"
    assert not (got["shown"] / "written-inside").exists()
    assert (inside["file_write"], inside["file"]) == ("EROFS", "shown\n")
    assert got["shown_file"].read_text() == "shown\n"
    # What is hidden is empty; what the system keeps from others is empty or /dev/null.
    assert inside["listing"] == {d: [] for d in cfg["listed"]}
    assert (got["hidden"] / "secret.txt").exists()
    dev_null = os.stat("/dev/null").st_rdev
    assert inside["nulls"] == {f: dev_null for f in cfg["nulls"]}
    assert cfg["nulls"] == [str(p) for p, is_dir in kept_from_others() if not is_dir]
    # The home and /tmp: empty, private, the size of the disk quota.
    assert inside["sizes"] == {"/tmp": 64 << 20, home: 64 << 20}
    assert not (got["home"] / "written-inside").exists()
    mounts = inside["mounts"]
    for ro in ("/", "/proc/sys", "/proc/irq", "/proc/bus", "/usr", "/etc", shown, hidden):
        assert "ro" in mounts[ro]["options"], (ro, mounts[ro])
    for rw in (work, home, "/tmp", "/proc"):
        assert "rw" in mounts[rw]["options"], (rw, mounts[rw])
    assert (mounts["/proc"]["type"], mounts["/dev/pts"]["type"]) == ("proc", "devpts")
    assert inside["links"] == {p: os.readlink(p) for p in cfg["links"]}
    assert inside["old"] in (None, [])  # nothing of the host's root is left
    assert inside["loopback"] == "up"
    devices = {n: "0o20666" for n in ("null", "zero", "full", "random", "urandom", "tty")}
    links = {
        "fd": "/proc/self/fd",
        "stdin": "/proc/self/fd/0",
        "stdout": "/proc/self/fd/1",
        "stderr": "/proc/self/fd/2",
        "ptmx": "pts/ptmx",
    }
    assert {n: inside["dev"].get(n) for n in [*devices, *links]} == {**devices, **links}
    assert inside["ptmx"] == "0o666"
    if backend == "unshare":  # the mount script's own options
        assert set(inside["dev"]) == {*devices, *links, "pts", "shm"}
        assert inside["modes"] == {"/": "0o755", "/tmp": "0o1777", home: "0o1777"}
        assert inside["dev"]["shm"] == "0o41777"
        assert "nosuid" in mounts["/dev"]["options"]
        assert {"nosuid", "nodev"} <= set(mounts["/dev/shm"]["options"])
        assert {"nosuid", "nodev", "noexec"} <= set(mounts["/proc"]["options"])


@pytest.mark.parametrize("backend", BACKENDS)
def test_each_backend_shares_the_network_and_binds_a_home_when_the_policy_says(
    backend: str, tmp_path: Path
) -> None:
    got = seen_inside(backend, tmp_path, network=True, disk=None)
    inside = got["inside"]
    home = str(got["home"])

    assert inside["ns"]["net"] == host_namespaces()["net"]
    assert inside["ns"]["mnt"] != host_namespaces()["mnt"]
    assert inside["writes"][home] == "written"
    assert (got["persistent"] / "written-inside").read_text() == "inside\n"
    assert "rw" in inside["mounts"][home]["options"]
    assert inside["writes"]["/tmp"] == "written"
    assert inside["mounts"]["/tmp"]["type"] == "tmpfs"


@pytest.mark.parametrize("backend", BACKENDS)
def test_what_a_sandbox_runs_dies_with_the_program_that_started_it(
    backend: str, tmp_path: Path
) -> None:
    """bwrap's --die-with-parent, unshare's --kill-child: the sandbox's program killed
    (SIGKILL: nothing of its own runs), what it ran is gone too."""
    from agentos.sandbox import SandboxSettings, choose

    work = tmp_path / "work"
    work.mkdir()
    pol = plain_policy(tmp_path, work)
    marker = f"agentos-orphan-{uuid.uuid4().hex[:12]}"
    sandbox = choose(SandboxSettings.model_validate({"backend": backend}))
    argv = sandbox.command(pol, ["/bin/bash", "-c", f"exec -a {marker} sleep 600"])
    proc = subprocess.Popen(argv, env={"PATH": "/usr/bin:/bin"})
    try:
        wait_until(lambda: processes_named(marker), what="the confined process")
        # (/bin/sh has exec'd the sandbox's program by then: the process is bwrap or unshare)
        assert Path(f"/proc/{proc.pid}/exe").resolve().name == backend
        proc.kill()
        proc.wait()
        wait_until(lambda: processes_named(marker) == [], what="the confined process gone")
    finally:
        proc.kill()
        proc.wait()
        for pid in processes_named(marker):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_view_that_cannot_be_made_is_never_run(backend: str, tmp_path: Path) -> None:
    """A step of the view that fails (here a hidden path that is a file: no empty directory
    can cover it) stops the sandbox before the process starts: it never runs with part of
    its view missing (the secret shown)."""
    from agentos.sandbox import SandboxSettings, choose

    work, shown = tmp_path / "work", tmp_path / "shown"
    work.mkdir()
    shown.mkdir()
    secret = shown / "secret.txt"
    secret.write_text("secret\n")
    pol = plain_policy(tmp_path, work, hidden=[secret], readable=[shown])
    sandbox = choose(SandboxSettings.model_validate({"backend": backend}))
    argv = sandbox.command(pol, ["/bin/sh", "-c", f"cat {secret}; echo ran > {work}/ran"])

    out = subprocess.run(
        argv, capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"}, timeout=120
    )

    assert out.returncode != 0
    assert "secret" not in out.stdout and not (work / "ran").exists()
    assert str(secret) in out.stderr  # the step that failed names the path


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_working_directory_that_is_gone_is_named_by_the_sandbox(
    backend: str, tmp_path: Path
) -> None:
    """The process never starts elsewhere, and the one line that says why comes from the
    sandbox (bwrap, or the unshare backend's setup, ``agentos-sandbox``), not the program."""
    from agentos.sandbox import SandboxSettings, choose

    work = tmp_path / "work"
    work.mkdir()
    gone = tmp_path / "gone"
    pol = plain_policy(tmp_path, work, cwd=gone)
    sandbox = choose(SandboxSettings.model_validate({"backend": backend}))

    out = subprocess.run(
        sandbox.command(pol, ["/bin/echo", "ran"]),
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
        timeout=120,
    )

    assert out.returncode != 0 and out.stdout == ""
    (line,) = out.stderr.splitlines()
    who = "bwrap" if backend == "bwrap" else "agentos-sandbox"
    assert line.startswith(f"{who}: ") and str(gone) in line, line


# --- the policy itself -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "workspace, package, network, egress",
    [
        (False, None, False, ()),
        (True, None, True, ()),
        (True, {"network": False}, False, ()),
        (False, {"network": True}, True, ()),
        (True, {"network": ["api.example.com:443"]}, False, ("api.example.com:443",)),
    ],
    ids=["workspace-off", "workspace-on", "package-off", "package-on", "package-hosts"],
)
def test_a_packages_network_setting_comes_before_the_workspaces(
    tmp_path: Path,
    workspace: bool,
    package: dict[str, Any] | None,
    network: bool,
    egress: tuple[str, ...],
) -> None:
    from agentos.sandbox import PackageSandbox, SandboxSettings, policy

    pol = policy(
        settings=SandboxSettings(network=workspace),
        package=None if package is None else PackageSandbox.model_validate(package),
        hidden=[],
        writable=[tmp_path],
        readable=[],
        home=tmp_path / "home",
        home_dir=None,
        cwd=tmp_path,
    )
    assert (pol.network, pol.egress) == (network, egress)


def test_a_policy_names_each_path_once_and_only_what_is_there(tmp_path: Path) -> None:
    """What is shown again whole is not hidden, what does not exist is not shown, and a
    check's own limits come before its package's, which come before the workspace's."""
    from agentos.sandbox import Limits, PackageSandbox, SandboxSettings, policy
    from agentos.sandbox.limits import Resolved

    work, shown, hidden, home, kept = (tmp_path / n for n in ("work", "shown", "h", "home", "k"))
    for d in (work, shown, hidden, home, kept):
        d.mkdir()
    (home / ".gitconfig").write_text("[user]\n")
    package = PackageSandbox(read=["~/.gitconfig", "~/.netrc"], cpu=10, processes=20)

    pol = policy(
        settings=SandboxSettings(),
        package=package,
        hidden=[hidden, work, shown, hidden],
        writable=[work, work],
        readable=[shown, tmp_path / "missing", shown],
        home=home,
        home_dir=kept,
        cwd=work,
        limits=Limits(processes=7),
    )

    assert pol == Policy(
        network=False,
        hidden=(hidden,),
        readable=(shown,),
        writable=(work,),
        home=home,
        home_dir=kept,
        home_reads=(home / ".gitconfig",),
        limits=Resolved(memory=4 << 30, cpu=10, processes=7, file_size=4 << 30, disk=8 << 30),
        cwd=work,
    )


def test_each_limit_is_the_workspaces_unless_an_override_sets_it_the_last_one_winning() -> None:
    from agentos.sandbox import Limits, SandboxSettings, resolve_limits
    from agentos.sandbox.limits import Resolved

    settings = SandboxSettings(
        memory=1 << 30, cpu=60, processes=100, file_size=1 << 20, disk=1 << 25
    )
    assert resolve_limits(settings) == Resolved(1 << 30, 60, 100, 1 << 20, 1 << 25)
    overrides = [None, Limits(cpu=5, memory=None), None, Limits(cpu=9, disk=123)]
    assert resolve_limits(settings, *overrides) == Resolved(None, 9, 100, 1 << 20, 123)


@pytest.mark.parametrize(
    "egress, home_dir, network",
    [((), None, True), (("api.example.com",), Path("/kept"), ["api.example.com"])],
    ids=["network-and-an-empty-home", "hosts-and-a-persistent-home"],
)
def test_a_receipt_records_a_policys_network_writes_home_and_limits(
    egress: tuple[str, ...], home_dir: Path | None, network: object
) -> None:
    from agentos.sandbox.limits import Resolved

    pol = Policy(
        network=not egress,
        egress=egress,
        hidden=(Path("/h"),),
        readable=(Path("/r"),),
        writable=(Path("/w"), Path("/io")),
        home=Path("/home/u"),
        home_dir=home_dir,
        home_reads=(Path("/home/u/.claude"),),
        limits=Resolved(1, 2.5, 3, 4, 5),
        cwd=Path("/w"),
    )
    assert pol.as_dict() == {
        "network": network,
        "writable": ["/w", "/io"],
        "home": "empty" if home_dir is None else "persistent",
        "home_reads": ["/home/u/.claude"],
        "limits": {"memory": 1, "cpu": 2.5, "processes": 3, "file_size": 4, "disk": 5},
    }


def test_a_bin_directory_brings_along_what_its_programs_load_and_nothing_else(
    tmp_path: Path,
) -> None:
    from agentos.sandbox.policy import tool_root

    home = tmp_path / "home"
    made = {
        "tools/node_modules/.bin": [],
        "venv/bin": ["pyvenv.cfg"],
        "prefix/bin": ["lib/"],
        "prefix/sbin": [],
        "checkout/bin": ["lib/", ".git/"],
        "workspace/bin": ["lib/", ".agentos/"],
        "settled/bin": ["lib/", "agentos.yaml"],
        "plain/bin": [],
        "libless/bin": ["lib"],  # a file named lib
        "home/.pyenv/shims": [],
        "home/.local/bin": ["lib/"],
        "home/.cargo/bin": ["lib/"],
        "home/bin": [],
    }
    for name, beside in made.items():
        (tmp_path / name).mkdir(parents=True)
        for entry in beside:
            path = tmp_path / name / ".." / entry
            path.mkdir() if entry.endswith("/") else path.write_text("")
    found = {name: tool_root(tmp_path / name, home) for name in made}
    assert found == {
        "tools/node_modules/.bin": [tmp_path / "tools/node_modules"],
        "venv/bin": [tmp_path / "venv"],
        "prefix/bin": [tmp_path / "prefix"],
        "prefix/sbin": [tmp_path / "prefix"],
        "checkout/bin": [],
        "workspace/bin": [],
        "settled/bin": [],
        "plain/bin": [],
        "libless/bin": [],
        "home/.pyenv/shims": [home / ".pyenv"],
        "home/.local/bin": [home / ".local/lib"],
        "home/.cargo/bin": [],
        "home/bin": [],
    }
    assert tool_root(tmp_path / "prefix/lib", home) == []
    assert tool_root(Path("/bin"), home) == []  # never the whole machine


def test_the_paths_a_process_needs_start_with_its_absolute_path_entries_and_their_tools(
    tmp_path: Path,
) -> None:
    from agentos.sandbox import runtime_paths

    home = tmp_path / "home"
    for name in (".local/bin", ".local/lib", ".cargo/bin"):
        (home / name).mkdir(parents=True)
    path_env = f"{home}/.local/bin:bin:/:{home}/.cargo/bin:{tmp_path}/gone"
    found = runtime_paths(path_env, home, [tmp_path])
    assert found[:3] == [home / ".local/bin", home / ".local/lib", home / ".cargo/bin"]
    assert found[-1] == tmp_path
    assert Path("/") not in found and tmp_path / "gone" not in found


def test_a_path_is_inside_the_roots_it_equals_or_lies_under() -> None:
    from agentos.sandbox.policy import inside_any

    roots = [Path("/srv/a"), Path("/opt")]
    assert [inside_any(Path(p), roots) for p in ("/opt", "/srv/a/b", "/srv", "/srv/ab")] == [
        True,
        True,
        False,
        False,
    ]
