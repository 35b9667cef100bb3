"""The guardian's decisions and prompt recognition: pure functions, tables of cases."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from agentos.errors import ValidationFailed
from agentos.guardian.monitor import _is_suffix, screen_lines
from agentos.guardian.policy import Action, Health, Policy, Signals, decide
from agentos.guardian.prompts import detect_prompt
from agentos.hub.manifest import GuardianOverrides, load_manifest
from agentos.workspace.settings import GuardianSettings

POLICY = Policy(
    interval=60, stuck_after=300, nudge="Are you stuck?", max_restarts=1, kill_after=900
)
NOW = 10_000.0


def signals(**changes: Any) -> Signals:
    base = Signals(
        run_id="r1",
        agent="a",
        session="agentos-r1-a",
        now=NOW,
        pane=True,
        alive=True,
        exit_code=None,
        stopped=False,
        output_changed_at=NOW - 10,
    )
    return dataclasses.replace(base, **changes)


CASES = [
    ("recent output", {}, Health.HEALTHY, Action.NONE),
    ("quiet just under stuck_after", {"output_changed_at": NOW - 299}, Health.HEALTHY, Action.NONE),
    (
        "quiet past stuck_after, never nudged",
        {"output_changed_at": NOW - 300},
        Health.STUCK,
        Action.NUDGE,
    ),
    (
        "nudged in an earlier quiet spell only",
        {"output_changed_at": NOW - 400, "last_nudge_at": NOW - 1000},
        Health.STUCK,
        Action.NUDGE,
    ),
    (
        "nudged, not yet stuck_after ago",
        {"output_changed_at": NOW - 500, "last_nudge_at": NOW - 100},
        Health.STUCK,
        Action.NONE,
    ),
    (
        "nudged stuck_after ago, restarts left",
        {"output_changed_at": NOW - 700, "last_nudge_at": NOW - 300},
        Health.STUCK,
        Action.RESTART,
    ),
    (
        "restarts used up, quiet under kill_after",
        {"output_changed_at": NOW - 800, "last_nudge_at": NOW - 400, "restarts": 1},
        Health.STUCK,
        Action.NONE,
    ),
    (
        "restarts used up, quiet past kill_after",
        {"output_changed_at": NOW - 900, "last_nudge_at": NOW - 500, "restarts": 1},
        Health.STUCK,
        Action.KILL,
    ),
    (
        "restarts used up, quiet past kill_after, but nudged just now",
        {"output_changed_at": NOW - 2000, "last_nudge_at": NOW - 299, "restarts": 1},
        Health.STUCK,
        Action.NONE,
    ),
    (
        "a restart starts a new quiet spell",
        {
            "output_changed_at": NOW - 2000,
            "last_nudge_at": NOW - 1500,
            "restarts": 1,
            "last_restart_at": NOW - 100,
        },
        Health.HEALTHY,
        Action.NONE,
    ),
    (
        "after a restart the agent is nudged again before a kill",
        {
            "output_changed_at": NOW - 2000,
            "last_nudge_at": NOW - 1500,
            "restarts": 1,
            "last_restart_at": NOW - 950,
        },
        Health.STUCK,
        Action.NUDGE,
    ),
    (
        "a fresh heartbeat keeps a silent agent healthy",
        {"output_changed_at": NOW - 5000, "heartbeat_at": NOW - 5},
        Health.HEALTHY,
        Action.NONE,
    ),
    (
        "a stale heartbeat does not",
        {"output_changed_at": NOW - 5000, "heartbeat_at": NOW - 400},
        Health.STUCK,
        Action.NUDGE,
    ),
    (
        "a prompt seen once is not yet waiting, and holds off the nudge",
        {"output_changed_at": NOW - 400, "prompt": "claude-code", "prompt_streak": 1},
        Health.STUCK,
        Action.NONE,
    ),
    (
        "a prompt seen twice in a row is waiting, never nudged",
        {"output_changed_at": NOW - 5000, "prompt": "claude-code", "prompt_streak": 2},
        Health.WAITING,
        Action.NONE,
    ),
    (
        "the session ended without an exit status",
        {"pane": False, "alive": False},
        Health.DEAD,
        Action.NONE,
    ),
    ("the pane's process died, restarts left", {"alive": False}, Health.DEAD, Action.RESTART),
    (
        "the pane's process died, restarts used up",
        {"alive": False, "restarts": 1},
        Health.DEAD,
        Action.KILL,
    ),
    (
        "the exit file is written: the orchestrator's turn",
        {"alive": False, "pane": False, "exit_code": 3},
        Health.DEAD,
        Action.NONE,
    ),
    (
        "already stopped by the guardian",
        {"stopped": True, "output_changed_at": NOW - 5000},
        Health.DEAD,
        Action.NONE,
    ),
    (
        "the run passed its timeout",
        {"run_started_at": NOW - 1800, "run_timeout": 1800},
        Health.HEALTHY,
        Action.KILL,
    ),
    (
        "the run's timeout kills a waiting agent too",
        {"run_started_at": NOW - 2000, "run_timeout": 1800, "prompt": "codex", "prompt_streak": 5},
        Health.WAITING,
        Action.KILL,
    ),
    (
        "the run is within its timeout",
        {"run_started_at": NOW - 1799, "run_timeout": 1800},
        Health.HEALTHY,
        Action.NONE,
    ),
]


@pytest.mark.parametrize(
    ("changes", "health", "action"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_decisions_follow_the_ladder(
    changes: dict[str, Any], health: Health, action: Action
) -> None:
    decision = decide(signals(**changes), POLICY)
    assert (decision.health, decision.action) == (health, action), decision.reason


def test_the_same_signals_always_give_the_same_decision() -> None:
    s = signals(output_changed_at=NOW - 700, last_nudge_at=NOW - 300)
    assert len({decide(s, POLICY) for _ in range(50)}) == 1


def test_with_no_restarts_allowed_a_nudged_agent_is_killed_at_kill_after() -> None:
    policy = dataclasses.replace(POLICY, max_restarts=0)
    assert (
        decide(signals(output_changed_at=NOW - 899, last_nudge_at=NOW - 599), policy).action
        is Action.NONE
    )
    assert (
        decide(signals(output_changed_at=NOW - 900, last_nudge_at=NOW - 600), policy).action
        is Action.KILL
    )


def test_package_overrides_replace_workspace_settings_key_by_key() -> None:
    settings = GuardianSettings(interval=30, stuck_after=120, max_restarts=2)
    policy = Policy.from_settings(settings, GuardianOverrides(stuck_after=600, nudge="Go on."))
    assert policy == Policy(
        interval=30, stuck_after=600, nudge="Go on.", max_restarts=2, kill_after=900
    )
    assert Policy.from_settings(settings) == Policy(
        interval=30,
        stuck_after=120,
        nudge="Are you stuck? Continue with the task.",
        max_restarts=2,
        kill_after=900,
    )


def test_a_manifest_with_an_unknown_guardian_key_names_file_and_field(tmp_path: Any) -> None:
    from conftest import write_package

    pkg = write_package(tmp_path / "p", guardian={"stuck_afte": 10})
    with pytest.raises(ValidationFailed) as err:
        load_manifest(pkg)
    assert str(err.value) == f"{pkg / 'agent.yaml'}: guardian.stuck_afte: unknown field"
    pkg = write_package(tmp_path / "q", guardian={"max_restarts": -1})
    with pytest.raises(ValidationFailed, match=r"guardian\.max_restarts"):
        load_manifest(pkg)
    assert load_manifest(
        write_package(tmp_path / "r", guardian={"kill_after": 60})
    ).guardian == GuardianOverrides(kill_after=60)


CLAUDE_DIALOG = """\
╭──────────────────────────────────────────────╮
│ Bash command                                 │
│   rm -rf build                               │
│ Do you want to proceed?                      │
│ ❯ 1. Yes                                     │
│   2. No, and tell Claude what to do differently (esc) │
╰──────────────────────────────────────────────╯
"""
CLAUDE_IDLE = """\
● Done. The tests pass.

