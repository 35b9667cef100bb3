"""The terminal UI (issue 22), driven headless by Textual's own pilot against real runs
(real tmux, git and the guardian daemon)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from _guardian_fixtures import configure
from conftest import add_agent, git, make_repo, needs_tmux, wait_until
from test_dashboard import add_fix_it_workflow

from agentos.run import control
from agentos.run.orchestrator import RunOptions
from agentos.run.store import AgentStatus, RunStatus
from agentos.workspace.layout import Workspace

pytest.importorskip("textual", reason="the tui extra is not installed (scripts/setup does)")

from textual.widgets import DataTable, Log

from agentos.cli._tui import AgentOSApp, LaunchScreen

pytestmark = [needs_tmux, pytest.mark.usefixtures("tmux_socket")]

TICKER = "echo underway > progress.txt\nfor i in $(seq 1 300); do echo tick $i; sleep 0.2; done\n"


@pytest.fixture
def guarded(ws: Workspace) -> Iterator[Workspace]:
    """The workspace with a fast guardian, stopped after the test."""
    from agentos.guardian.daemon import stop

    ws = configure(ws, run={"guardian": True})
    try:
        yield ws
    finally:
        stop(ws)


async def until(pilot: Any, predicate: Callable[[], Any], what: str, timeout: float = 60) -> Any:
    """Let the app run until ``predicate`` holds (the app refreshes itself)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        await pilot.pause(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def rows(app: AgentOSApp) -> list[list[str]]:
    table = app.query_one("#runs", DataTable)
    return [[str(c) for c in table.get_row_at(y)] for y in range(table.row_count)]


def test_the_tui_shows_a_live_run_its_agent_and_health_and_the_cancel_key_cancels_it(
    guarded: Workspace, tmp_path: Path, backend: str
) -> None:
    """On SQLite the TUI reads the state every half second; on PostgreSQL it is woken by
    each event the state announces (and reads the guardian's word every few seconds)."""
    from agentos.guardian import SUPERVISOR

    ws = guarded
    add_agent(ws, tmp_path, "ticker", TICKER)
    repo = make_repo(tmp_path / "repo")
    run_id, _ = control.start_detached(
        ws, "ticker-task", repo, RunOptions(force=True), supervisor=SUPERVISOR
    )
    wait_until(
        lambda: (ws.worktrees_dir / run_id / "ticker" / "progress.txt").exists(),
        what="the agent at work",
    )

    async def drive() -> list[list[str]]:
        app = AgentOSApp(ws, repo)
        async with app.run_test(size=(180, 50)) as pilot:
            row = await until(
                pilot,
                lambda: next((r for r in rows(app) if r[0] == run_id and r[4] == "healthy"), None),
                "the run, its agent and the guardian's word on its health",
            )
            assert row[1:4] == ["running", "ticker", "running"]
            output = app.query_one("#output", Log)
            await until(pilot, lambda: "tick" in "\n".join(output.lines), "the agent's output")
            await until(pilot, lambda: app.query_one("#events", Log).lines, "recent events")

            await pilot.press("c")
            await until(
                pilot,
                lambda: any(r[0] == run_id and r[1] == r[3] == "cancelled" for r in rows(app)),
                "the run and its agent shown cancelled",
            )
            return rows(app)

    shown = asyncio.run(drive())

    record = control.status(ws, run_id)
    assert record.status is RunStatus.CANCELLED
    assert [(a.agent, a.status) for a in record.agents] == [("ticker", AgentStatus.CANCELLED)]
    assert [r[:4] for r in shown if r[0] == run_id] == [
        [run_id, "cancelled", "ticker", "cancelled"]
    ]
    kept = git(repo, "show", f"agentos/{run_id}/ticker:progress.txt")
    assert kept.strip() == "underway"  # the work stays on the agent's branch


def test_the_launch_key_opens_a_workflows_form_and_launches_it(
    ws: Workspace, tmp_path: Path
) -> None:
    repo = add_fix_it_workflow(ws, tmp_path)

    async def drive() -> str:
        from textual.widgets import Checkbox, Select, TextArea

        app = AgentOSApp(ws, repo)
        async with app.run_test(size=(180, 50)) as pilot:
            await pilot.press("w")
            screen = await until(
                pilot, lambda: isinstance(app.screen, LaunchScreen) and app.screen, "the form"
            )
            screen.query_one("#workflow", Select).value = "fix-it"
            await pilot.pause(0.2)
            screen.query_one("TextArea", TextArea).text = "uploads time out"
            screen.query_one("Checkbox", Checkbox).value = True
            await pilot.click("#launch")
            await until(pilot, lambda: not isinstance(app.screen, LaunchScreen), "the launch")
            assert app.launched is not None
            return str(app.launched["execution"])

    execution = asyncio.run(drive())

    from agentos.cli import views

    done = wait_until(
        lambda: (found := views.execution(ws, execution))["status"] != "running" and found,
        timeout=120,
        what="the execution to end",
    )
    assert [(t["description"], t["status"]) for t in done["tasks"]] == [
        ("Fix this: uploads time out (urgent: true)", "done")
    ]
