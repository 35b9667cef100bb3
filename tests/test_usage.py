"""What an agent says it used (tokens, cost): read from $AGENTOS_USAGE_FILE after each
attempt, summed over attempts, recorded in the report and the gate receipt; a report that
is not one is noted, never trusted."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import add_agent, make_repo, needs_tmux

from agentos.receipts import read_receipt
from agentos.run.orchestrator import start_run
from agentos.runtimes.usage import Usage, parse_usage, take_usage
from agentos.workspace.layout import Workspace


@pytest.mark.parametrize(
    ("text", "usage"),
    [
        ('{"tokens": 120, "cost": 0.5}', Usage(120, 0.5)),
        ('{"tokens": 0}', Usage(0, None)),
        ('{"cost": 2}', Usage(None, 2.0)),
        ("{}", Usage(None, None)),
    ],
)
def test_a_usage_report_reads_tokens_and_cost(text: str, usage: Usage) -> None:
    assert parse_usage(text) == usage


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("lots", "not JSON"),
        ("[1]", "not a JSON object"),
        ('{"tokens": -1}', "tokens must be a whole number >= 0"),
        ('{"tokens": 1.5}', "tokens must be a whole number >= 0"),
        ('{"tokens": true}', "tokens must be a whole number >= 0"),
        ('{"cost": "free"}', "cost must be a finite number >= 0"),
        ('{"cost": NaN}', "cost must be a finite number >= 0"),
        ('{"cost": -0.1}', "cost must be a finite number >= 0"),
        ('{"tokens": 1, "calls": 3}', "unknown field 'calls' (tokens and cost are known)"),
    ],
)
def test_a_bad_usage_report_says_what_is_wrong(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem.replace("(", r"\(").replace(")", r"\)")):
        parse_usage(text)


def test_usage_is_read_once_from_a_regular_file_only(tmp_path: Path) -> None:
    path = tmp_path / "usage.json"
    assert take_usage(path) == (None, None)  # nothing written: nothing said
    path.write_text('{"tokens": 7}')
    assert take_usage(path) == (Usage(7), None)
    assert not path.exists()  # the next attempt starts afresh

    secret = tmp_path / "secret.json"
    secret.write_text('{"tokens": 1}')
    path.symlink_to(secret)
    assert take_usage(path) == (None, "$AGENTOS_USAGE_FILE is not a regular file")
    assert secret.exists() and not path.is_symlink()

    os.mkfifo(path)  # never waited on
    assert take_usage(path) == (None, "$AGENTOS_USAGE_FILE is not a regular file")
    assert not path.exists()

    path.write_text('{"tokens": 1}' + " " * 5000)
    assert take_usage(path) == (None, "$AGENTOS_USAGE_FILE is over 4096 bytes")


@needs_tmux
@pytest.mark.usefixtures("tmux_socket")
def test_usage_is_summed_over_attempts_and_recorded_in_the_gate_receipt(
    ws: Workspace, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "repo", {"app.py": "x = 1\n"})
    script = (
        'if [ "$AGENTOS_ATTEMPT" = 1 ]; then\n'
        '  echo \'{"tokens": 100, "cost": 0.25}\' > "$AGENTOS_USAGE_FILE"\n'
        "else\n"
        "  echo done > done.txt\n"
        '  echo \'{"tokens": 40}\' > "$AGENTOS_USAGE_FILE"\n'
        "fi\n"
    )
    add_agent(ws, tmp_path, "spender", script, checks=[{"name": "done", "file_exists": "done.txt"}])
    add_agent(ws, tmp_path, "liar", 'echo \'{"tokens": -5}\' > "$AGENTOS_USAGE_FILE"\n')
    ws.settings_file.write_text("run: {guardian: false, retries: 1}\n")

    report = start_run(ws, "spender-task", repo, force=True)
    lied = start_run(ws, "liar-task", repo, force=True)

    (agent,) = report.agents
    assert report.status == "succeeded" and agent.attempts == 2, report.message
    assert agent.usage == Usage(140, 0.25)
    assert agent.as_dict()["usage"] == {"tokens": 140, "cost": 0.25}
    texts = [read_receipt(ws, r) for r in agent.receipts]
    assert "usage:\n  tokens: 100\n  cost: 0.25\n" in texts[0]
    assert "usage:\n  tokens: 140\n  cost: 0.25\n" in texts[1]
    (liar,) = lied.agents
    assert liar.usage is None
    events = (ws.state_dir / "logs" / lied.run_id / "events.jsonl").read_text()
    assert "its usage report was ignored: $AGENTOS_USAGE_FILE: tokens must be a whole" in events
