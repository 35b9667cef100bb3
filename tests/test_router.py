"""The router: the matching rules of docs/formats.md, the compiled index, its cache, and
`agentos route`."""

from __future__ import annotations

import gc
import hashlib
import json
import marshal
import os
import random
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import re2
import yaml
from conftest import CliRunner, write_package

from agentos.errors import NotFound
from agentos.hub.store import Hub
from agentos.receipts import read_receipt, verify_chain
from agentos.routing.cards import Card, cards_revision, load_cards
from agentos.routing.index import FORMAT, Index, necessary_keys, normalize, reference_match
from agentos.routing.router import cache_dir, current_revision, decide, route
from agentos.shared import patterns
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


def write_card(ws: Workspace, card_id: str, triggers: dict[str, Any], **fields: Any) -> Path:
    data: dict[str, Any] = {
        "id": card_id,
        "agent": fields.pop("agent", "ruff-fixer"),
        **fields,
        "triggers": triggers,
    }
    path = ws.cards_dir / f"{card_id}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture
def bare(tmp_path: Path) -> Workspace:
    """A workspace with the bundled hub and no cards."""
    workspace, _ = init_workspace(tmp_path / "bare")
    for card in workspace.cards_dir.glob("*.yaml"):
        card.unlink()
    return workspace


def summary(ws: Workspace, request: str) -> dict[str, Any]:
    d = decide(ws, request)
    return {
        "decision": d.decision,
        "selected": [(s.card, s.score) for s in d.selected],
        "tied": d.tied,
        "rejected": {r.card: r.reason for r in d.rejected},
    }


# --- the matching rules, one row each -----------------------------------------------------

LINT = {"keywords": ["lint", "ruff"], "phrases": ["lint errors"], "regex": [r"\b[EFW]\d{3}\b"]}

RULES: list[tuple[str, list[dict[str, Any]], str, dict[str, Any]]] = [
    (
        "keyword-plus-one",
        [{"id": "a", "triggers": {"keywords": ["lint"]}}],
        "please lint this",
        {"decision": "route", "selected": [("a", 1)]},
    ),
    (
        "words-are-case-insensitive",
        [{"id": "a", "triggers": {"keywords": ["lint"]}}],
        "LINT the Parser",
        {"decision": "route", "selected": [("a", 1)]},
    ),
    (
        "stemming-tests-matches-test",
        [{"id": "a", "triggers": {"keywords": ["test"]}}],
        "the tests fail",
        {"decision": "route", "selected": [("a", 1)]},
    ),
    (
        "stemming-works-both-ways",
        [{"id": "a", "triggers": {"keywords": ["failures"]}}],
        "one failure",
        {"decision": "route", "selected": [("a", 1)]},
    ),
    (
        "stemming-running-matches-run",
        [{"id": "a", "triggers": {"phrases": ["run the tests"]}}],
        "Running the test now",
        {"decision": "route", "selected": [("a", 3)]},
    ),
    (
        "phrase-plus-three-when-consecutive",
        [{"id": "a", "triggers": {"phrases": ["lint errors"]}}],
        "fix the lint errors",
        {"decision": "route", "selected": [("a", 3)]},
    ),
    (
        "phrase-words-apart-do-not-count",
        [{"id": "a", "triggers": {"phrases": ["lint errors"]}}],
        "errors from lint",
        {"decision": "no_match"},
    ),
    (
        "scores-add-up-keyword-phrase-regex",
        [{"id": "a", "triggers": LINT}],
        "fix the lint errors: E501 and W291",
        {"decision": "route", "selected": [("a", 7)]},
    ),
    (
        "each-keyword-counts-once",
        [{"id": "a", "triggers": {"keywords": ["lint"]}}],
        "lint lint lint",
        {"decision": "route", "selected": [("a", 1)]},
    ),
    (
        "keywords-equal-after-stemming-count-once",
        [{"id": "a", "triggers": {"keywords": ["format", "formatting"]}}],
        "formatting and format",
        {"decision": "route", "selected": [("a", 1)]},
    ),
    (
        "regex-runs-on-the-raw-request",
        [{"id": "a", "triggers": {"regex": [r"src/\w+\.py:\d+"]}}],
        "crash at src/app.py:12",
        {"decision": "route", "selected": [("a", 3)]},
    ),
    (
        "regex-is-case-sensitive-unless-it-says-so",
        [{"id": "a", "triggers": {"regex": [r"\bE\d{3}\b"]}}],
        "e501 everywhere",
        {"decision": "no_match"},
    ),
    (
        "regex-inline-ignorecase",
        [{"id": "a", "triggers": {"regex": [r"(?i)\bE\d{3}\b"]}}],
        "e501 everywhere",
        {"decision": "route", "selected": [("a", 3)]},
    ),
    (
        "regex-sees-what-stemming-drops",
        [{"id": "a", "triggers": {"regex": [r"tests\b"]}}],
        "the test fails",
        {"decision": "no_match"},
    ),
    (
        "require-missing-rules-out",
        [{"id": "a", "triggers": {"keywords": ["fix", "bug"], "require": ["claude"]}}],
        "fix the bug",
        {"decision": "no_match", "rejected": {"a": "requires 'claude'"}},
    ),
    (
        "require-missing-names-each-word-missing",
        [{"id": "a", "triggers": {"keywords": ["fix"], "require": ["claude", "tests", "codex"]}}],
        "fix the tests",
        {"decision": "no_match", "rejected": {"a": "requires 'claude', 'codex'"}},
    ),
    (
        "require-present-matches",
        [{"id": "a", "triggers": {"keywords": ["fix", "bug"], "require": ["claude"]}}],
        "fix the bug with Claude",
        {"decision": "route", "selected": [("a", 2)]},
    ),
    (
        "require-is-stemmed",
        [{"id": "a", "triggers": {"keywords": ["fix"], "require": ["tests"]}}],
        "fix the test",
        {"decision": "route", "selected": [("a", 1)]},
    ),
    (
        "exclude-word-rules-out",
        [{"id": "a", "triggers": {"keywords": ["lint"], "exclude": ["docs"]}}],
        "lint the docs",
        {"decision": "no_match", "rejected": {"a": "excluded: the request has 'docs'"}},
    ),
    (
        "exclude-is-stemmed",
        [{"id": "a", "triggers": {"keywords": ["lint"], "exclude": ["doc"]}}],
        "lint the documents and docs",
        {"decision": "no_match", "rejected": {"a": "excluded: the request has 'doc'"}},
    ),
    (
        "exclude-phrase-needs-the-phrase",
        [{"id": "a", "triggers": {"keywords": ["lint"], "exclude": ["read me"]}}],
        "lint me and read it",
        {"decision": "route", "selected": [("a", 1)]},
    ),
    (
        "min-score-not-reached",
        [{"id": "a", "min_score": 2, "triggers": {"keywords": ["lint", "ruff"]}}],
        "lint it",
        {"decision": "no_match", "rejected": {"a": "score 1 is under min_score 2"}},
    ),
    (
        "min-score-reached",
        [{"id": "a", "min_score": 2, "triggers": {"keywords": ["lint", "ruff"]}}],
        "lint it with ruff",
        {"decision": "route", "selected": [("a", 2)]},
    ),
    (
        "higher-score-wins-the-group",
        [
            {"id": "a", "triggers": {"keywords": ["lint"]}},
            {"id": "b", "triggers": {"keywords": ["lint", "ruff"]}},
        ],
        "lint with ruff",
        {
            "decision": "route",
            "selected": [("b", 2)],
            "rejected": {"a": "lost to b in group 'default': score 1 < 2"},
        },
    ),
    (
        "priority-breaks-a-score-tie",
        [
            {"id": "a", "priority": 1, "triggers": {"keywords": ["lint"]}},
            {"id": "b", "triggers": {"keywords": ["lint"]}},
        ],
        "lint",
        {
            "decision": "route",
            "selected": [("a", 1)],
            "rejected": {"b": "lost to a in group 'default': same score 1, priority 0 < 1"},
        },
    ),
    (
        "groups-form-a-task-force-of-two",
        [
            {"id": "fix", "group": "code-change", "triggers": {"keywords": ["lint"]}},
            {
                "id": "tests",
                "agent": "test-runner",
                "group": "verify",
                "triggers": {"keywords": ["test"]},
            },
        ],
        "lint the code and run the tests",
        {"decision": "route", "selected": [("fix", 1), ("tests", 1)]},
    ),
    (
        "tie-on-score-and-priority-asks-to-clarify",
        [
            {"id": "a", "triggers": {"keywords": ["lint"]}},
            {"id": "b", "agent": "claude-coder", "triggers": {"keywords": ["lint"]}},
        ],
        "lint",
        {"decision": "clarify", "selected": [], "tied": ["a", "b"]},
    ),
    (
        "a-tie-in-one-group-is-clarify-even-if-others-are-clear",
        [
            {"id": "a", "triggers": {"keywords": ["lint"]}},
            {"id": "b", "triggers": {"keywords": ["lint"]}},
            {
                "id": "c",
                "group": "verify",
                "agent": "test-runner",
                "triggers": {"keywords": ["test"]},
            },
        ],
        "lint and test",
        {"decision": "clarify", "selected": [("c", 1)], "tied": ["a", "b"]},
    ),
    (
        "tie-below-the-top-is-not-a-tie",
        [
            {"id": "a", "triggers": {"keywords": ["lint", "ruff"]}},
            {"id": "b", "triggers": {"keywords": ["lint"]}},
            {"id": "c", "triggers": {"keywords": ["lint"]}},
        ],
        "ruff lint",
        {"decision": "route", "selected": [("a", 2)]},
    ),
    (
        "nothing-matches",
        [{"id": "a", "triggers": {"keywords": ["lint"]}}],
        "write a poem",
        {"decision": "no_match", "selected": [], "rejected": {}},
    ),
    (
        "no-installed-version-meets-the-constraint",
        [
            {"id": "new-lint", "version": ">=2", "priority": 5, "triggers": {"keywords": ["lint"]}},
            {"id": "old-lint", "version": ">=1.0,<2", "triggers": {"keywords": ["lint"]}},
        ],
        "lint",
        {
            "decision": "route",
            "selected": [("old-lint", 1)],
            "rejected": {
                "new-lint": "no installed version of ruff-fixer satisfies '>=2' (installed: 1.0.0)"
            },
        },
    ),
    (
        "unknown-agent-is-rejected-at-route-time",
        [{"id": "ghost", "agent": "no-such-agent", "triggers": {"keywords": ["lint"]}}],
        "lint",
        {
            "decision": "no_match",
            "rejected": {"ghost": "agent 'no-such-agent' is not installed in the hub"},
        },
    ),
]


