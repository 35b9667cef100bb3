"""``agentos gate hook`` (a Claude Code Stop hook) and ``agentos gate install-hook``."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import git, make_repo, write_package

from agentos.workspace.layout import Workspace


def stop_input(cwd: Path, *, active: bool = False) -> str:
    """What Claude Code writes on a Stop hook's stdin."""
    return json.dumps(
        {
            "session_id": "9d6c8a1e-4b7f-4c1a-a0de-5f2d1c0b9e77",
            "transcript_path": "/home/dev/.claude/projects/-repo/9d6c8a1e.jsonl",
            "cwd": str(cwd),
            "permission_mode": "default",
            "hook_event_name": "Stop",
            "stop_hook_active": active,
        }
    )


def set_workspace_checks(ws: Workspace, checks: list[dict[str, Any]]) -> None:
    ws.settings_file.write_text(yaml.safe_dump({"checks": checks}, sort_keys=False))


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo", {"README.md": "# demo\n", "src/app.py": "x = 1\n"})


def test_hook_blocks_while_a_check_fails_and_lets_the_agent_stop_once_it_passes(
    cli: Any, ws: Workspace, repo: Path
) -> None:
    set_workspace_checks(
        ws,
        [
            {"name": "changelog", "file_exists": "CHANGES.md"},
            {
                "name": "tests",
                "run": "grep -q 'x = 2' src/app.py || { echo 'expected x = 2'; exit 1; }",
            },
        ],
    )

    blocked = cli("gate", "hook", input=stop_input(repo))
    assert blocked.returncode == 2
    assert blocked.stdout == ""
    reason = blocked.stderr
    assert "gate failed: 2 of 2 checks failed (changelog, tests)." in reason
    assert "## FAILED: changelog (file_exists, failed)" in reason
    assert "CHANGES.md does not exist" in reason
    assert "## FAILED: tests (run, exit 1)" in reason
    assert "expected x = 2" in reason

    (repo / "CHANGES.md").write_text("## New\n")
    still = cli("gate", "hook", input=stop_input(repo))
    assert still.returncode == 2
    assert "gate failed: 1 of 2 checks failed (tests)." in still.stderr
    assert "## FAILED: changelog" not in still.stderr

    (repo / "src" / "app.py").write_text("x = 2\n")
    done = cli("gate", "hook", input=stop_input(repo))
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == "gate passed: 2 of 2 checks passed\n"

    receipts = sorted(ws.receipts_dir.glob("*.txt"))
    assert len(receipts) == 3  # every gate result is a receipt
    last = receipts[-1].read_text()
    assert "via: claude code stop hook\nsession: 9d6c8a1e-4b7f-4c1a-a0de-5f2d1c0b9e77\n" in last
    assert f"repo: {repo}\n" in last and "passed: true\n" in last


def test_hook_honours_stop_hook_active_and_runs_nothing(
    cli: Any, ws: Workspace, repo: Path
) -> None:
    set_workspace_checks(ws, [{"name": "never passes", "run": "touch ran; false", "writes": True}])
    assert cli("gate", "hook", input=stop_input(repo)).returncode == 2
    (repo / "ran").unlink()

    again = cli("gate", "hook", input=stop_input(repo, active=True))
    assert again.returncode == 0
    assert not (repo / "ran").exists()
    assert len(list(ws.receipts_dir.glob("*.txt"))) == 1  # nothing ran, nothing recorded


def test_hook_checks_the_repository_holding_cwd(cli: Any, ws: Workspace, repo: Path) -> None:
    set_workspace_checks(
        ws,
        [{"name": "at root", "file_exists": "README.md"}, {"name": "small", "max_diff_lines": 0}],
    )
    (repo / "src" / "extra.py").write_text("print('hi')\n")
    out = cli("gate", "hook", input=stop_input(repo / "src"))
    assert out.returncode == 2
    assert "1 line(s) changed in 1 file(s)" in out.stderr
    assert "src/extra.py (untracked)" in out.stderr


def test_hook_runs_a_packages_checks_and_only_the_checks_named(
    cli: Any, ws: Workspace, repo: Path, tmp_path: Path
) -> None:
    pkg = write_package(
        tmp_path / "pkg",
        name="checked",
        checks=[
            {"name": "has changelog", "file_exists": "CHANGES.md"},
            {"name": "has readme", "file_exists": "README.md"},
        ],
    )
    assert cli("hub", "install", str(pkg)).returncode == 0

    out = cli("gate", "hook", "--package", "checked", input=stop_input(repo))
    assert out.returncode == 2 and "has changelog" in out.stderr
    only = cli(
        "gate", "hook", "--package", "checked", "--check", "has readme", input=stop_input(repo)
    )
    assert only.returncode == 0, only.stderr


@pytest.mark.parametrize(
    "stdin, message",
    [
        ("not json", "agentos gate hook: <stdin>: hook input is not JSON: Expecting value\n"),
        ("[1, 2]", "agentos gate hook: <stdin>: hook input must be a JSON object\n"),
        (
            '{"stop_hook_active": "yes"}',
            "agentos gate hook: <stdin>: stop_hook_active: expected bool\n",
        ),
    ],
    ids=["not-json", "not-object", "wrong-type"],
)
def test_hook_that_cannot_run_exits_1_so_it_never_traps_the_agent(
    cli: Any, stdin: str, message: str
) -> None:
    out = cli("gate", "hook", input=stdin)
    assert (out.returncode, out.stderr) == (1, message)


