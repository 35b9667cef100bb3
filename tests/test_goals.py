"""The Goal Proposer (issue 19): failing eval tasks, failing gate checks in the newest
receipts and TODO/FIXME lines in the knowledge store, as ranked, concrete requests that
pass the interview; the same state gives the same list."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import add_agent, make_repo, needs_tmux, write_package

from agentos.hub.store import Hub
from agentos.run.orchestrator import start_run


@needs_tmux
@pytest.mark.usefixtures("tmux_socket")
def test_goals_come_from_evals_gates_and_todos_ranked_and_stable(
    cli: Any, ws: Any, tmp_path: Path
) -> None:
    from test_evals import ADDER, SUMS, make_suite

    # An agent that gets one eval task wrong.
    Hub(ws.hub_dir).install(
        str(write_package(tmp_path / "src" / "adder", name="adder", files={"run.sh": ADDER}))
    )
    suite = make_suite(tmp_path / "sums", SUMS)
    assert cli("eval", "run", str(suite), "--agent", "adder").returncode == 0
    # A repository with a TODO, and a run whose gate fails one check and passes another.
    repo = make_repo(
        tmp_path / "shop",
        {"cart.py": "def total(items):\n    # TODO: handle empty carts\n    return sum(items)\n"},
    )
    other = make_repo(tmp_path / "other", {"x.py": "# FIXME: rounding is wrong\n"})
    add_agent(
        ws,
        tmp_path,
        "idler",
        "true\n",
        checks=[
            {"name": "changelog written", "file_exists": "CHANGELOG.md"},
            {"name": "cart there", "file_exists": "cart.py"},
        ],
    )
    ws.settings_file.write_text("run: {guardian: false, retries: 0}\n")
    assert start_run(ws, "idler-task", repo, force=True).status == "failed"
    assert cli("kb", "add", str(repo), str(other)).returncode == 0

    first = cli("goals", "propose", "--json")
    again = cli("goals", "propose", "--json")

    assert first.returncode == 0, first.stderr
    goals = json.loads(first.stdout)
    assert goals == json.loads(again.stdout)  # the same state, the same list
    assert [g["source"] for g in goals] == ["eval", "gate", "todo", "todo"]
    assert goals[0]["where"] == "sums/seven"
    assert (
        "answers task 'seven' of the eval suite sums right (expected 14, got 15)"
        in (goals[0]["request"])
    )
    assert goals[1]["request"] == (
        f"Fix the failing check `changelog written` in {repo} (CHANGELOG.md does not exist); "
        "done when `changelog written` passes."
    )
    assert {g["request"] for g in goals[2:]} == {
        f"Resolve the TODO in {repo / 'cart.py'}:2: handle empty carts; done when the tests pass.",
        f"Resolve the FIXME in {other / 'x.py'}:1: rounding is wrong; done when the tests pass.",
    }
    # Filters: one repository (its path shown relative), one suite.
    mine = json.loads(cli("goals", "propose", "--repo", str(repo), "--json").stdout)
    assert [(g["source"], g["where"]) for g in mine] == [
        ("gate", f"{repo}: changelog written"),
        ("todo", "cart.py:2"),
    ]
    only = json.loads(cli("goals", "propose", "--suite", "sums", "--json").stdout)
    assert [g["where"] for g in only] == ["sums/seven"]
    # Only what the interview lets through: a stricter threshold drops the vaguer ones.
    ws.settings_file.write_text("run: {guardian: false}\ninterview: {threshold: 0.3}\n")
    strict = json.loads(cli("goals", "propose", "--json").stdout)
    assert strict and all(g["ambiguity"] <= 0.3 for g in strict)
    assert len(strict) < len(goals)


def test_no_history_proposes_nothing_and_writes_nothing(cli: Any, ws: Any) -> None:
    before = sorted(p.name for p in ws.state_dir.iterdir())

    out = cli("goals", "propose")

    assert out.returncode == 0, out.stderr
    assert "proposed goals" in out.stdout
    # Nothing of its own: no state.db, no knowledge store, no receipt (the settings cache
    # is every command's).
    assert set(p.name for p in ws.state_dir.iterdir()) - set(before) <= {"cache"}
    assert not list(ws.receipts_dir.glob("*.txt"))