@pytest.mark.parametrize(
    ("cards", "request_text", "expected"), [r[1:] for r in RULES], ids=[r[0] for r in RULES]
)
def test_routing_rules(
    bare: Workspace, cards: list[dict[str, Any]], request_text: str, expected: dict[str, Any]
) -> None:
    for card in cards:
        card = dict(card)
        write_card(bare, card.pop("id"), card.pop("triggers"), **card)
    got = summary(bare, request_text)
    for key, value in expected.items():
        assert got[key] == value, (key, got)


def test_selected_cards_carry_agent_version_fired_triggers_and_checks(bare: Workspace) -> None:
    write_card(
        bare,
        "fix-lint",
        LINT,
        group="code-change",
        priority=2,
        checks=[{"name": "lint clean", "run": "ruff check ."}],
    )
    d = decide(bare, "fix the lint errors, E501")
    assert [s.as_dict() for s in d.selected] == [
        {
            "card": "fix-lint",
            "agent": "ruff-fixer",
            "version": "1.0.0",
            "score": 7,
            "fired": ["keyword:lint", "phrase:lint errors", r"regex:\b[EFW]\d{3}\b"],
            "priority": 2,
            "group": "code-change",
            "checks": [{"name": "lint clean", "run": "ruff check .", "timeout": 300.0}],
        }
    ]
    assert d.selected[0].checks[0].run == "ruff check ."
    assert d.cards_revision == cards_revision(bare.cards_dir)
    assert d.hub_revision == Hub(bare.hub_dir).revision()


