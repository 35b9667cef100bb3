"""Routing cards: the schema, `agentos cards lint` and `agentos cards list`, the revision."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import CliRunner

from agentos.errors import ValidationFailed
from agentos.routing.cards import cards_revision, lint_cards, load_card, load_cards
from agentos.workspace.layout import Workspace, init_workspace

# The first five bundled cards; other parts of AgentOS add theirs to routing_cards/, so these
# tests pin the set they check against.
CLASSIC = ("claude-code", "codex", "fix-lint", "gemini-cli", "run-tests")


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    """A workspace with the bundled hub and the five classic bundled cards."""
    workspace, _ = init_workspace(tmp_path / "ws")
    for card in workspace.cards_dir.glob("*.yaml"):
        if card.stem not in CLASSIC:
            card.unlink()
    return workspace


GOOD = """\
id: good
agent: ruff-fixer
triggers:
  keywords: [lint]
"""

# (id, file name, content, expected lines of `cards lint` for that file)
INVALID: list[tuple[str, str, str, list[str]]] = [
    (
        "bad-yaml",
        "bad.yaml",
        "id: bad\ntriggers: {keywords: [lint\n",
        ["line 3: invalid YAML: "],
    ),  # the rest is libyaml's (or PyYAML's) own wording
    (
        "unknown-field",
        "extra.yaml",
        GOOD.replace("id: good", "id: extra\ncolour: red"),
        ["colour: unknown field"],
    ),
    (
        "bad-regex",
        "rx.yaml",
        GOOD.replace("id: good", "id: rx") + "  regex: ['ok', '(unclosed']\n",
        [
            "triggers.regex[1]: '(unclosed' is not a valid regular expression: missing ), "
            "unterminated subpattern at position 0"
        ],
    ),
    (
        "regex-re2-cannot-run",
        "ahead.yaml",
        GOOD.replace("id: good", "id: ahead") + "  regex: ['lint(?!er)']\n",
        [
            "triggers.regex[0]: 'lint(?!er)' is not a valid regular expression: not supported "
            "by RE2, which matches in linear time (invalid perl operator: (?!); lookarounds, "
            "backreferences, possessive repeats and atomic groups are not"
        ],
    ),
    (
        "duplicate-key",
        "twice.yaml",
        GOOD.replace("id: good", "id: twice") + "  keywords: [format]\n",
        ["triggers.keywords: duplicate key (lines 4 and 5); give it once"],
    ),
    (
        "duplicate-key-on-one-line",
        "inline.yaml",
        "id: inline\nagent: ruff-fixer\ntriggers: {keywords: [lint], keywords: [ruff]}\n",
        ["triggers.keywords: duplicate key (twice on line 3); give it once"],
    ),
    (
        "unknown-agent",
        "ghost.yaml",
        GOOD.replace("id: good", "id: ghost").replace("ruff-fixer", "no-such-agent"),
        ["agent: agent 'no-such-agent' is not installed in the hub (see `agentos hub list`)"],
    ),
    ("not-a-mapping", "list.yaml", "- id: x\n", ["(root): expected a mapping of card fields"]),
    (
        "missing-triggers",
        "bare.yaml",
        "id: bare\nagent: ruff-fixer\n",
        ["triggers: required field is missing"],
    ),
    (
        "nothing-to-score",
        "empty.yaml",
        "id: empty\nagent: ruff-fixer\ntriggers: {require: [x]}\n",
        ["triggers: a card needs at least one keyword, phrase or regex to score"],
    ),
    (
        "bad-id-and-group",
        "caps.yaml",
        GOOD.replace("id: good", "id: Caps\ngroup: My Group"),
        [
            "id: 'Caps' must be lowercase letters, digits and '-' (at most 64)",
            "group: 'My Group' must be lowercase letters, digits and '-' (at most 64)",
        ],
    ),
    (
        "bad-version",
        "ver.yaml",
        GOOD.replace("id: good", "id: ver\nversion: 'one'"),
        ["version: 'one' is not a version constraint like '>=1.0,<2'"],
    ),
    (
        "min-score-zero",
        "min.yaml",
        GOOD.replace("id: good", "id: min\nmin_score: 0"),
        ["min_score: Input should be greater than or equal to 1"],
    ),
    (
        "priority-not-int",
        "prio.yaml",
        GOOD.replace("id: good", "id: prio\npriority: '3'"),
        ["priority: Input should be a valid integer"],
    ),
    (
        "keyword-without-words",
        "punct.yaml",
        GOOD.replace("[lint]", "[lint, '!!!']"),
        ["triggers.keywords[1]: '!!!' has no words to match"],
    ),
    (
        "unknown-trigger",
        "trig.yaml",
        GOOD + "  synonyms: [x]\n",
        ["triggers.synonyms: unknown field"],
    ),
    (
        "bad-check",
        "check.yaml",
        GOOD + "checks: [{name: c}]\n",
        [
            "checks[0]: a check needs exactly one of run, tests, file_exists, file_contains, "
            "no_changes_outside, max_diff_lines"
        ],
    ),
]


@pytest.mark.parametrize(
    ("name", "content", "expected"), [c[1:] for c in INVALID], ids=[c[0] for c in INVALID]
)
def test_lint_reports_each_problem_as_file_field_message_and_exits_2(
    cli: CliRunner, ws: Workspace, name: str, content: str, expected: list[str]
) -> None:
    path = ws.cards_dir / name
    path.write_text(content)
    result = cli("cards", "lint")
    assert result.returncode == 2
    lines = result.stdout.splitlines()
    assert len(lines) == len(expected) + 1
    for line, want in zip(lines, expected, strict=False):
        whole = line == f"{path}: {want}"
        assert whole or (want.endswith(" ") and line.startswith(f"{path}: {want}")), line
    assert lines[-1] == (
        f"6 card files checked: {len(expected)} error{'s' * (len(expected) != 1)}, 0 warnings"
    )
    assert "Traceback" not in result.stdout + result.stderr


def test_duplicate_ids_name_both_files(cli: CliRunner, ws: Workspace) -> None:
    shutil.copy(ws.cards_dir / "fix-lint.yaml", ws.cards_dir / "lint-again.yaml")
    result = cli("cards", "lint", "--json")
    assert result.returncode == 2
    assert json.loads(result.stdout) == {
        "ok": False,
        "files": 6,
        "problems": [
            {
                "file": str(ws.cards_dir / "lint-again.yaml"),
                "field": "id",
                "message": "duplicate card id 'fix-lint' (also in fix-lint.yaml)",
                "severity": "error",
            }
        ],
    }


def test_every_problem_of_one_card_is_reported(tmp_path: Path, ws: Workspace) -> None:
    path = tmp_path / "many.yaml"
    path.write_text(
        "id: BAD\nagent: ruff-fixer\nmin_score: -1\nextra: 1\ntriggers: {regex: ['[']}\n"
    )
    report = lint_cards(path, ws.hub_dir)
    assert [(p.field, p.severity) for p in report.problems] == [
        ("id", "error"),
        ("min_score", "error"),
        ("triggers.regex[0]", "error"),
        ("extra", "error"),
    ]


def test_the_bundled_cards_lint_clean(cli: CliRunner) -> None:
    result = cli("cards", "lint")
    assert (result.returncode, result.stdout) == (0, "5 card files checked: 0 errors, 0 warnings\n")


def test_warnings_do_not_fail_lint(cli: CliRunner, ws: Workspace) -> None:
    (ws.cards_dir / "future.yaml").write_text(
        GOOD.replace("id: good", "id: future\nversion: '>=2'").replace(
            "[lint]", "[lint, linting, format]"
        )
        + "  exclude: [lint]\n  require: [lints]\n"
    )
    (ws.cards_dir / "old.yml").write_text(GOOD)
    result = cli("cards", "lint")
    future, old = ws.cards_dir / "future.yaml", ws.cards_dir / "old.yml"
    assert result.returncode == 0
    assert result.stdout.splitlines() == [
        f"{future}: version: warning: no installed version of ruff-fixer satisfies '>=2' "
        "(installed: 1.0.0); the router will reject this card",
        f"{future}: triggers.keywords[1]: warning: 'linting' is the same as 'lint' after "
        "stemming; it counts once",
        f"{future}: triggers.require[0]: warning: 'lints' is also excluded: this card can "
        "never match",
        f"{old}: (file): warning: ignored: card files end in .yaml",
        "6 card files checked: 0 errors, 4 warnings",
    ]


def test_lint_warns_of_regexes_that_backtrack_catastrophically(
    cli: CliRunner, ws: Workspace
) -> None:
    path = ws.cards_dir / "redos.yaml"
    path.write_text(
        GOOD.replace("id: good", "id: redos")
        + "  regex: ['(a+)+$', '\\b[EFW]\\d{3}\\b', '(\\w+\\s?)*:', '(ab|a)*c']\n"
        + "checks:\n  - {name: c, file_contains: {path: x.txt, pattern: '^(x+x+)+y'}}\n"
    )
    result = cli("cards", "lint")
    assert result.returncode == 0, result.stdout
    why = (
        "repeats a part that can split the same text in many ways (like (a+)+ or (a|ab)*): "
        "exponential time in a backtracking engine such as Python's re; AgentOS matches it "
        "with RE2 in linear time, but simplify it"
    )
    words = r"(\w+\s?)*:"
    assert result.stdout.splitlines() == [
        f"{path}: triggers.regex[0]: warning: '(a+)+$' {why}",
        f"{path}: triggers.regex[2]: warning: {words!r} {why}",
        f"{path}: checks[0].file_contains.pattern: warning: '^(x+x+)+y' {why}",
        "6 card files checked: 0 errors, 3 warnings",
    ]


def test_lint_one_file_outside_the_workspace(cli: CliRunner, tmp_path: Path) -> None:
    path = tmp_path / "draft.yaml"
    path.write_text(GOOD.replace("lint]", "lint]\n  regex: ['[z-a]']"))
    result = cli("cards", "lint", str(path))
    assert result.returncode == 2
    assert result.stdout.splitlines()[0] == (
        f"{path}: triggers.regex[0]: '[z-a]' is not a valid regular expression: bad character "
        "range z-a at position 1"
    )
    missing = cli("cards", "lint", str(tmp_path / "nope.yaml"))
    assert (missing.returncode, missing.stderr) == (
        2,
        f"error: {tmp_path / 'nope.yaml'}: no such card file or directory\n",
    )


def test_cards_list_json_and_table(cli: CliRunner, ws: Workspace) -> None:
    doc = json.loads(cli("cards", "list", "--json").stdout)
    assert doc["revision"] == cards_revision(ws.cards_dir)
    assert [c["id"] for c in doc["cards"]] == [
        "claude-code",
        "codex",
        "fix-lint",
        "gemini-cli",
        "run-tests",
    ]
    fix = doc["cards"][2]
    assert fix == {
        "id": "fix-lint",
        "agent": "ruff-fixer",
        "version": ">=1.0,<2",
        "description": "Clean up lint and formatting problems in Python code.",
        "priority": 0,
        "group": "code-change",
        "min_score": 1,
        "triggers": {
            "keywords": ["lint", "linter", "ruff", "flake8", "format", "pep8", "isort", "style"],
            "phrases": [
                "lint errors",
                "lint warnings",
                "code style",
                "unused imports",
                "fix formatting",
            ],
            "regex": [r"\b[EFW]\d{3}\b"],
            "require": [],
            "exclude": ["docs", "documentation"],
        },
        "checks": [],
        "file": str(ws.cards_dir / "fix-lint.yaml"),
    }
    table = cli("cards", "list").stdout.splitlines()
    assert table[0].split() == ["id", "agent", "version", "group", "priority", "min_score"]
    assert table[3].split() == ["fix-lint", "ruff-fixer", ">=1.0,<2", "code-change", "0", "1"]


def test_cards_list_refuses_an_invalid_card_set(cli: CliRunner, ws: Workspace) -> None:
    (ws.cards_dir / "zz.yaml").write_text("id: [\n")
    result = cli("cards", "list")
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: {ws.cards_dir / 'zz.yaml'}: line ")
    assert "Traceback" not in result.stderr


def test_numbers_are_fine_as_trigger_words(tmp_path: Path) -> None:
    path = tmp_path / "http.yaml"
    path.write_text("id: http\nagent: a\ntriggers: {keywords: [404, 500], phrases: [502]}\n")
    assert load_card(path).triggers.keywords == ["404", "500"]


def test_revision_depends_on_names_and_content_only(tmp_path: Path, ws: Workspace) -> None:
    before = cards_revision(ws.cards_dir)
    copy = tmp_path / "copy"
    shutil.copytree(ws.cards_dir, copy)
    assert cards_revision(copy) == before  # other directory, other mtimes: same revision
    (copy / "fix-lint.yaml").write_text((copy / "fix-lint.yaml").read_text() + "\n")
    assert cards_revision(copy) != before
    assert load_cards(ws.cards_dir).revision == before


def test_load_cards_raises_the_first_problem(ws: Workspace) -> None:
    (ws.cards_dir / "a-bad.yaml").write_text(GOOD.replace("id: good", "id: x\nwhat: 1"))
    with pytest.raises(ValidationFailed) as caught:
        load_cards(ws.cards_dir)
    assert str(caught.value) == (
        f"{ws.cards_dir / 'a-bad.yaml'}: what: unknown field (run `agentos cards lint`)"
    )