╭──────────────────────────────────────────────╮
│ >                                            │
╰──────────────────────────────────────────────╯
  ? for shortcuts
"""
CLAUDE_BUSY = """\
│ Do you want to proceed?  (answered)
✻ Pondering… (12s · esc to interrupt)
"""
GEMINI_DIALOG = """\
 ? Shell  npm test
 Allow execution of: 'npm'?
 ● 1. Yes, allow once
   2. Yes, allow always
   3. No (esc)
"""
CODEX_DIALOG = """\
Would you like to run the following command?
  $ pytest -q
▌ 1. Yes, proceed (y)
"""
CODEX_IDLE = "some earlier output\n\n›\n\n  gpt-5 · ~/repo · 100% left\n"
SHELL_QUESTION = "Overwrite config.yaml? [y/N]\n"
PLAIN = "compiling module 3 of 10\nrunning tests...\n"
SCROLLED_AWAY = "Do you want to proceed?\n" + "".join(f"line {i}\n" for i in range(30))

PROMPTS = [
    ("claude permission dialog", CLAUDE_DIALOG, "claude-code", "claude-code"),
    ("claude idle input box", CLAUDE_IDLE, "claude-code", "claude-code"),
    ("claude busy", CLAUDE_BUSY, "claude-code", None),
    ("gemini confirmation", GEMINI_DIALOG, "gemini-cli", "gemini-cli"),
    ("codex approval", CODEX_DIALOG, "codex", "codex"),
    ("codex idle prompt", CODEX_IDLE, "codex", "codex"),
    ("a shell agent driving claude", CLAUDE_DIALOG, "shell", "claude-code"),
    ("unknown package", GEMINI_DIALOG, None, "gemini-cli"),
    ("a yes/no question at the bottom", SHELL_QUESTION, "shell", "yes/no"),
    ("plain progress output", PLAIN, "shell", None),
    ("plain output under a claude runtime", PLAIN, "claude-code", None),
    ("a prompt that scrolled away was answered", SCROLLED_AWAY, "claude-code", None),
    ("an empty screen", "\n\n", "codex", None),
]


@pytest.mark.parametrize(
    ("screen", "runtime", "expected"), [p[1:] for p in PROMPTS], ids=[p[0] for p in PROMPTS]
)
def test_input_prompts_are_recognised(
    screen: str, runtime: str | None, expected: str | None
) -> None:
    assert detect_prompt(screen, runtime) == expected


def test_the_nudge_echo_and_a_scroll_are_not_new_output() -> None:
    before = screen_lines("line 1\nline 2\nline 3\n\n")
    echoed = screen_lines("line 2\nline 3\n> Are you stuck?   \n\n", ["Are you stuck?"])
    assert _is_suffix(echoed, before)
    assert not _is_suffix(screen_lines("line 2\nline 3\nline 4\n"), before)
    assert _is_suffix(screen_lines("line 1\nline 2\nline 3"), before)