def test_a_cards_tests_check_takes_the_repositorys_timeout_unless_it_sets_one(
    bare: Workspace, tmp_path: Path
) -> None:
    """A `tests` check runs the repository's tests with the repository's timeout unless the
    check sets one: a card's checks reach the gate as the card wrote them, compiled now or
    read from the cache by a new process (the default timeout written into the index was
    taken for one the card set: 300 s for a suite the repository gives 1800)."""
    from agentos.gate.repo import RepoProfile
    from agentos.gate.selection import describe
    from agentos.routing import router

    checks = [
        {"name": "all", "tests": []},
        {"name": "quick", "tests": ["tests/test_a.py"], "timeout": 60},
        {"name": "lint", "run": "ruff check ."},
    ]
    write_card(bare, "suite", {"keywords": ["tests"]}, checks=checks)
    profile = RepoProfile(tmp_path, "agentos.yaml", "pytest", "pytest", None, None, timeout=1800)
    for _ in range(2):  # the second as a new process: the index is read from the cache
        [selected] = decide(bare, "run the tests").selected
        assert [describe(c, profile) for c in selected.checks] == [
            "the repository's tests (the whole suite): `pytest`, timeout 1800s",
            "the repository's tests (tests/test_a.py): `pytest tests/test_a.py`, timeout 60s",
            "`ruff check .`, timeout 300s",
        ]
        router._INDEXES.clear()


def fixer_versions(ws: Workspace, tmp_path: Path) -> Hub:
    """The workspace's hub with ``fixer`` 1.0.0, 1.4.0 and 2.0.0 installed (2.0.0 active)."""
    hub = Hub(ws.hub_dir)
    for version in ("1.0.0", "1.4.0", "2.0.0"):
        hub.install(str(write_package(tmp_path / f"pkg-{version}", name="fixer", version=version)))
    return hub


def test_version_constraint_picks_the_highest_fitting_installed_version(
    bare: Workspace, tmp_path: Path
) -> None:
    hub = fixer_versions(bare, tmp_path)
    write_card(bare, "pinned", {"keywords": ["lint"]}, agent="fixer", version="<2")
    write_card(bare, "latest", {"keywords": ["ruff"]}, agent="fixer", group="other")
    d = decide(bare, "lint with ruff")
    assert {s.card: s.version for s in d.selected} == {"pinned": "1.4.0", "latest": "2.0.0"}
    hub.use("fixer@1.0.0")  # a rollback is seen at once, and changes the hub revision
    d2 = decide(bare, "lint with ruff")
    assert {s.card: s.version for s in d2.selected} == {"pinned": "1.0.0", "latest": "1.0.0"}
    assert d2.hub_revision != d.hub_revision


def test_run_agent_with_a_version_chooses_that_version_not_the_active_one(
    bare: Workspace, tmp_path: Path
) -> None:
    hub = fixer_versions(bare, tmp_path)
    write_card(bare, "lint", {"keywords": ["lint"]})
    d = decide(bare, "fix the lint", agent="fixer@1.4.0")
    assert (d.decision, d.decided_by) == ("route", "--agent")
    assert (d.cards_revision, d.hub_revision) == (cards_revision(bare.cards_dir), hub.revision())
    assert [s.as_dict() for s in d.selected] == [
        {
            "card": "(--agent)",
            "agent": "fixer",
            "version": "1.4.0",
            "score": 0,
            "fired": [],
            "priority": 0,
            "group": "default",
            "checks": [],
        }
    ]
    assert (d.rejected, d.tied) == ([], [])
    routed, receipt = route(bare, "fix the lint", agent="fixer@1.4.0")
    assert routed == d
    assert "\n    agent: fixer@1.4.0\n" in read_receipt(bare, receipt.id)
    assert [s.version for s in decide(bare, "fix the lint", agent="fixer").selected] == ["2.0.0"]
    with pytest.raises(NotFound) as missing:
        decide(bare, "fix the lint", agent="fixer@9.9.9")
    assert str(missing.value) == (
        "--agent: no installed version of fixer satisfies '==9.9.9' "
        "(installed: 1.0.0, 1.4.0, 2.0.0)"
    )


def test_the_default_agent_takes_what_no_card_matches_and_joins_verifiers_for_a_change(
    bare: Workspace, tmp_path: Path
) -> None:
    Hub(bare.hub_dir).install(str(write_package(tmp_path / "writer", name="writer")))
    write_card(bare, "tests", {"keywords": ["tests"]}, group="verify")
    write_card(bare, "lint", {"keywords": ["lint"]})
    write_card(bare, "apples", {"keywords": ["apples"], "require": ["pears"]})

    def routed(default: str, request: str, change: bool = False) -> tuple[Any, ...]:
        bare.settings_file.write_text(f"run: {{guardian: false, default_agent: {default}}}\n")
        ws = Workspace(bare.root)
        d = decide(ws, request, change=True) if change else decide(ws, request)
        return (
            d.decision,
            d.decided_by,
            [(s.card, s.agent, s.version, s.group) for s in d.selected],
            [r.as_dict() for r in d.rejected],
            (d.cards_revision, d.hub_revision),
        )

    revisions = (cards_revision(bare.cards_dir), Hub(bare.hub_dir).revision())
    writer = ("(run.default_agent)", "writer", "1.0.0", "default")
    tests = ("tests", "ruff-fixer", "1.0.0", "verify")
    lint = ("lint", "ruff-fixer", "1.0.0", "default")
    # No card matches (one fired, but requires a word the request lacks): the default agent.
    assert routed("writer", "apples please") == (
        "route",
        "run.default_agent",
        [writer],
        [{"card": "apples", "reason": "requires 'pears'"}],
        revisions,
    )
    # Only verifiers matched a request for a change: the default agent makes it.
    assert routed("writer", "run the tests", change=True) == (
        "route",
        "cards and run.default_agent",
        [writer, tests],
        [],
        revisions,
    )
    # Not asked to change anything, a card of another group, or the verifier's own agent:
    # the cards decide alone.
    assert routed("writer", "run the tests") == ("route", "cards", [tests], [], revisions)
    assert route(Workspace(bare.root), "run the tests")[0].decided_by == "cards"
    assert route(Workspace(bare.root), "run the tests", change=True)[0].decided_by == (
        "cards and run.default_agent"
    )
    assert routed("writer", "run the tests and fix the lint", change=True) == (
        "route",
        "cards",
        [lint, tests],
        [],
        revisions,
    )
    assert routed("ruff-fixer", "run the tests", change=True) == (
        "route",
        "cards",
        [tests],
        [],
        revisions,
    )
    # No default agent: nothing matched is no match.
    bare.settings_file.write_text("run: {guardian: false}\n")
    assert decide(Workspace(bare.root), "apples please").decision == "no_match"
    # A default agent that is not installed is named with the setting.
    for request, change in (("apples please", False), ("run the tests", True)):
        with pytest.raises(NotFound) as missing:
            routed("nobody", request, change)
        assert str(missing.value) == (
            f"{bare.settings_file}: run.default_agent: agent 'nobody' is not installed in the hub"
        )


