"""Task deduplication's similarity (issue 21), calibrated on labelled pairs: paraphrases
(duplicates), near-misses (the same form about another object) and different tasks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentos.workflows.similarity import (
    DEFAULT_THRESHOLD,
    RELATED_THRESHOLD,
    features,
    similarity,
    text_similarity,
)

PAIRS = [
    json.loads(line)
    for line in (Path(__file__).parent / "data" / "dedup_pairs.jsonl").read_text().splitlines()
    if line.strip()
]


def test_the_labelled_pairs_cover_each_kind() -> None:
    kinds = {p["kind"] for p in PAIRS}
    assert kinds == {"paraphrase", "near-miss", "different"}
    assert sum(p["dup"] for p in PAIRS) >= 30 and sum(not p["dup"] for p in PAIRS) >= 30


def test_precision_and_recall_at_the_default_threshold() -> None:
    said = [(text_similarity(p["a"], p["b"]) >= DEFAULT_THRESHOLD, p["dup"]) for p in PAIRS]
    true_pos = sum(1 for s, d in said if s and d)
    precision = true_pos / sum(1 for s, _ in said if s)
    recall = true_pos / sum(1 for _, d in said if d)
    print(f"precision {precision:.3f}, recall {recall:.3f} on {len(PAIRS)} pairs")
    assert precision >= 0.95 and recall >= 0.8


@pytest.mark.parametrize("pair", [p for p in PAIRS if p["kind"] == "different"], ids=str)
def test_different_tasks_are_not_even_related(pair: dict[str, object]) -> None:
    assert text_similarity(str(pair["a"]), str(pair["b"])) < RELATED_THRESHOLD


def test_similarity_is_symmetric_bounded_and_one_for_the_same_text() -> None:
    for p in PAIRS:
        ab, ba = text_similarity(p["a"], p["b"]), text_similarity(p["b"], p["a"])
        assert ab == ba and 0.0 <= ab <= 1.0
        assert text_similarity(p["a"], p["a"]) == 1.0
    assert similarity(features(""), features("fix it")) == 0.0
