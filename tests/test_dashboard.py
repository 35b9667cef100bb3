"""The web dashboard (issue 22): a real `agentos dashboard` process on loopback, asked with
a real HTTP client and driven in a real browser (Debian's chromium through Playwright's
Python API). Screenshots of each page go to the test's temporary directory."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from conftest import (
    Lines,
    add_agent,
    make_repo,
    needs_tmux,
    requires,
    wait_until,
    write_package,
)

from agentos.run.orchestrator import start_run

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_browser = requires(
    CHROMIUM is not None and __import__("importlib").util.find_spec("playwright") is not None,
    "chromium and playwright are not installed (scripts/install-test-browser and scripts/setup)",
)
HOSTILE = "<script>alert(1)</script>"


class Dashboard:
    def __init__(self, process: subprocess.Popen[str], url: str, token: str) -> None:
        self.process = process
        self.url = url
        self.token = token
        self.http = httpx.Client(base_url=url, timeout=30)


@pytest.fixture
def dashboard(ws: Any, tmp_path: Path) -> Iterator[Dashboard]:
    argv = ["--workspace", str(ws.root), "dashboard", "--http", "127.0.0.1:0"]
    # Its log goes to a file: a pipe nobody reads fills up and stops the server.
    with (tmp_path / "dashboard.log").open("w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "agentos", *argv, "--repo", str(tmp_path)],
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )
    with process:
        lines = Lines(process.stdout)
        line = lines.until(lambda line: "#token=" in line, what="the dashboard's URL")[-1]
        found = re.search(r"(http://127\.0\.0\.1:\d+)/#token=([\w-]+)", line)
        assert found, line
        board = Dashboard(process, found[1], found[2])
        try:
            yield board
        finally:
            board.http.close()
            process.terminate()
            process.wait(timeout=15)


def cli_json(cli: Any, *args: str) -> Any:
    out = cli(*args, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@needs_tmux
@pytest.mark.usefixtures("tmux_socket")
def test_the_api_serves_what_the_json_commands_print(
    cli: Any, ws: Any, tmp_path: Path, dashboard: Dashboard
) -> None:
    add_agent(ws, tmp_path, "writer", "echo hi > hi.txt\n")
    report = start_run(ws, "writer-task", make_repo(tmp_path / "repo"), force=True)

    assert dashboard.http.get(f"/api/runs/{report.run_id}").json() == cli_json(
        cli, "runs", "show", report.run_id
    )
    assert dashboard.http.get("/api/packages").json() == cli_json(cli, "hub", "list")
    assert dashboard.http.get("/api/runs").json() == cli_json(cli, "runs", "list")
    assert dashboard.http.get("/api/receipts/verify").json() == cli_json(cli, "receipts", "verify")
    events = dashboard.http.get("/api/events", params={"run": report.run_id}).json()
    assert [e["message"] for e in events] == [
        json.loads(line)["message"]
        for line in cli("events", "--run", report.run_id, "--json").stdout.splitlines()
    ]
    missing = dashboard.http.get("/api/runs/no-such-run")
    assert missing.status_code == 404 and "no run 'no-such-run'" in missing.json()["error"]
    bad = dashboard.http.get("/api/runs/x/log", params={"agent": "../../etc/passwd"})
    assert bad.status_code == 400 and "agent" in bad.json()["error"]


def test_only_the_dashboard_itself_may_ask_and_only_with_the_token_change_anything(
    cli: Any, dashboard: Dashboard
) -> None:
    http = dashboard.http

    rebound = http.get("/api/runs", headers={"Host": "evil.example"})
    cross = http.get("/api/runs", headers={"Origin": "http://evil.example"})
    anonymous = http.post("/api/runs/r1/cancel")
    forged = http.post("/api/runs/r1/cancel", headers={"X-AgentOS-Token": "guess"})
    allowed = http.post("/api/runs/r1/cancel", headers={"X-AgentOS-Token": dashboard.token})
    launch = http.post("/api/workflows/bug-fix/launch", json={"params": {}})
    page = http.get("/runs")

    assert rebound.status_code == 400
    assert cross.status_code == 403
    assert anonymous.status_code == 403 and forged.status_code == 403
    assert launch.status_code == 403
    assert allowed.status_code == 404  # past the guard: there is no run r1
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["x-content-type-options"] == "nosniff"
    remote = cli("dashboard", "--http", "0.0.0.0:8766")
    assert remote.returncode == 2
    assert remote.stderr.strip().splitlines() == [
        "error: --http: 0.0.0.0 is not a loopback address: the dashboard shows the whole "
        "workspace; pass --allow-remote to serve it there"
    ]
    assert cli("dashboard", "--http", "nonsense").returncode == 2


# --- in a browser ---------------------------------------------------------------------------

# Two steps, then it waits until the test lets it go on (a file in its worktree): the page is
# looked at while the run is surely live.
SLOW_WRITER = (
    'for i in 1 2; do echo "step $i of the slow writer"; done\n'
    "until [ -e go ]; do sleep 0.05; done; rm go\n"
    'for i in 3 4 5 6; do echo "step $i of the slow writer"; done\n'
    "echo done > slow.txt\n"
)


@pytest.fixture
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()


@needs_browser
@needs_tmux
@pytest.mark.usefixtures("tmux_socket")
def test_in_a_browser_a_live_run_shows_its_output_and_ends_succeeded_without_a_reload(
    cli: Any, ws: Any, tmp_path: Path, dashboard: Dashboard, browser: Any
) -> None:
    from playwright.sync_api import expect
    from test_evals import ADDER, SUMS, make_suite

    from agentos.hub.store import Hub

    shots = tmp_path / "screenshots"
    shots.mkdir()
    add_agent(ws, tmp_path, "slow", SLOW_WRITER)
    add_agent(ws, tmp_path, "writer", "echo hi > hi.txt\n")
    repo = make_repo(tmp_path / "repo")
    start_run(ws, f"writer-task {HOSTILE}", repo, force=True)  # an earlier run, hostile text
    Hub(ws.hub_dir).install(
        str(write_package(tmp_path / "src" / "adder", name="adder", files={"run.sh": ADDER}))
    )
    suite = make_suite(tmp_path / "sums", SUMS)
    assert cli("eval", "run", str(suite), "--agent", "adder").returncode == 0
    dialogs: list[str] = []
    page = browser.new_page()

    def dismiss(dialog: Any) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", dismiss)
    page.goto(f"{dashboard.url}/runs#token={dashboard.token}")

    # The runs page shows the hostile request as text.
    expect(page.get_by_text(f"writer-task {HOSTILE}")).to_be_visible()
    page.screenshot(path=str(shots / "runs.png"), full_page=True)

    # A live run: its page, opened while it works, shows the output as it comes.
    done: dict[str, Any] = {}
    runner = threading.Thread(
        target=lambda: done.update(report=start_run(ws, "slow-task", repo, force=True))
    )
    runner.start()
    try:
        run_id = wait_until(lambda: _newest_run(dashboard, "slow-task"), what="the slow run")
        page.goto(f"{dashboard.url}/runs/{run_id}")
        output = page.locator("#log-slow")
        expect(output).to_contain_text("step 2 of the slow writer", timeout=30_000)
        assert "succeeded" not in page.locator("#run-status").inner_text()
        loads = page.evaluate("performance.getEntriesByType('navigation').length")
    finally:  # let it go on (also when the test failed, so that the run ends)
        for worktree in ws.worktrees_dir.glob("*/slow"):
            (worktree / "go").touch()
    try:
        expect(page.locator("#run-status")).to_have_text("succeeded", timeout=60_000)
        expect(page.locator("#log-slow")).to_contain_text("step 6 of the slow writer")
    finally:
        runner.join(timeout=120)
    assert done["report"].status == "succeeded"
    assert page.evaluate("performance.getEntriesByType('navigation').length") == loads
    expect(page.locator("#events")).to_contain_text("merged")
    page.screenshot(path=str(shots / "run.png"), full_page=True)

    for name, ready in [
        ("receipts", "#chain"),
        ("packages", "table"),
        ("guardian", "#guardian-state"),
        ("evals", "h1"),
        ("knowledge?q=writer", "#hits"),
    ]:
        page.goto(f"{dashboard.url}/{name}")
        expect(page.locator(ready).first).to_be_visible()
        page.screenshot(path=str(shots / f"{name.split('?')[0]}.png"), full_page=True)
    expect(page.locator("#chain")).to_have_count(0)  # (on the knowledge page now)
    page.goto(f"{dashboard.url}/receipts")
    expect(page.locator("#chain")).to_contain_text("chain intact")
    page.goto(f"{dashboard.url}/evals")
    expect(page.locator("svg.chart rect")).to_have_count(1)  # one eval, one bar
    expect(page.locator("table")).to_contain_text("0.750")

    assert dialogs == []  # the hostile request never ran as script
    assert sorted(p.name for p in shots.iterdir()) == [
        "evals.png", "guardian.png", "knowledge.png", "packages.png", "receipts.png",
        "run.png", "runs.png",
    ]  # fmt: skip


@needs_browser
@needs_tmux
@pytest.mark.usefixtures("tmux_socket")
def test_in_a_browser_a_workflow_launches_from_its_form(
    ws: Any, tmp_path: Path, dashboard: Dashboard, browser: Any
) -> None:
    from playwright.sync_api import expect

    repo = add_fix_it_workflow(ws, tmp_path)
    page = browser.new_page()
    page.goto(f"{dashboard.url}/workflows#token={dashboard.token}")

    form = page.locator("form[data-workflow='fix-it']")
    form.locator("textarea[name=bug]").fill(f"uploads time out {HOSTILE}")
    form.locator("input[name=urgent]").check()
    form.locator("input[name=__repo]").fill(str(repo))
    page.screenshot(path=str(tmp_path / "workflows.png"), full_page=True)
    form.get_by_role("button", name="Launch").click()

    launched = page.locator("#launched")
    expect(launched).to_contain_text("execution", timeout=30_000)
    expect(launched).to_contain_text(f"Fix this: uploads time out {HOSTILE} (urgent: true)")
    expect(launched.locator("td .status-done")).to_have_count(1, timeout=120_000)
    expect(launched.locator("p .status")).to_have_text("done")
    assert (tmp_path / "workflows.png").stat().st_size > 0


def add_fix_it_workflow(ws: Any, tmp_path: Path) -> Path:
    """A workspace workflow, fix-it, whose one phase's agent writes the fix at once, with a
    launch template of a textarea and a boolean; the repository it works on."""
    add_agent(ws, tmp_path, "fixer", "echo 'timeout=30' > settings.txt\n")
    ws.settings_file.write_text("run: {guardian: false, retries: 0}\n")
    repo = make_repo(tmp_path / "repo", {"settings.txt": "timeout=1\n"})
    workflow = {
        "id": "fix-it",
        "name": "Fix it",
        "phases": [
            {"id": 1, "name": "fix", "description": "Fix it", "agent": "fixer", "changes": True}
        ],
        "launch_template": {
            "parameters": [
                {"name": "bug", "label": "The bug", "type": "textarea", "required": True},
                {"name": "urgent", "type": "boolean"},
            ],
            "phase_1_task_prompt": "Fix this: {bug} (urgent: {urgent})",
        },
    }
    (ws.root / "workflows").mkdir()
    (ws.root / "workflows" / "fix-it.yaml").write_text(yaml.safe_dump(workflow))
    return repo


def _newest_run(dashboard: Dashboard, request: str) -> str | None:
    runs = dashboard.http.get("/api/runs").json()["runs"]
    return next((r["id"] for r in runs if r["request"] == request), None)


def test_the_dashboard_is_not_on_the_cli_import_path() -> None:
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "agentos", "--help"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    imported = {line.split("|")[-1].strip().split(".")[0] for line in out.stderr.splitlines()}
    assert not imported & {"starlette", "uvicorn", "sse_starlette", "textual", "playwright"}