# --- the index is the reference, only faster ----------------------------------------------


def _random_cards(rng: random.Random, vocab: list[str], n: int) -> list[Card]:
    cards = []
    for i in range(n):

        def pick(k: int) -> list[str]:
            return rng.sample(vocab, k)

        triggers: dict[str, Any] = {
            "keywords": pick(rng.randint(1, 4)) + [" ".join(pick(2))] * rng.randint(0, 1),
            "phrases": [" ".join(pick(rng.randint(2, 3))) for _ in range(rng.randint(0, 2))],
            "regex": rng.choice(
                [[], [rf"\b{rng.choice(vocab)}-\d+"], ["(?i)X[0-9]{2}"], [r"\d{4}|zz"], ["[a-c]+q"]]
            ),
            "require": pick(rng.randint(1, 2)) if rng.random() < 0.2 else [],
            "exclude": [" ".join(pick(rng.randint(1, 2)))] if rng.random() < 0.3 else [],
        }
        cards.append(
            Card.model_validate(
                {
                    "id": f"c{i:03d}",
                    "agent": "ruff-fixer",
                    "group": f"g{rng.randint(0, 3)}",
                    "min_score": rng.randint(1, 4),
                    "triggers": triggers,
                }
            )
        )
    return cards


def test_index_gives_exactly_the_reference_evaluators_answers() -> None:
    rng = random.Random(1234)
    vocab = [
        "lint",
        "tests",
        "testing",
        "fix",
        "bug",
        "docs",
        "ruff",
        "format",
        "formatting",
        "run",
        "the",
        "a",
        "parser",
        "claude",
        "failures",
        "failing",
        "style",
        "code",
    ]
    cards = _random_cards(rng, vocab, 200)
    index = Index.build(cards, "rev")
    reloaded = Index.loads(index.dumps())
    for _ in range(400):
        words = [rng.choice(vocab) for _ in range(rng.randint(0, 12))]
        if rng.random() < 0.3:
            words.append(rng.choice(["x12", "X99", "lint-42", "1234", "abcq", "zz", "E501"]))
        request = " ".join(w.upper() if rng.random() < 0.2 else w for w in words)
        expected = reference_match(cards, request)
        for idx in (index, reloaded):
            got = [(idx.card(h.card)[0], h.score, h.fired, h.reason) for h in idx.match(request)]
            assert got == expected, request


PATTERNS = [
    r"\bE\d{3}\b",
    r"(?i)traceback",
    r"foo(bar)+baz",
    r"(?:abc|xyz)\d",
    r"a|\d",
    r"(?i:KELVIN)",
    r"[0-9]+",
    r"x{2,}yy",
    r"(?i)sitting",
    r"(?i)ISTANBUL",
    r"(?i)hel{2}o",
    r"\.py\b",
    r"(ab)?cd",
    r"(?:xyz)?a",
    r"q*rst",
    r"[[:alpha:]]+\]",  # RE2 reads a POSIX class where Python reads a nested set
    r"cd$",
    r"a\.py\Z",
]
SAMPLES = [
    "E501 here",
    "TRACEBACK (most recent)",
    "foobarbarbaz",
    "xyz1",
    "9",
    "\u212aelvin",
    "kelvin",
    "xxxyy",
    "\u017fitting",
    "\u0130stanbul",
    "hello",
    "a.py",
    "cd",
    "rst",
    "nothing",
    "\u0131stanbul",
]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_regex_prefilter_never_skips_a_regex_that_matches(pattern: str) -> None:
    keys = necessary_keys(pattern)
    regex = patterns.compile(pattern)  # the engine the router matches with
    for sample in SAMPLES:
        if regex.search(sample) and keys is not None:
            text = normalize(sample)
            assert any(k in text for k in keys), (pattern, sample, keys)


def test_the_fold_table_knows_every_non_ascii_character_re_matches_to_ascii() -> None:
    """The prefilter's soundness rests on this table; a new Unicode release may add one."""
    import _sre  # type: ignore[import-not-found]  # CPython's regex engine: no stubs
    from re._casefix import _EXTRA_CASES  # type: ignore[import-not-found]

    found = {chr(cp) for cp in range(0x80, 0x110000) if _sre.unicode_tolower(cp) < 0x80}
    for cp, extras in _EXTRA_CASES.items():
        found |= {chr(e) for e in (cp, *extras) if e >= 0x80 and min(cp, *extras) < 0x80}
    assert found == {"\u0130", "\u0131", "\u017f", "\u212a"}
    assert all(len(normalize(c)) == 1 and normalize(c).isascii() for c in found)


def test_the_fold_table_knows_every_non_ascii_character_re2_matches_to_ascii() -> None:
    everything = "".join(chr(c) for c in range(0x80, 0x110000) if not 0xD800 <= c < 0xE000)
    found = {m.group() for m in re2.finditer(r"(?i)[a-z]", everything)}
    assert found == {"\u017f", "\u212a"}  # a subset of what Python's re folds
    assert all(len(normalize(c)) == 1 and normalize(c).isascii() for c in found)


def test_regex_prefilter_reads_literals_off_the_pattern() -> None:
    assert necessary_keys(r"\bE\d{3}\b") == frozenset({"e"})
    assert necessary_keys(r"(?i)traceback") == frozenset({"tra"})
    assert necessary_keys(r"(?:abc|xyz)\d") == frozenset({"abc", "xyz"})
    assert necessary_keys(r"[0-9]+") is None
    assert necessary_keys(r"a|\d") is None
    assert necessary_keys(r"[[:alpha:]]x") is None  # Python's parse may not be RE2's
    # Of the literals every match holds, the most selective: the longest (here not the
    # first), then the fewest alternatives; a space is a literal like any other.
    assert necessary_keys(r"a.*traceback") == frozenset({"tra"})
    assert necessary_keys(r"(?:abc|def|ghi)\s(?:jkl|mno)") == frozenset({"jkl", "mno"})
    assert necessary_keys(r"x y") == frozenset({"x y"})
    # A literal in a group, or repeated at least once, is needed; an optional one is not.
    assert necessary_keys(r"(abc)\d") == frozenset({"abc"})
    assert necessary_keys(r"\d(?:abc)+") == frozenset({"abc"})
    assert necessary_keys(r"(?:abc)*d") == frozenset({"d"})


# --- the compiled cards, cached by revision -----------------------------------------------


