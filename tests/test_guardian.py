"""The guardian against real agents in real tmux panes: hangs, deaths, chatter, prompts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from _guardian_fixtures import FAST, configure, interventions, launch
from conftest import needs_tmux, tmux_sessions, wait_until

from agentos.guardian.daemon import CycleReport, Guardian, run
from agentos.guardian.monitor import last_health
from agentos.receipts import read_receipt, verify_chain
from agentos.run.sessions import Sessions
from agentos.run.store import RunStore
from agentos.workspace.layout import Workspace

pytestmark = [needs_tmux, pytest.mark.usefixtures("tmux_socket")]

SILENT = 'read line; echo "got: $line" >> nudges.txt; sleep 600\n'
PRINTER = 'i=0; while true; do i=$((i+1)); echo "working on step $i"; sleep 0.1; done\n'


@contextmanager
def guardian(ws: Workspace) -> Iterator[list[CycleReport]]:
    """The guardian's loop in a thread of this process, for the test's duration."""
    reports: list[CycleReport] = []
    stop = threading.Event()
    thread = threading.Thread(
        target=run, args=(ws,), kwargs={"stop": stop, "on_cycle": reports.append}
    )
    thread.start()
    try:
        yield reports
    finally:
        stop.set()
        thread.join(30)


def actions(ws: Workspace, run_id: str | None = None) -> list[str]:
    return [action for _agent, action, _receipt in interventions(ws, run_id)]


def top_level(receipt: str) -> dict[str, str]:
    """A receipt's unindented ``key: value`` lines."""
    return dict(
        line.split(": ", 1)
        for line in receipt.splitlines()
        if ": " in line and not line.startswith(" ")
    )


def health_of(ws: Workspace, session: str) -> str | None:
    return (last_health(ws).get(session) or {}).get("health")


def test_a_silent_hanging_agent_is_nudged_restarted_then_killed(
    ws: Workspace, tmp_path: Path, tmux_socket: str
) -> None:
    # Thresholds no test waits out: the cycles' clock is stepped, and each step waits for
    # what the agent does (reads a nudge, starts again), never for time to pass.
    ws = configure(ws, {"stuck_after": 600, "kill_after": 900}, run={"timeout": 86400})
    agent = launch(ws, tmp_path, "hanger", SILENT)
    banner = "== AgentOS: hanger attempt 1 =="
    wait_until(lambda: banner in agent.files.log.read_text(), what="the agent started")
    nudges = agent.worktree / "nudges.txt"

    def read(path: Path) -> str:
        return path.read_text() if path.exists() else ""

    def pane(session: str) -> str:
        return Sessions(ws.root).capture(session)

    g = Guardian(ws)
    try:
        now = time.time()
        assert [a["action"] for a in g.cycle(now=now).agents] == ["none"]
        now += 601  # silent for longer than stuck_after
        assert [a["action"] for a in g.cycle(now=now).agents] == ["nudge"]
        wait_until(lambda: read(nudges).count("got:") == 1, what="the nudge read")
        now += 601  # still silent, stuck_after after the nudge
        assert [a["action"] for a in g.cycle(now=now).agents] == ["restart"]
        wait_until(lambda: read(agent.files.log).count(banner) == 2, what="the agent again")
        # and its pane shows it (the pane's tail of the log lags the log under load: a
        # banner that reached the pane only after the next look is output there)
        wait_until(lambda: pane(agent.session).count(banner) >= 2, what="the pane again")
        now += 1  # the restart printed: output, so healthy
        assert [(a["health"], a["action"]) for a in g.cycle(now=now).agents] == [
            ("healthy", "none")
        ]
        now += 601
        assert [a["action"] for a in g.cycle(now=now).agents] == ["nudge"]
        wait_until(lambda: read(nudges).count("got:") == 2, what="the second nudge read")
        now += 300  # kill_after of silence, but less than stuck_after since the nudge
        assert [a["action"] for a in g.cycle(now=now).agents] == ["none"]
        now += 301  # stuck_after since the nudge, the restart spent: killed
        assert [a["action"] for a in g.cycle(now=now).agents] == ["kill"]
        now += 1
        assert [a["health"] for a in g.cycle(now=now).agents] in ([], ["dead"])
    finally:
        g.close()

    assert actions(ws) == ["nudge", "restart", "nudge", "kill"]
    # Each nudge was typed into the pane: the agent read it from its terminal, and the
    # restarted agent (same worktree, same command) read the second one.
    assert (agent.worktree / "nudges.txt").read_text() == (f"got: {FAST['nudge']}\n" * 2)
    assert agent.files.log.read_text().count("== AgentOS: hanger attempt 1 ==") == 2
    # The kill: the orchestrator's stop marker holds the reason, the session is gone.
    assert agent.files.stopped.read_text().startswith("no output for ")
    assert agent.session not in tmux_sessions(tmux_socket)
    store = RunStore(ws)
    assert store.get(agent.run_id).agents[0].restarts == 1
    store.close()
    # Every intervention is a receipt of the run, in the chain.
    receipts = [top_level(read_receipt(ws, rid)) for _a, _act, rid in interventions(ws)]
    assert [(r["kind"], r["run"], r["agent"], r["action"], r["ok"]) for r in receipts] == [
        ("guardian", agent.run_id, "hanger@1.0.0", action, "true")
        for action in ("nudge", "restart", "nudge", "kill")
    ]
    assert receipts[1]["restarts"] == "1" and receipts[3]["reason"].startswith("no output")
    assert verify_chain(ws) == []


