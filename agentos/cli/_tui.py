"""The terminal UI (``agentos tui``): a Textual application over the CLI's documents.

Runs and their agents (status, health, output age) on the left; the selected agent's
output, the stream's recent events and the selected run's receipts on the right. Keys:
``a`` attach to the agent's tmux session, ``c`` cancel the run, ``l`` its whole log,
``w`` launch a workflow from its launch template, ``q`` quit. It reads what the CLI reads
(:mod:`agentos.cli.views`) every :data:`REFRESH` seconds (on PostgreSQL: as the state
announces each event, and every :data:`HEALTH_REFRESH`) and has no logic of its own.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any, ClassVar

from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.coordinate import Coordinate
from textual.screen import ModalScreen
from textual.widgets import (
    Button,
    Checkbox,
    DataTable,
    Footer,
    Header,
    Input,
    Label,
    Log,
    Select,
    Static,
    TextArea,
)
from textual.worker import get_current_worker

from agentos.cli import views
from agentos.errors import AgentOSError
from agentos.run.events import event_line
from agentos.run.store import ACTIVE
from agentos.runtimes.usage import describe
from agentos.workspace.layout import Workspace

REFRESH = 0.5  # seconds between looks at the state (SQLite) and at the agent's output
HEALTH_REFRESH = 5.0  # on PostgreSQL, which announces events: seconds between other looks
OUTPUT_TAIL = 8 * 1024  # bytes of the selected agent's output shown
EVENTS_SHOWN = 30
RUNS_SHOWN = 30


class AgentOSApp(App[None]):
    """What runs, and the keys to act on it."""

    TITLE = "AgentOS"
    CSS = """
    #left { width: 3fr; }
    #right { width: 2fr; }
    #output { height: 2fr; border: round $primary; }
    #events { height: 1fr; border: round $secondary; }
    #receipts { height: auto; max-height: 6; border: round $secondary; }
    DataTable { height: 1fr; }
    """
    BINDINGS: ClassVar[list[Binding | tuple[str, str] | tuple[str, str, str]]] = [
        Binding("a", "attach", "Attach"),
        Binding("c", "cancel", "Cancel run"),
        Binding("l", "logs", "Logs"),
        Binding("w", "launch", "Launch workflow"),
        Binding("q", "quit", "Quit"),
    ]

    def __init__(self, ws: Workspace, repo: Path) -> None:
        super().__init__()
        self.ws = ws
        self.repo = repo
        self.rows: list[tuple[str, str, str | None]] = []  # (run, agent, session) per row
        self.last_event = 0
        self.launched: dict[str, Any] | None = None  # the last workflow launched from here
        # Whose receipts are shown, as of which of its events (read again only after a new one).
        self.receipts_of: tuple[str, int] | None = None
        self.run_events: dict[str, int] = {}  # run -> the id of its newest event seen
        self.output_shown: str | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal():
            with Vertical(id="left"):
                yield DataTable(id="runs", cursor_type="row", zebra_stripes=True)
            with Vertical(id="right"):
                yield Log(id="output", highlight=False)
                yield Log(id="events", highlight=False)
                yield Static("", id="receipts")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#runs", DataTable)
        table.add_columns(
            "run", "status", "agent", "agent status", "health", "output", "try", "used"
        )
        self.query_one("#output", Log).border_title = "output"
        self.query_one("#events", Log).border_title = "events"
        self.query_one("#receipts", Static).border_title = "receipts"
        self.refresh_all()
        if self.ws.state.shared:
            # The state announces each event: runs and events are read again then (and
            # every HEALTH_REFRESH, for the guardian's ages); the output is a file.
            self.set_interval(REFRESH, self._refresh_output)
            self.set_interval(HEALTH_REFRESH, self.refresh_all)
            self._follow()
        else:
            self.set_interval(REFRESH, self.refresh_all)

    @work(thread=True, exclusive=True, group="follow")
    def _follow(self) -> None:
        """Wait for the state to announce an event; then show it (and what changed)."""
        from agentos.run.store import RunStore, announces
        from agentos.state.database import EVENTS

        worker = get_current_worker()
        store = RunStore(self.ws)
        listener = store.listen(EVENTS)
        try:
            while not worker.is_cancelled:
                if announces(listener.wait(1.0), self.last_event, None):
                    self.call_from_thread(self.refresh_all)
        except AgentOSError as exc:
            self.call_from_thread(self.notify, str(exc), severity="error")
        finally:
            listener.close()
            store.close()

    def _refresh_output(self) -> None:
        try:
            self._refresh_selected()
        except AgentOSError as exc:
            self.notify(str(exc), severity="error")

    # -- what is shown ----------------------------------------------------------------------

    def refresh_all(self) -> None:
        try:
            self._refresh_runs()
            self._refresh_events()
            self._refresh_selected()
        except AgentOSError as exc:
            self.notify(str(exc), severity="error")

    def _refresh_runs(self) -> None:
        runs = views.runs(self.ws, RUNS_SHOWN)["runs"]
        health = {r["id"]: r["health"] for r in views.live(self.ws)["runs"]}
        table = self.query_one("#runs", DataTable)
        rows: list[tuple[str, str, str | None]] = []
        cells = []
        for r in runs:
            for a in r["agents"] or [{"agent": "", "status": "", "attempts": 0, "session": None}]:
                seen = (health.get(r["id"]) or {}).get(a["agent"]) or {}
                rows.append((r["id"], a["agent"], a.get("session")))
                age = seen.get("output_age")
                cells.append(
                    (
                        r["id"],
                        r["status"],
                        a["agent"],
                        a["status"],
                        seen.get("health", "unknown" if r["status"] in ACTIVE else ""),
                        "" if age is None else f"{age:g}s ago",
                        str(a["attempts"] or ""),
                        describe(a.get("usage")),
                    )
                )
        if rows == self.rows:
            for y, row in enumerate(cells):
                for x, value in enumerate(row):
                    table.update_cell_at(Coordinate(y, x), value)
            return
        where = table.cursor_row
        table.clear()
        for row in cells:
            table.add_row(*row)
        self.rows = rows
        if rows:
            table.move_cursor(row=min(max(where, 0), len(rows) - 1))

    def _refresh_events(self) -> None:
        if self.last_event:
            found = views.events(self.ws, self.last_event, limit=500)
        else:
            found = views.events(self.ws, limit=EVENTS_SHOWN)
        log = self.query_one("#events", Log)
        for event in found:
            log.write_line(event_line(event))
            self.last_event = int(event["id"])
            if event.get("run"):
                self.run_events[str(event["run"])] = self.last_event

    def _refresh_selected(self) -> None:
        selected = self.selected()
        output = self.query_one("#output", Log)
        receipts = self.query_one("#receipts", Static)
        if selected is None:
            output.clear()
            receipts.update("")
            return
        run_id, agent, _ = selected
        output.border_title = f"output of {agent or '(no agent)'} in {run_id}"
        text = self._tail(run_id, agent) if agent else ""
        if self.output_shown != text:
            output.clear()
            output.write(text)
            self.output_shown = text
        seen = (run_id, self.run_events.get(run_id, 0))
        if self.receipts_of != seen:  # receipts are written with events: none new, none new
            receipts.update(", ".join(views.run(self.ws, run_id)["receipts"]) or "(none yet)")
            self.receipts_of = seen

    def _tail(self, run_id: str, agent: str) -> str:
        path = self.ws.logs_dir / run_id / f"{agent}.log"
        try:
            size = path.stat().st_size
        except OSError:
            return ""
        return str(views.agent_log(self.ws, run_id, agent, max(0, size - OUTPUT_TAIL))["text"])

    def selected(self) -> tuple[str, str, str | None] | None:
        table = self.query_one("#runs", DataTable)
        if not self.rows or table.cursor_row < 0 or table.cursor_row >= len(self.rows):
            return None
        return self.rows[table.cursor_row]

    def on_data_table_row_highlighted(self, _: DataTable.RowHighlighted) -> None:
        self._refresh_selected()

    # -- keys -------------------------------------------------------------------------------

    def action_cancel(self) -> None:
        selected = self.selected()
        if selected is None:
            return
        self.notify(f"cancelling run {selected[0]}…")
        self._cancel(selected[0])

    @work(thread=True, exclusive=True, group="cancel")
    def _cancel(self, run_id: str) -> None:
        from agentos.run.control import cancel

        try:
            status = cancel(self.ws, run_id)
        except AgentOSError as exc:
            self.call_from_thread(self.notify, str(exc), severity="error")
            return
        self.call_from_thread(self.notify, f"run {run_id}: {status}")

    def action_attach(self) -> None:
        selected = self.selected()
        if selected is None or not selected[2]:
            self.notify("this agent has no tmux session", severity="warning")
            return
        from agentos.run.sessions import Sessions

        sessions = Sessions(self.ws.root)
        if not sessions.exists(selected[2]):
            self.notify("the agent's session has ended", severity="warning")
            return
        with self.suspend():
            subprocess.run(sessions.attach_argv(selected[2]), check=False)

    def action_logs(self) -> None:
        selected = self.selected()
        if selected is None or not selected[1]:
            return
        run_id, agent, _ = selected
        text = views.agent_log(self.ws, run_id, agent, 0)["text"]
        self.push_screen(LogScreen(f"{agent} in {run_id}", text))

    def action_launch(self) -> None:
        found = [w for w in views.workflows(self.ws)]
        if not found:
            self.notify("no workflow: add one under workflows/", severity="warning")
            return
        self.push_screen(LaunchScreen(found, self.repo), self._launched)

    def _launched(self, started: dict[str, Any] | None) -> None:
        if started:
            self.launched = started
            self.notify(f"execution {started['execution']} started (task {started['task']})")


class LogScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[Binding | tuple[str, str] | tuple[str, str, str]]] = [
        Binding("escape,q", "dismiss", "Close")
    ]

    def __init__(self, title: str, text: str) -> None:
        super().__init__()
        self.title_text = title
        self.text = text

    def compose(self) -> ComposeResult:
        log = Log(id="full-log", highlight=False)
        log.border_title = self.title_text
        yield log

    def on_mount(self) -> None:
        self.query_one("#full-log", Log).write(self.text or "(no output)")


class LaunchScreen(ModalScreen[dict[str, Any] | None]):
    """A workflow's launch form, built from its launch template's parameters."""

    BINDINGS: ClassVar[list[Binding | tuple[str, str] | tuple[str, str, str]]] = [
        Binding("escape", "dismiss", "Close")
    ]
    CSS = """
    LaunchScreen { align: center middle; }
    #form { width: 80%; height: 80%; border: round $primary; background: $surface; padding: 1 2; }
    TextArea { height: 5; }
    """

    def __init__(self, workflows: list[dict[str, Any]], repo: Path) -> None:
        super().__init__()
        self.workflows = {w["id"]: w for w in workflows}
        self.repo = repo

    def compose(self) -> ComposeResult:
        first = next(iter(self.workflows))
        with VerticalScroll(id="form"):
            yield Label("workflow")
            yield Select(
                [(f"{w['name']} ({w['id']})", w["id"]) for w in self.workflows.values()],
                value=first,
                allow_blank=False,
                id="workflow",
            )
            yield Vertical(id="fields")
            yield Label("repository")
            yield Input(str(self.repo), id="repo")
            yield Button("Launch", id="launch", variant="primary")
            yield Label("", id="problem")

    def on_mount(self) -> None:
        self._fields(next(iter(self.workflows)))

    def on_select_changed(self, event: Select.Changed) -> None:
        if event.select.id == "workflow" and isinstance(event.value, str):
            self._fields(event.value)

    def _fields(self, workflow_id: str) -> None:
        box = self.query_one("#fields", Vertical)
        box.remove_children()
        params = self.workflows[workflow_id]["parameters"] or [
            {"name": "task", "label": "task", "type": "textarea", "required": True}
        ]
        for p in params:
            label = f"{p.get('label') or p['name']}{' *' if p.get('required') else ''}"
            default = p.get("default")
            widget: Any
            if p["type"] == "boolean":
                widget = Checkbox(label, value=default is True, name=p["name"])
                box.mount(widget)
                continue
            box.mount(Label(label))
            if p["type"] == "textarea":
                widget = TextArea(str(default or ""), name=p["name"])
            elif p["type"] == "dropdown":
                options = [(o, o) for o in p.get("options", [])]
                widget = Select(options, value=default or Select.BLANK, name=p["name"])
            else:
                widget = Input(
                    "" if default is None else str(default),
                    name=p["name"],
                    type="number" if p["type"] == "number" else "text",
                )
            box.mount(widget)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id != "launch":
            return
        params: dict[str, str] = {}
        for widget in self.query_one("#fields", Vertical).children:
            if widget.name is None:
                continue
            if isinstance(widget, Checkbox):
                params[widget.name] = str(widget.value).lower()
            elif isinstance(widget, TextArea):
                params[widget.name] = widget.text
            elif isinstance(widget, Select):
                if isinstance(widget.value, str):
                    params[widget.name] = widget.value
            elif isinstance(widget, Input):
                params[widget.name] = widget.value
        workflow = self.query_one("#workflow", Select).value
        repo = Path(self.query_one("#repo", Input).value or str(self.repo))
        from agentos.workflows.executions import launch, start_detached

        app = self.app
        assert isinstance(app, AgentOSApp) and isinstance(workflow, str)
        try:
            execution, first = launch(app.ws, workflow, repo, params)
            log = start_detached(app.ws, execution)
        except AgentOSError as exc:
            self.query_one("#problem", Label).update(str(exc))
            return
        self.dismiss({"execution": execution, "task": first.id, "log": str(log)})