def test_compiled_cards_are_cached_on_disk_by_the_card_sets_revision(ws: Workspace) -> None:
    d = decide(ws, "fix the lint errors")
    assert cache_dir(ws) == ws.root / ".agentos" / "cache"
    cached = list(cache_dir(ws).glob("router-*.idx"))
    # The name says the index's format and the Python that wrote it: marshal's format may
    # change between Python versions.
    python = f"py{sys.version_info.major}{sys.version_info.minor}"
    assert [p.name for p in cached] == [f"router-{d.cards_revision}-f{FORMAT}-{python}.idx"]
    assert d.cards_revision == cards_revision(ws.cards_dir) == current_revision(ws)


def test_a_process_that_reads_the_cached_cards_keeps_its_garbage_collector_on(
    ws: Workspace,
) -> None:
    """The index is read from the cache with the garbage collector paused (marshal makes
    many objects and no cycles); a process that routes (the MCP server, all day) has it on
    again after, and one that had it off keeps it off."""
    from agentos.routing import router

    before = decide(ws, "fix the lint errors").as_dict()
    for enabled in (True, False):
        router._INDEXES.clear()  # as a new process: the index is read from the cache
        gc.enable() if enabled else gc.disable()
        try:
            assert decide(ws, "fix the lint errors").as_dict() == before
            assert gc.isenabled() is enabled
        finally:
            gc.enable()


def test_an_edited_card_is_seen_by_the_very_next_decision(bare: Workspace) -> None:
    path = write_card(bare, "a", {"keywords": ["lint"]})
    first = decide(bare, "lint ruff")
    assert [s.fired for s in first.selected] == [["keyword:lint"]]
    # Same size, same second: only the content tells the two apart.
    path.write_text(path.read_text().replace("lint", "ruff"))
    second = decide(bare, "lint ruff")
    assert [s.fired for s in second.selected] == [["keyword:ruff"]]
    assert second.cards_revision != first.cards_revision
    assert second.cards_revision == cards_revision(bare.cards_dir)


def _replace_folder(ws: Workspace) -> None:
    import shutil

    kept = {p.name: p.read_text() for p in ws.cards_dir.iterdir()}
    shutil.rmtree(ws.cards_dir)
    ws.cards_dir.mkdir()
    for name, text in kept.items():
        (ws.cards_dir / name).write_text(text.replace("lint", "ruff"))