def test_hook_with_a_broken_agentos_yaml_exits_1(cli: Any, ws: Workspace, repo: Path) -> None:
    ws.settings_file.write_text("checks: [{name: x}]\n")
    out = cli("gate", "hook", input=stop_input(repo))
    assert out.returncode == 1
    assert out.stderr.startswith(f"agentos gate hook: {ws.settings_file}: checks[0]: ")


# --- install-hook ------------------------------------------------------------------------


EXISTING: dict[str, Any] = {
    "permissions": {"allow": ["Bash(npm test:*)"], "deny": ["Read(./.env)"]},
    "env": {"FOO": "bar"},
    "hooks": {
        "PostToolUse": [
            {
                "matcher": "Edit|Write",
                "hooks": [{"type": "command", "command": "npx prettier --write"}],
            }
        ],
        "Stop": [{"hooks": [{"type": "command", "command": "notify-send done"}]}],
    },
}


def test_install_hook_keeps_existing_settings_and_is_idempotent(
    cli: Any, ws: Workspace, repo: Path
) -> None:
    settings = repo / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text(json.dumps(EXISTING, indent=4))

    first = cli("gate", "install-hook", "--repo", str(repo), "--json")
    assert first.returncode == 0, first.stderr
    report = json.loads(first.stdout)
    assert (report["settings"], report["changed"]) == (str(settings), True)
    command = report["command"]
    assert command.endswith(f"-m agentos --workspace {ws.root} gate hook")

    written = json.loads(settings.read_text())
    expected = json.loads(json.dumps(EXISTING))
    expected["hooks"]["Stop"].append(
        {"hooks": [{"type": "command", "command": command, "timeout": 1800}]}
    )
    assert written == expected

    before = settings.read_bytes()
    second = cli("gate", "install-hook", "--repo", str(repo), "--json")
    assert json.loads(second.stdout)["changed"] is False
    assert settings.read_bytes() == before

    # Installing with other options updates the one AgentOS hook in place.
    third = cli("gate", "install-hook", "--repo", str(repo), "--package", "ruff-fixer", "--json")
    updated = json.loads(settings.read_text())["hooks"]["Stop"]
    assert len(updated) == 2
    assert updated[0] == EXISTING["hooks"]["Stop"][0]
    assert updated[1]["hooks"][0]["command"] == json.loads(third.stdout)["command"]
    assert "--package ruff-fixer" in updated[1]["hooks"][0]["command"]


def test_installed_hook_command_blocks_then_releases_the_agent(
    cli: Any, ws: Workspace, repo: Path
) -> None:
    set_workspace_checks(ws, [{"name": "changelog", "file_exists": "CHANGES.md"}])
    assert cli("gate", "install-hook", "--repo", str(repo)).returncode == 0
    [group] = json.loads((repo / ".claude" / "settings.json").read_text())["hooks"]["Stop"]
    command = group["hooks"][0]["command"]

    def run_hook() -> subprocess.CompletedProcess[str]:
        # As Claude Code does: the command through a shell, in the project, JSON on stdin.
        return subprocess.run(
            ["bash", "-c", command],
            input=stop_input(repo),
            cwd=repo,
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "CLAUDE_PROJECT_DIR": str(repo)},
        )

    blocked = run_hook()
    assert blocked.returncode == 2 and "CHANGES.md does not exist" in blocked.stderr
    (repo / "CHANGES.md").write_text("done\n")
    assert run_hook().returncode == 0


def test_install_hook_local_writes_settings_local_and_keeps_it_out_of_git(
    cli: Any, ws: Workspace, repo: Path
) -> None:
    out = cli("gate", "install-hook", "--repo", str(repo), "--local", "--json")
    assert out.returncode == 0, out.stderr
    path = repo / ".claude" / "settings.local.json"
    assert json.loads(out.stdout)["settings"] == str(path)
    assert path.is_file() and not (repo / ".claude" / "settings.json").exists()
    assert git(repo, "status", "--porcelain") == ""
    set_workspace_checks(ws, [{"name": "untouched", "max_diff_lines": 0}])
    assert cli("gate", "run", "--repo", str(repo)).returncode == 0
    cli("gate", "install-hook", "--repo", str(repo), "--local")
    exclude = Path(git(repo, "rev-parse", "--git-path", "info/exclude"))
    exclude = exclude if exclude.is_absolute() else repo / exclude
    assert exclude.read_text().splitlines().count("/.claude/settings.local.json") == 1


@pytest.mark.parametrize(
    "content, message",
    [
        ("{not json", "not valid JSON"),
        ('{"hooks": []}', "hooks: expected an object"),
        ('{"hooks": {"Stop": {}}}', "hooks.Stop: expected a list"),
    ],
    ids=["invalid-json", "hooks-not-object", "stop-not-list"],
)
def test_install_hook_refuses_settings_it_cannot_merge_and_leaves_them(
    cli: Any, repo: Path, content: str, message: str
) -> None:
    settings = repo / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text(content)
    out = cli("gate", "install-hook", "--repo", str(repo))
    assert out.returncode == 2
    assert out.stderr.startswith(f"error: {settings}: ") and message in out.stderr
    assert settings.read_text() == content


def test_install_hook_rejects_an_unknown_check_name(cli: Any, repo: Path) -> None:
    out = cli("gate", "install-hook", "--repo", str(repo), "--check", "ghost")
    assert (out.returncode, out.stderr) == (
        2,
        "error: check: no check named 'ghost' (checks: none)\n",
    )
    assert not (repo / ".claude").exists()