@pytest.mark.parametrize(
    "tmpdir", ["relative/sockets", "/nonexistent/agentos-sockets"], ids=["relative", "missing"]
)
def test_a_live_agent_is_seen_alive_when_TMUX_TMPDIR_names_a_folder_tmux_passes_over(
    ws: Workspace, tmp_path: Path, tmux_socket: str, monkeypatch: pytest.MonkeyPatch, tmpdir: str
) -> None:
    """tmux puts its socket in $TMUX_TMPDIR only when that is an absolute folder that
    exists, else in /tmp: the agent's session is there, and AgentOS must see it (a run's
    driver takes a session it cannot see for an agent that died, the guardian restarts it)."""
    monkeypatch.setenv("TMUX_TMPDIR", tmpdir)
    ws = configure(ws, {"stuck_after": 600}, run={"timeout": 86400})
    agent = launch(ws, tmp_path, "sleeper", "echo started\nsleep 600\n")
    wait_until(lambda: "started" in agent.files.log.read_text(), what="the agent started")
    assert agent.session in tmux_sessions(tmux_socket)  # tmux has it

    assert Sessions(ws.root).exists(agent.session)
    g = Guardian(ws)
    try:
        assert [(a["health"], a["action"]) for a in g.cycle().agents] == [("healthy", "none")]
    finally:
        g.close()
    assert actions(ws) == []


def test_a_dead_agent_is_seen_dead_by_the_next_cycle(
    ws: Workspace, tmp_path: Path, tmux_socket: str
) -> None:
    ws = configure(ws)
    agent = launch(ws, tmp_path, "dier", "echo starting\nsleep 600\n")
    wait_until(lambda: "starting" in Sessions(ws.root).capture(agent.session))
    g = Guardian(ws)
    first = g.cycle()
    assert [a["health"] for a in first.agents] == ["healthy"]
    pane_pid = next(p.pane_pid for p in Sessions(ws.root).panes())
    assert pane_pid is not None
    os.kill(pane_pid, signal.SIGKILL)  # the wrapper dies: no exit status is ever written
    wait_until(lambda: agent.session not in tmux_sessions(tmux_socket))

    second = g.cycle()  # the very next cycle, one interval later

    assert [(a["health"], a["action"]) for a in second.agents] == [("dead", "none")]
    assert health_of(ws, agent.session) == "dead"
    assert "without an exit status" in last_health(ws)[agent.session]["reason"]
    assert actions(ws) == []  # the orchestrator counts it as a failed attempt and retries
    g.close()


def test_a_dead_pane_that_tmux_keeps_is_restarted_in_its_session(
    ws: Workspace, tmp_path: Path, tmux_socket: str
) -> None:
    ws = configure(ws, {"stuck_after": 600, "kill_after": 900})
    agent = launch(ws, tmp_path, "phoenix", 'echo "life $(date +%s%N)" >> lives.txt\nsleep 600\n')
    wait_until(lambda: (agent.worktree / "lives.txt").exists())
    subprocess.run(
        [
            "tmux",
            "-L",
            tmux_socket,
            "set-option",
            "-w",
            "-t",
            f"={agent.session}:",
            "remain-on-exit",
            "on",
        ],
        check=True,
    )
    pane_pid = next(p.pane_pid for p in Sessions(ws.root).panes())
    assert pane_pid is not None
    os.kill(pane_pid, signal.SIGKILL)
    wait_until(lambda: all(p.dead for p in Sessions(ws.root).panes()))

    g = Guardian(ws)
    report = g.cycle()
    g.close()

    assert [(a["health"], a["action"]) for a in report.agents] == [("dead", "restart")]
    wait_until(
        lambda: len((agent.worktree / "lives.txt").read_text().splitlines()) == 2,
        what="the agent running again",
    )
    assert [p.dead for p in Sessions(ws.root).panes()] == [False]
    assert actions(ws) == ["restart"]