@pytest.mark.parametrize(
    "change",
    {
        "edited in place": lambda ws: (ws.cards_dir / "a.yaml").write_text(
            (ws.cards_dir / "a.yaml").read_text().replace("lint", "ruff")
        ),
        "replaced by rename": lambda ws: (
            (ws.cards_dir / ".new").write_text(
                (ws.cards_dir / "a.yaml").read_text().replace("lint", "ruff")
            ),
            (ws.cards_dir / ".new").rename(ws.cards_dir / "a.yaml"),
        ),
        "removed": lambda ws: (ws.cards_dir / "a.yaml").unlink(),
        "added": lambda ws: write_card(ws, "b", {"keywords": ["ruff"]}),
        "folder replaced": _replace_folder,
    }.items(),
    ids=lambda item: item[0],
)
def test_a_process_that_routes_again_sees_every_kind_of_card_change(
    bare: Workspace, change: tuple[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentos.routing import router

    write_card(bare, "a", {"keywords": ["lint"]})
    first = decide(bare, "lint ruff")
    # The second look starts the folder's watch (a process that routes once never pays for
    # one); from then on an unchanged folder costs no look at any card.
    assert decide(bare, "lint ruff").cards_revision == first.cards_revision
    scans: list[Workspace] = []
    real_scan = router._scan_revision

    def scan(ws: Workspace, *args: Any, **kwargs: Any) -> Any:
        scans.append(ws)
        return real_scan(ws, *args, **kwargs)

    monkeypatch.setattr(router, "_scan_revision", scan)
    assert decide(bare, "lint ruff").cards_revision == first.cards_revision
    assert not scans  # nothing changed: no card was looked at

    change[1](bare)
    again = decide(bare, "lint ruff")

    assert again.cards_revision == cards_revision(bare.cards_dir) != first.cards_revision
    assert len(scans) == 1
    assert decide(bare, "lint ruff").cards_revision == again.cards_revision
    assert len(scans) == 1


@pytest.mark.parametrize(
    "spoilt",
    [
        b"garbage",
        b"",  # torn before its first byte
        marshal.dumps({("ruff-fixer", None): 5}),  # marshal data of another shape
        marshal.dumps({("ruff-fixer", None): (True, "1.0.0", "more")}),
        marshal.dumps(5),
        None,  # each file replaced by a folder: it cannot be read
    ],
    ids=["garbage", "empty", "another-shape", "a-longer-entry", "a-number", "a-folder"],
)
def test_a_corrupt_cache_is_rebuilt_and_routes_the_same(
    ws: Workspace, spoilt: bytes | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentos.routing import router

    monkeypatch.setattr(router, "_resolved", ("", {}))  # the hub's resolutions: none yet
    before = decide(ws, "run the tests and fix the lint").as_dict()
    assert len(list(cache_dir(ws).glob("hub-resolved-*.marshal"))) == 1
    for path in cache_dir(ws).iterdir():
        if spoilt is None:
            path.unlink()
            path.mkdir()
        else:
            path.write_bytes(spoilt)
    # As a new process: nothing in memory.
    router._INDEXES.clear()
    router._STATS.clear()
    monkeypatch.setattr(router, "_resolved", ("", {}))
    assert decide(ws, "run the tests and fix the lint").as_dict() == before


@pytest.mark.parametrize(
    ("kept", "version", "rejected"),
    [
        ((True, "0.9.0"), "0.9.0", None),
        ((False, "gone for good"), None, "gone for good"),
        # Entries of another shape are not taken: the agent is resolved again.
        ((1, "0.9.0"), "1.0.0", None),
        (("yes", "0.9.0"), "1.0.0", None),
        ((True, 9), "1.0.0", None),
    ],
    ids=["a-version", "not-found", "fits-not-a-bool", "fits-a-string", "version-not-a-string"],
)
def test_a_new_process_takes_the_agents_resolved_for_the_hubs_revision_from_the_cache(
    ws: Workspace,
    monkeypatch: pytest.MonkeyPatch,
    kept: tuple[Any, Any],
    version: str | None,
    rejected: str | None,
) -> None:
    """A card's agent and constraint, resolved against the hub, are kept in the cache by
    the hub's revision, and a new process takes them from there (it need not import the
    version parser): what the cache says for this revision is what the card gets."""
    from agentos.routing import router

    monkeypatch.setattr(router, "_resolved", ("", {}))
    d = decide(ws, "fix the lint errors")
    assert [(s.card, s.version) for s in d.selected] == [("fix-lint", "1.0.0")]
    [path] = cache_dir(ws).glob("hub-resolved-*.marshal")
    assert path.name == f"hub-resolved-{d.hub_revision}.marshal"
    entries = marshal.loads(path.read_bytes())
    assert entries[("ruff-fixer", ">=1.0,<2")] == (True, "1.0.0")
    entries[("ruff-fixer", ">=1.0,<2")] = kept
    path.write_bytes(marshal.dumps(entries))

    monkeypatch.setattr(router, "_resolved", ("", {}))  # as a new process
    d = decide(ws, "fix the lint errors")
    assert [(s.card, s.version) for s in d.selected] == ([("fix-lint", version)] if version else [])
    assert {r.card: r.reason for r in d.rejected}.get("fix-lint") == rejected


def test_a_card_nothing_installed_satisfies_is_rejected_again_by_a_new_process(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentos.routing import router

    path = ws.cards_dir / "fix-lint.yaml"
    path.write_text(path.read_text().replace('">=1.0,<2"', '">=3"'))
    reason = "no installed version of ruff-fixer satisfies '>=3' (installed: 1.0.0)"
    for _ in range(2):  # the second as a new process, from the resolutions kept
        monkeypatch.setattr(router, "_resolved", ("", {}))
        d = decide(ws, "clean up the lint errors")
        assert (d.decision, [r.as_dict() for r in d.rejected]) == (
            "no_match",
            [{"card": "fix-lint", "reason": reason}],
        )


def test_the_hubs_resolutions_of_an_older_hub_revision_are_removed(
    bare: Workspace, tmp_path: Path
) -> None:
    write_card(bare, "a", {"keywords": ["lint"]}, agent="fixer")
    hub = Hub(bare.hub_dir)
    for version in ("1.0.0", "2.0.0"):
        hub.install(str(write_package(tmp_path / f"pkg-{version}", name="fixer", version=version)))
        d = decide(bare, "lint")
        assert [s.version for s in d.selected] == [version]
        assert [p.name for p in cache_dir(bare).glob("hub-resolved-*.marshal")] == [
            f"hub-resolved-{d.hub_revision}.marshal"
        ]


def test_a_workspace_whose_cache_cannot_be_written_still_routes_the_same(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from agentos.routing import router

    request = "run the tests and fix the lint"
    before = decide(ws, request).as_dict()
    shutil.rmtree(cache_dir(ws))
    cache_dir(ws).write_text("a file where the cache folder was\n")
    for _ in range(2):  # as a new process, with nothing in memory
        router._INDEXES.clear()
        router._STATS.clear()
        monkeypatch.setattr(router, "_resolved", ("", {}))
        caplog.clear()
        with caplog.at_level("WARNING", logger="agentos.routing.router"):
            assert decide(Workspace(ws.root), request).as_dict() == before
        assert [(r.name, r.getMessage()) for r in caplog.records] == [
            (
                "agentos.routing.router",
                f"cannot cache the compiled cards in {cache_dir(ws)}: "
                f"[Errno 17] File exists: '{cache_dir(ws)}'",
            )
        ]
    _, receipt = route(Workspace(ws.root), request)
    assert "decision: route\n" in read_receipt(ws, receipt.id)


def test_an_invalid_card_stops_routing_with_file_and_field(cli: CliRunner, ws: Workspace) -> None:
    (ws.cards_dir / "broken.yaml").write_text(
        "id: broken\nagent: ruff-fixer\nsize: 3\ntriggers: {keywords: [x]}\n"
    )
    result = cli("route", "fix the lint")
    assert result.returncode == 2
    assert result.stderr == (
        f"error: {ws.cards_dir / 'broken.yaml'}: size: unknown field (run `agentos cards lint`)\n"
    )
    assert "Traceback" not in result.stdout + result.stderr


# --- hostile regexes -------------------------------------------------------------------------

CATASTROPHIC = r"(a+)+$"  # Python's re tries 2^n ways on n a's and a b


def test_a_catastrophic_card_regex_decides_on_a_10000_character_request(
    bare: Workspace,
) -> None:
    write_card(bare, "as", {"regex": [CATASTROPHIC]})
    write_card(bare, "lint", {"keywords": ["lint"]}, group="other")
    request = "lint " + "a" * 9_994 + "b"  # 10,000 characters, ending in a b: no match
    assert len(request) == 10_000
    assert summary(bare, request) == {
        "decision": "route",
        "selected": [("lint", 1)],
        "tied": [],
        "rejected": {},
    }
    assert summary(bare, request[:-1] + "a") == {
        "decision": "route",
        "selected": [("as", 3), ("lint", 1)],
        "tied": [],
        "rejected": {},
    }
    assert summary(bare, "a" * 40 + "b\n")["selected"] == []


def test_agentos_route_with_a_catastrophic_card_answers(cli: CliRunner, bare: Workspace) -> None:
    write_card(bare, "as", {"regex": [CATASTROPHIC]})
    # 40 a's and a b hung `agentos route` for hours; the timeout fails the regression instead.
    result = cli(
        "--workspace", str(bare.root), "route", "a" * 40 + "b", "--json", workspace=None, timeout=60
    )
    assert (result.returncode, result.stderr) == (1, "")
    assert json.loads(result.stdout)["decision"] == "no_match"


@pytest.mark.parametrize(
    ("pattern", "request_text", "matches"),
    [
        (r"bug$", "fix the bug\n", True),  # `$` before a final newline, as in Python
        (r"bug$", "fix the bug\n\n", False),
        (r"bug\Z", "fix the bug\n", False),  # \Z: the very end
        (r"bug\Z", "fix the bug", True),
        (r"(?i)bug", "BUG", True),
        (r"caf\w", "caf\udce9 is not UTF-8", False),  # a lone surrogate matches nothing
    ],
    ids=["dollar-final-newline", "dollar-two-newlines", "Z-newline", "Z-end", "i", "surrogate"],
)
def test_card_regexes_keep_pythons_anchors_and_never_fail_on_text(
    pattern: str, request_text: str, matches: bool
) -> None:
    assert patterns.compile(pattern).search(request_text) is matches


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        (
            r"(?=lint)\w+",
            "not supported by RE2, which matches in linear time (invalid perl operator: (?=); "
            "lookarounds, backreferences, possessive repeats and atomic groups are not",
        ),
        (
            r"(\w)\1",
            "not supported by RE2, which matches in linear time (invalid escape sequence: \\1); "
            "lookarounds, backreferences, possessive repeats and atomic groups are not",
        ),
        (
            r"\w{1000}",
            "too large: 3004 RE2 instructions, over the 1000 that keep a search fast; use "
            "smaller counted repeats ({n}) or fewer alternatives",
        ),
    ],
    ids=["lookahead", "backreference", "too-large"],
)
def test_a_regex_re2_cannot_run_in_linear_time_is_bad_input(
    cli: CliRunner, bare: Workspace, pattern: str, message: str
) -> None:
    path = write_card(bare, "rx", {"regex": [pattern]})
    result = cli("--workspace", str(bare.root), "route", "fix it", workspace=None)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        f"error: {path}: triggers.regex[0]: {pattern!r} is not a valid regular expression: "
        f"{message} (run `agentos cards lint`)\n"
    )


# --- agentos route --------------------------------------------------------------------------


def _blank(doc: dict[str, Any]) -> dict[str, Any]:
    return {**doc, "receipt": "<id>", "cards_revision": "<rev>", "hub_revision": "<rev>"}


def test_route_json_is_the_decision_and_the_receipt(cli: CliRunner, ws: Workspace) -> None:
    result = cli("route", "fix the lint errors in app.py (E501)", "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert _blank(doc) == {
        "decision": "route",
        "decided_by": "cards",
        "selected": [
            {
                "card": "fix-lint",
                "agent": "ruff-fixer",
                "version": "1.0.0",
                "score": 7,
                "fired": ["keyword:lint", "phrase:lint errors", r"regex:\b[EFW]\d{3}\b"],
                "priority": 0,
                "group": "code-change",
                "checks": [],
            }
        ],
        "rejected": [
            {"card": "claude-code", "reason": "requires 'claude'"},
            {"card": "codex", "reason": "requires 'codex'"},
            {"card": "gemini-cli", "reason": "requires 'gemini'"},
        ],
        "tied": [],
        "cards_revision": "<rev>",
        "hub_revision": "<rev>",
        "dry_run": False,
        "receipt": "<id>",
    }
    assert doc["receipt"] == "00000001"
    text = read_receipt(ws, doc["receipt"])
    assert "request: fix the lint errors in app.py (E501)\n" in text
    assert "    agent: ruff-fixer@1.0.0\n" in text
    assert f"cards_revision: {doc['cards_revision']}\n" in text
    assert f"hub_revision: {doc['hub_revision']}\n" in text


def test_route_dry_run_decides_the_same_and_writes_no_receipt(cli: CliRunner) -> None:
    """`route --dry-run` asks without recording: the same decision, no receipt (the count
    is unchanged), and the JSON says it was a dry run; a plain `route` then writes one."""

    def receipts() -> int:
        listed = cli("receipts", "list", "--json")
        assert listed.returncode == 0, listed.stderr
        return len(json.loads(listed.stdout)["receipts"])

    request = "fix the lint errors in app.py (E501)"
    assert cli("route", request).returncode == 0
    before = receipts()
    dry = cli("route", "--dry-run", request, "--json")
    assert dry.returncode == 0, dry.stderr
    doc = json.loads(dry.stdout)
    assert (doc["dry_run"], doc["receipt"], receipts()) == (True, None, before)
    text = cli("route", "--dry-run", request)
    assert text.returncode == 0, text.stderr
    assert text.stdout.splitlines()[-1] == "receipt: none (dry run)"
    assert receipts() == before
    refused = cli("route", "--dry-run", "--run", "run-1", request)
    assert (refused.returncode, refused.stderr) == (
        2,
        "error: --run: a dry run writes no receipt to link to a run\n",
    )
    plain = json.loads(cli("route", request, "--json").stdout)
    assert (plain["dry_run"], receipts()) == (False, before + 1)
    assert _blank(plain) == _blank(doc) | {"dry_run": False}
    no_match = cli("route", "--dry-run", "write a poem about the sea", "--json")
    assert (no_match.returncode, json.loads(no_match.stdout)["decision"]) == (1, "no_match")
    assert receipts() == before + 1


def test_route_prints_the_decision_table_and_receipt(cli: CliRunner) -> None:
    result = cli("route", "run the tests")
    assert result.returncode == 0
    assert result.stdout == (
        "decision: route\n"
        "card       agent              score  group   fired\n"
        "run-tests  test-runner@1.1.0  5      verify  "
        "keyword:test, keyword:run, phrase:run the tests\n"
        "receipt: 00000001\n"
    )


@pytest.mark.parametrize(
    ("request_text", "code", "decision"),
    [
        ("write a poem about the sea", 1, "no_match"),
        ("fix the bug using codex or using gemini", 1, "clarify"),
        ("run the test suite", 0, "route"),
    ],
    ids=["no-match-exits-1", "clarify-exits-1", "route-exits-0"],
)
def test_route_exit_status_says_whether_a_task_force_was_chosen(
    cli: CliRunner, request_text: str, code: int, decision: str
) -> None:
    result = cli("route", request_text, "--json")
    assert result.returncode == code
    assert json.loads(result.stdout)["decision"] == decision


def test_clarify_names_the_tied_cards(cli: CliRunner) -> None:
    result = cli("route", "fix the bug using codex or using gemini", "--json")
    assert json.loads(result.stdout)["tied"] == ["codex", "gemini-cli"]


def test_an_empty_request_is_bad_input(cli: CliRunner) -> None:
    result = cli("route", "  ")
    assert (result.returncode, result.stdout, result.stderr) == (
        2,
        "",
        "error: REQUEST: the request is empty\n",
    )


def test_a_card_nothing_installed_satisfies_is_rejected_in_the_receipt(
    cli: CliRunner, ws: Workspace
) -> None:
    path = ws.cards_dir / "fix-lint.yaml"
    path.write_text(path.read_text().replace('">=1.0,<2"', '">=3"'))
    doc = json.loads(cli("route", "clean up the lint errors", "--json").stdout)
    reason = "no installed version of ruff-fixer satisfies '>=3' (installed: 1.0.0)"
    assert doc["decision"] == "no_match"
    assert doc["rejected"] == [{"card": "fix-lint", "reason": reason}]
    assert f"  - card: fix-lint\n    reason: {reason}\n" in read_receipt(ws, doc["receipt"])


def test_route_receipt_is_linked_to_a_run(ws: Workspace) -> None:
    _, receipt = route(ws, "run the tests", run_id="run-7")
    assert receipt.run_id == "run-7"
    assert "\nrun: run-7\n" in read_receipt(ws, receipt.id)


def test_the_route_receipt_holds_the_whole_decision(bare: Workspace) -> None:
    """Who was chosen, with their version, score, priority, group, what fired and their
    checks' names; the tie; each card ruled out and why; the two revisions."""
    checks = [{"name": "lint clean", "run": "ruff check ."}, {"name": "tests", "tests": []}]
    write_card(bare, "fix", {"keywords": ["lint"]}, group="code-change", priority=2, checks=checks)
    write_card(bare, "weak", {"keywords": ["lint"]}, group="code-change")
    write_card(bare, "t1", {"keywords": ["docs"]}, group="docs")
    write_card(bare, "t2", {"keywords": ["docs"]}, group="docs")
    write_card(bare, "ex", {"keywords": ["lint"], "exclude": ["docs"]}, group="other")
    decision, receipt = route(bare, "fix the lint and the docs")
    text = read_receipt(bare, receipt.id)
    assert receipt.kind == "route" and "\nkind: route\n" in text
    body = text.split("\nrequest: fix the lint and the docs\n", 1)[1].split("\nsigned_from:")[0]
    assert body == (
        "decision: clarify\n"
        "decided_by: cards\n"
        "selected:\n"
        "  - card: fix\n"
        "    agent: ruff-fixer@1.0.0\n"
        "    score: 1\n"
        "    priority: 2\n"
        "    group: code-change\n"
        "    fired:\n"
        "      - keyword:lint\n"
        "    checks:\n"
        "      - lint clean\n"
        "      - tests\n"
        "tied:\n"
        "  - t1\n"
        "  - t2\n"
        "rejected:\n"
        "  - card: ex\n"
        "    reason: excluded: the request has 'docs'\n"
        "  - card: weak\n"
        "    reason: lost to fix in group 'code-change': same score 1, priority 0 < 2\n"
        f"cards_revision: {cards_revision(bare.cards_dir)}\n"
        f"hub_revision: {Hub(bare.hub_dir).revision()}"
    )
    assert decision.receipt_fields()["decision"] == "clarify"
    # A card without checks has no checks line.
    write_card(bare, "fix", {"keywords": ["lint"]}, group="code-change", priority=2)
    _, receipt = route(bare, "fix the lint")
    assert "checks" not in read_receipt(bare, receipt.id)


def test_redacted_workspace_keeps_only_the_requests_hash(ws: Workspace) -> None:
    ws.settings_file.write_text("receipts: {redact: true}\n")
    ws = Workspace(ws.root)  # settings are read once per Workspace
    _, receipt = route(ws, "fix the lint errors in secret_project.py")
    text = read_receipt(ws, receipt.id)
    assert "secret_project" not in text
    digest = hashlib.sha256(b"fix the lint errors in secret_project.py").hexdigest()
    assert f"\nrequest_sha256: {digest}\n" in text


@pytest.mark.slow
def test_the_same_request_gets_the_same_decision_in_40_processes(ws: Workspace) -> None:
    request = "fix the lint errors and run the tests, E501 in parser.py"

    def one(seed: int) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "PYTHONHASHSEED": str(seed)}  # set and dict order vary per process
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "agentos",
                "--workspace",
                str(ws.root),
                "route",
                request,
                "--json",
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(one, range(40)))  # 40 hash seeds: the suite's time is dear
    assert all(r.returncode == 0 for r in results), results[0].stderr
    docs = [json.loads(r.stdout) for r in results]
    receipts = sorted(d.pop("receipt") for d in docs)
    assert all(d == docs[0] for d in docs)
    assert [s["card"] for s in docs[0]["selected"]] == ["fix-lint", "run-tests"]
    assert receipts == [f"{i:08d}" for i in range(1, 41)]  # one each, no fork, no gap
    assert verify_chain(ws) == []
    bodies = {
        read_receipt(ws, r).split("\nrequest:", 1)[1].split("\nprevious:")[0] for r in receipts
    }
    assert len(bodies) == 1


