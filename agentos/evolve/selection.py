"""Choosing the parent of the next generation, as HyperFlow and HyperAgents define it.

Only valid generations are candidates (with none, the initial one). Each method gives every
candidate a weight, and a seeded draw picks one in proportion; the weights, the seed and the
draw are recorded in the child's metadata, so a choice can be checked afterwards and the
same seed gives the same parents.

- ``random``: every candidate weighs 1.
- ``latest``: the newest candidate weighs 1, the rest 0.
- ``best``: the best score weighs 1, the rest 0 (ties: the newest).
- ``score_prop``: a sigmoid of the score around the mean of the top three scores,
  ``1 / (1 + exp(-10 (score - mid)))`` (HyperAgents' ``score_prop``).
- ``score_child_prop``: ``(score + 0.01) / (1 + children)`` (HyperFlow's default): good
  parents are picked often, and a parent that already has many children less often.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Literal

Method = Literal["random", "latest", "best", "score_prop", "score_child_prop"]
METHODS: tuple[Method, ...] = ("random", "latest", "best", "score_prop", "score_child_prop")


@dataclass(frozen=True)
class Candidate:
    gen: int
    score: float
    children: int


@dataclass(frozen=True)
class Choice:
    parent: int
    method: Method
    seed: str  # what seeded the draw
    weights: dict[int, float]  # by generation, before normalisation

    def as_dict(self) -> dict[str, object]:
        return {
            "method": self.method,
            "seed": self.seed,
            "weights": {str(g): round(w, 6) for g, w in self.weights.items()},
        }


def weights(method: Method, candidates: list[Candidate]) -> dict[int, float]:
    """Each candidate's weight under ``method`` (candidates in the order they were made)."""
    if method == "random":
        return {c.gen: 1.0 for c in candidates}
    if method == "latest":
        newest = max(c.gen for c in candidates)
        return {c.gen: 1.0 if c.gen == newest else 0.0 for c in candidates}
    if method == "best":
        top = max(candidates, key=lambda c: (c.score, c.gen))  # ties: the newest
        return {c.gen: 1.0 if c is top else 0.0 for c in candidates}
    if method == "score_prop":
        best3 = sorted((c.score for c in candidates), reverse=True)[:3]
        mid = sum(best3) / len(best3)
        return {c.gen: 1 / (1 + math.exp(-10 * (c.score - mid))) for c in candidates}
    return {c.gen: (c.score + 0.01) / (1 + c.children) for c in candidates}


def select_parent(method: Method, candidates: list[Candidate], seed: str) -> Choice:
    """One parent drawn in proportion to the weights, with ``random.Random(seed)``."""
    assert candidates, "the initial generation is always a candidate"
    table = weights(method, candidates)
    gens = list(table)
    total = sum(table.values())
    draw = [table[g] for g in gens] if total > 0 else [1.0] * len(gens)
    parent = random.Random(seed).choices(gens, weights=draw)[0]
    return Choice(parent, method, seed, table)