def test_an_agent_that_keeps_printing_is_left_alone(ws: Workspace, tmp_path: Path) -> None:
    # Each cycle's clock is stuck_after past the last; between cycles the test waits for the
    # agents to print, so every cycle has new output to see, and a guardian that missed it
    # would nudge.
    ws = configure(ws, {"stuck_after": 600}, run={"timeout": 86400})
    chatty = launch(ws, tmp_path, "chatty", PRINTER)
    # The same line over and over: the screen looks the same once full, the log still grows.
    parrot = launch(
        ws, tmp_path, "parrot", "while true; do echo same; sleep 0.02; done\n", run_id=chatty.run_id
    )
    agents = (chatty, parrot)
    wait_until(lambda: all(a.files.log.exists() for a in agents), what="both started")

    def sizes() -> list[int]:
        return [a.files.log.stat().st_size for a in agents]

    g = Guardian(ws)
    try:
        now = time.time()
        for _ in range(5):
            report = g.cycle(now=now)
            assert [(a["health"], a["action"]) for a in report.agents] == [("healthy", "none")] * 2
            seen = sizes()

            def grew(seen: list[int] = seen) -> bool:
                return all(n > o for n, o in zip(sizes(), seen, strict=True))

            wait_until(grew, what="more output")
            now += 601
    finally:
        g.close()
    assert actions(ws) == []
    assert {health_of(ws, chatty.session), health_of(ws, parrot.session)} == {"healthy"}


def test_a_silent_agent_with_a_fresh_heartbeat_is_healthy(ws: Workspace, tmp_path: Path) -> None:
    ws = configure(ws, {"stuck_after": 600}, run={"timeout": 86400})
    agent = launch(
        ws, tmp_path, "thinker", 'while true; do touch "$AGENTOS_HEARTBEAT_FILE"; sleep 0.2; done\n'
    )
    heartbeat = agent.files.heartbeat
    wait_until(heartbeat.exists, what="a first heartbeat")
    g = Guardian(ws)
    try:
        first = g.cycle()
        assert [a["health"] for a in first.agents] == ["healthy"]
        # Its last output is older than the heartbeat by more than a second: the clock is
        # put stuck_after past the output, but not past the heartbeat.
        since = heartbeat.stat().st_mtime
        wait_until(lambda: heartbeat.stat().st_mtime > since + 1, what="a later heartbeat")
        beat = heartbeat.stat().st_mtime
        report = g.cycle(now=beat + 599.5)
        assert [(a["health"], a["action"]) for a in report.agents] == [("healthy", "none")]
        silent = g.cycle(now=beat + 600.5)  # and the heartbeat too old: stuck after all
        assert [(a["health"], a["action"]) for a in silent.agents] == [("stuck", "nudge")]
    finally:
        g.close()


def test_an_agent_at_an_input_prompt_is_waiting_not_stuck(ws: Workspace, tmp_path: Path) -> None:
    ws = configure(ws, {"stuck_after": 600}, run={"timeout": 86400})
    dialog = (
        "printf '%s\\n' 'Bash command: make deploy' 'Do you want to proceed?' "
        "'> 1. Yes' '  2. No, and tell Claude what to do differently (esc)'\n"
        "sleep 600\n"
    )
    agent = launch(ws, tmp_path, "asker", dialog)
    wait_until(lambda: "Do you want to proceed?" in Sessions(ws.root).capture(agent.session))
    g = Guardian(ws)
    try:
        now = time.time()
        healths = []
        for _ in range(4):  # silent for stuck_after and more at each cycle after the first
            healths += [a["health"] for a in g.cycle(now=now).agents]
            now += 601
    finally:
        g.close()

    # Debounced: not waiting on the first sight of the prompt, never stuck while it shows.
    assert healths == ["healthy", "waiting", "waiting", "waiting"]
    assert actions(ws) == []
    assert "claude-code prompt" in last_health(ws)[agent.session]["reason"]


def test_agents_of_a_run_past_its_timeout_are_killed(
    ws: Workspace, tmp_path: Path, tmux_socket: str
) -> None:
    ws = configure(ws, run={"timeout": 60})
    agent = launch(ws, tmp_path, "slowpoke", PRINTER)
    store = RunStore(ws)
    store.update(agent.run_id, started_at=time.time() - 61)
    store.close()

    report = Guardian(ws).cycle()

    assert [(a["health"], a["action"], a["reason"]) for a in report.agents] == [
        ("healthy", "kill", "the run passed its timeout of 60s")
    ]
    assert agent.files.stopped.read_text() == "the run passed its timeout of 60s\n"
    assert tmux_sessions(tmux_socket) == []