def test_cards_load_in_file_order_but_decide_in_id_order(bare: Workspace) -> None:
    write_card(bare, "zeta", {"keywords": ["lint"]}, group="z")
    write_card(bare, "alpha", {"keywords": ["lint"]}, group="a")
    (bare.cards_dir / "zeta.yaml").rename(bare.cards_dir / "0-first.yaml")
    assert [c.id for c in load_cards(bare.cards_dir).cards] == ["zeta", "alpha"]
    assert [s.card for s in decide(bare, "lint").selected] == ["alpha", "zeta"]


def test_a_process_routing_in_many_workspaces_keeps_few_watches(tmp_path: Path) -> None:
    from agentos.routing import router

    once, _ = init_workspace(tmp_path / "once")
    assert decide(once, "fix the lint errors").decision == "route"
    assert once.cards_dir not in router._WATCHES  # routed once: nothing to watch for
    for i in range(12):  # routed again: watched from the second look
        ws, _ = init_workspace(tmp_path / f"ws{i}")
        assert decide(ws, "fix the lint errors").decision == "route"
        assert decide(ws, "fix the lint errors").decision == "route"
    assert 0 < len(router._WATCHES) <= router._MAX_WATCHES
    assert all(w.active for w in router._WATCHES.values())


def test_a_folder_watched_anew_takes_no_other_folders_watch(tmp_path: Path) -> None:
    """A cards folder replaced (its watch ended) is watched anew at its next decision, in
    place of its old watch: the process's other watched folders keep theirs."""
    from agentos.routing import router

    spaces = [init_workspace(tmp_path / f"ws{i}")[0] for i in range(router._MAX_WATCHES)]
    for ws in spaces:
        for _ in range(2):  # watched from the second look
            assert decide(ws, "fix the lint errors").decision == "route"
    assert set(router._WATCHES) == {ws.cards_dir for ws in spaces}

    _replace_folder(spaces[-1])  # "lint" becomes "ruff" in a new folder of the same name
    assert [s.card for s in decide(spaces[-1], "fix the ruff errors").selected] == ["fix-ruff"]
    assert decide(spaces[-1], "fix the ruff errors").decision == "route"
    assert set(router._WATCHES) == {ws.cards_dir for ws in spaces}
    assert all(w.active for w in router._WATCHES.values())
