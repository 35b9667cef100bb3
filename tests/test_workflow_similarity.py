"""Task deduplication's similarity (issues 21 and 37), on labelled pairs: paraphrases
(duplicates), near-misses (the same form about another object), related and different
tasks. The calibration part is what the similarity was tuned on; the held-out part was
committed before it changed and nothing is tuned on it."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest

from agentos.shared.text import words
from agentos.workflows.similarity import (
    DEFAULT_THRESHOLD,
    RELATED_THRESHOLD,
    SUBSTITUTED,
    WORDS_FILE,
    Frequencies,
    background,
    count,
    features,
    parse_lexicon,
    similarity,
    substitution,
    text_similarity,
)

LABELLED = Path(__file__).parent / "data" / "dedup"  # issue 37: calibration and held-out
HELD_OUT = LABELLED / "heldout.jsonl"
# The held-out pairs as they were committed before the similarity of issue 37 was written:
# a change to them is a change to the test, not to the data.
HELD_OUT_SHA256 = "eff9024add128bc9a9e4524b20e3ea54cbb21ed710d2cd247bf1076cbec8f529"


def labelled(name: str) -> list[dict[str, Any]]:
    lines = (LABELLED / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


PAIRS = labelled("calibration")


def judged(pairs: list[dict[str, object]], threshold: float) -> tuple[float, float]:
    """Precision and recall of "a duplicate at or over ``threshold``" on ``pairs``."""
    said = [(text_similarity(str(p["a"]), str(p["b"])) >= threshold, p["dup"]) for p in pairs]
    true_pos = sum(1 for s, d in said if s and d)
    precision = true_pos / max(1, sum(1 for s, _ in said if s))
    recall = true_pos / sum(1 for _, d in said if d)
    return precision, recall


def test_the_held_out_pairs_are_the_ones_committed_before_the_similarity_changed() -> None:
    assert hashlib.sha256(HELD_OUT.read_bytes()).hexdigest() == HELD_OUT_SHA256


def test_the_labelled_parts_are_large_and_share_no_task() -> None:
    calibration, held_out = labelled("calibration"), labelled("heldout")
    assert len(calibration) + len(held_out) >= 200
    assert sum(1 for p in held_out if p["dup"]) >= 40
    # Near-misses (the same words about another object) test precision: plenty of them.
    assert sum(1 for p in held_out if p["kind"] == "near-miss") >= 100
    groups = [{p["group"] for p in part} for part in (calibration, held_out)]
    texts = [{t for p in part for t in (p["a"], p["b"])} for part in (calibration, held_out)]
    assert not groups[0] & groups[1] and not texts[0] & texts[1]
    for p in calibration + held_out:
        assert p["dup"] is (p["kind"] == "paraphrase"), p


def _words_of(pairs: list[dict[str, object]]) -> set[str]:
    return {w for p in pairs for text in (p["a"], p["b"]) for w in words(str(text))}


def test_the_word_data_holds_no_word_that_only_the_held_out_part_has() -> None:
    """Not a synonym, a kind of work or a filler was taken from the held-out pairs."""
    data = "\n".join(
        line.split("#", 1)[0] for line in WORDS_FILE.read_text(encoding="utf-8").splitlines()
    )
    data = re.sub(r"^\s*\[\w+\]\s*$", "", data, flags=re.M)  # the section headers
    listed = set(words(data))
    assert len(listed) > 100
    only_held_out = _words_of(labelled("heldout")) - _words_of(PAIRS)
    assert not listed & only_held_out, sorted(listed & only_held_out)


def test_the_background_frequencies_are_those_of_the_calibration_part() -> None:
    """similarity_frequencies.json is written from the calibration pairs, a group (one task
    in its wordings) a document: `benchmarks/workflow_bench.py --write-frequencies`."""
    groups: dict[object, list[str]] = {}
    for p in PAIRS:
        groups.setdefault(p["group"], []).extend((str(p["a"]), str(p["b"])))
    assert background() == count(groups.values())


def test_the_calibration_part_is_judged_with_high_precision_at_the_default_threshold() -> None:
    precision, recall = judged(PAIRS, DEFAULT_THRESHOLD)
    print(f"calibration: precision {precision:.3f}, recall {recall:.3f} on {len(PAIRS)} pairs")
    assert precision >= 0.95 and recall >= 0.4


def test_the_held_out_part_scores_no_worse_than_when_the_similarity_was_first_measured() -> None:
    """A floor, not a target: issue 37's similarity scored precision 0.88 and recall 0.20 on
    the held-out pairs at its first measurement (issue 21's: 0.54 and 0.09 at 0.75)."""
    precision, recall = judged(labelled("heldout"), DEFAULT_THRESHOLD)
    print(f"held-out: precision {precision:.3f}, recall {recall:.3f}")
    assert precision >= 0.85 and recall >= 0.2


@pytest.mark.xfail(
    strict=True,
    reason="issue 37's bar is not met: most held-out duplicates share no content word "
    "(see docs/workflows.md, 'How alike two tasks are'); the words cannot see them",
)
def test_the_held_out_part_reaches_recall_085_at_precision_095() -> None:
    precision, recall = judged(labelled("heldout"), DEFAULT_THRESHOLD)
    assert precision >= 0.95 and recall >= 0.85


@pytest.mark.parametrize("pair", [p for p in PAIRS if p["kind"] == "different"], ids=str)
def test_different_tasks_are_not_even_related(pair: dict[str, object]) -> None:
    assert text_similarity(str(pair["a"]), str(pair["b"])) < RELATED_THRESHOLD


def test_similarity_is_symmetric_bounded_and_one_for_the_same_text() -> None:
    for p in PAIRS + labelled("heldout"):
        a, b = str(p["a"]), str(p["b"])
        ab, ba = text_similarity(a, b), text_similarity(b, a)
        assert ab == ba and 0.0 <= ab <= 1.0
        assert text_similarity(a, a) == pytest.approx(1.0)
    assert similarity(features(""), features("fix it")) == 0.0


@pytest.mark.parametrize(
    ("a", "b", "factor"),
    [
        ("Remove the login endpoint", "Remove the logout endpoint", SUBSTITUTED),
        ("Retry requests that get HTTP 429", "Retry requests that get HTTP 503", SUBSTITUTED),
        ("Add tests for parse_date", "Add tests for format_date", SUBSTITUTED),
        ("Write a test for the empty cart", "Fix the empty cart", SUBSTITUTED),
        ("Fix the leak in the image cache", "Fix the image cache leak properly", 1.0),
        ("Bump requests to 2.32", "Bump requests to 2.32 in the lock file", 1.0),
        ("Fix the login page on Windows", "Fix the login page on 11", 1.0),
    ],
    ids=[
        "two-objects",
        "two-numbers",
        "two-identifiers",
        "two-kinds-of-work",
        "an-object-and-a-filler",
        "words-on-one-side-only",
        "a-word-and-a-number",
    ],
)
def test_a_word_of_its_own_on_each_side_lowers_the_score_only_when_of_the_same_kind(
    a: str, b: str, factor: float
) -> None:
    fa, fb = features(a), features(b)
    frequencies = background().plus(fa, fb)
    own_a, own_b = fa.terms() - fb.terms(), fb.terms() - fa.terms()
    assert substitution(own_a, own_b, frequencies) == factor


def test_synonyms_fold_words_and_phrases_but_a_phrase_only_in_its_own_words() -> None:
    assert "login" in features("Sign in fails on Safari").words
    assert "login" in features("Log in fails on Safari").words
    assert "login" not in features("Add logging in worker.py").words  # "logging in"
    assert features("Delete the cache").words == features("Remove the cache").words
    assert text_similarity("Get rid of jQuery", "Remove jQuery") == pytest.approx(1.0)


def test_a_term_weighs_less_the_more_tasks_hold_it() -> None:
    """Two tasks alike only in "handler": alike when few tasks say it, hardly when the
    workspace's tasks all do."""
    a, b = features("Rename the handler in app.py"), features("Speed up the handler")
    (handler,) = a.words & b.words
    rare = Frequencies(1000, {handler: 1}).plus(a, b)
    common = Frequencies(1000, {handler: 900}).plus(a, b)
    assert rare.weight(handler) > 3 * common.weight(handler)
    assert similarity(a, b, rare) > 2 * similarity(a, b, common)


def test_a_word_file_that_is_not_well_formed_is_named_by_line() -> None:
    with pytest.raises(ValueError, match=r"^line 2: unknown section \[nope\]$"):
        parse_lexicon("[same]\n[nope]\n")
    with pytest.raises(ValueError, match=r"^line 2: expected 'word: other, other words'$"):
        parse_lexicon("[same]\nno colon here\n")
    with pytest.raises(ValueError, match=r"^line 1: words before any \[section\]$"):
        parse_lexicon("add, write\n")