def test_a_package_policy_overrides_the_workspace_policy(ws: Workspace, tmp_path: Path) -> None:
    ws = configure(ws, {"stuck_after": 600}, run={"timeout": 86400})
    patient = launch(
        ws,
        tmp_path,
        "patient",
        "sleep 600\n",
        guardian={"stuck_after": 3600, "nudge": "Still there?"},
    )
    eager = launch(ws, tmp_path, "eager", "sleep 600\n", run_id=patient.run_id)
    # Their logs exist before they start; their wrappers' first line says they did (output
    # written between the two cycles below would count as progress).
    wait_until(
        lambda: all("== AgentOS" in a.files.log.read_text() for a in (patient, eager)),
        what="both started",
    )
    g = Guardian(ws)
    try:
        now = time.time()
        g.cycle(now=now)
        g.cycle(now=now + 601)  # past the workspace's stuck_after, not the package's
    finally:
        g.close()
    assert actions(ws) == ["nudge"]

    assert interventions(ws)[0][0] == "eager"
    assert health_of(ws, patient.session) == "healthy"
    assert health_of(ws, eager.session) == "stuck"


def test_agentos_status_shows_each_agents_health_and_output_age(
    ws: Workspace, tmp_path: Path, cli: object
) -> None:
    ws = configure(ws)
    quiet = launch(ws, tmp_path, "quiet", "sleep 600\n")
    chatty = launch(ws, tmp_path, "chatty", PRINTER, run_id=quiet.run_id)
    g = Guardian(ws)
    wait_until(
        lambda: g.cycle() and health_of(ws, quiet.session) == "stuck", what="the quiet agent stuck"
    )
    g.close()

    out = cli("status", "--json")  # type: ignore[operator]
    assert out.returncode == 0, out.stderr
    (run_doc,) = json.loads(out.stdout)["runs"]
    health = run_doc["health"]
    assert health["quiet"]["health"] == "stuck" and health["quiet"]["output_age"] >= 1
    assert health["chatty"]["health"] == "healthy"
    assert health["chatty"]["output_age"] < health["quiet"]["output_age"]
    assert chatty.session in last_health(ws)
    table = cli("status")  # type: ignore[operator]
    assert "stuck" in table.stdout and "healthy" in table.stdout


def test_the_guardian_forgets_agents_once_their_run_ends(ws: Workspace, tmp_path: Path) -> None:
    ws = configure(ws)
    agent = launch(ws, tmp_path, "brief", PRINTER)
    g = Guardian(ws)
    g.cycle()
    assert agent.session in last_health(ws)
    store = RunStore(ws)
    store.update(agent.run_id, status="succeeded")
    store.close()

    assert g.cycle().agents == []
    g.close()
    assert last_health(ws) == {}


def test_a_real_run_whose_agent_hangs_fails_with_the_agent_killed(
    ws: Workspace, tmp_path: Path
) -> None:
    from conftest import make_repo, write_package

    from agentos.hub.store import Hub
    from agentos.run.orchestrator import start_run

    ws = configure(ws, run={"retries": 0, "guardian": False})
    Hub(ws.hub_dir).install(
        str(
            write_package(
                tmp_path / "src" / "sleeper", name="sleeper", files={"run.sh": "sleep 600\n"}
            )
        )
    )
    (ws.cards_dir / "sleeper.yaml").write_text(
        "id: sleeper-card\nagent: sleeper\ndescription: route to sleeper\ngroup: sleeper\n"
        "triggers: {keywords: [sleeper-task]}\n"
    )
    repo = make_repo(tmp_path / "repo")

    with guardian(ws):
        report = start_run(ws, "sleeper-task", repo, force=True)

    assert report.status == "failed", report.message
    assert report.message == "not done: sleeper (killed); nothing was merged"
    assert [(a.agent, a.status) for a in report.agents] == [("sleeper", "killed")]
    assert actions(ws, report.run_id) == ["nudge", "restart", "nudge", "kill"]
    assert RunStore(ws).get(report.run_id).agents[0].restarts == 1


def test_an_agent_whose_package_sets_a_longer_interval_is_checked_less_often(
    ws: Workspace, tmp_path: Path
) -> None:
    ws = configure(ws)
    slow = launch(ws, tmp_path, "slow", PRINTER, guardian={"interval": 3600})
    fast = launch(ws, tmp_path, "fast", PRINTER, run_id=slow.run_id)
    g = Guardian(ws)

    first, second = g.cycle(), g.cycle()
    g.close()

    assert sorted(a["agent"] for a in first.agents) == ["fast", "slow"]
    assert [a["agent"] for a in second.agents] == ["fast"]
    assert set(last_health(ws)) == {slow.session, fast.session}
