"""Capability search: which installed package can do what a request asks.

Each active package is described by its name, its ``capabilities``, its description and
the triggers (keywords, phrases) of the routing cards that route to it. A query's content
words (stemmed as the router stems them, stop words dropped) are looked up in those
fields; each word counts for the strongest field it is found in (name and capabilities
1.0, card triggers 0.8, description 0.6), and the score is their mean: 0..1, 1 when every
word of the query names the package or a capability of it. Ties are broken by name; the
same hub and cards give the same ranking.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentos.errors import AgentOSError, BadInput
from agentos.hub.store import Hub
from agentos.workspace.layout import Workspace

WEIGHTS = {"name": 1.0, "capabilities": 1.0, "triggers": 0.8, "description": 0.6}


@dataclass(frozen=True)
class Match:
    name: str
    version: str
    score: float  # 0..1
    matched: list[str]  # the query's words found
    fields: dict[str, list[str]] = field(default_factory=dict)  # field -> words found there
    description: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "version": self.version,
            "score": round(self.score, 4),
            "matched": self.matched,
            "fields": self.fields,
            "description": self.description,
        }


def query_terms(query: str) -> list[tuple[str, str]]:
    """(word, stem) of each content word of the query, first occurrence kept."""
    from agentos.interview.lexicon import STOPWORDS
    from agentos.shared.text import stems, words

    seen: set[str] = set()
    out = []
    for word, stem in zip(words(query), stems(query), strict=False):
        if word in STOPWORDS or stem in seen:
            continue
        seen.add(stem)
        out.append((word, stem))
    return out


def search(ws: Workspace, query: str, k: int = 5, threshold: float = 0.0) -> list[Match]:
    """The ``k`` best packages for ``query`` scoring at least ``threshold``, best first."""
    from agentos.shared.text import stems

    terms = query_terms(query)
    if not terms:
        raise BadInput("the query has no words to search for", field="QUERY")
    triggers = _card_triggers(ws)
    hub = Hub(ws.hub_dir)
    found = []
    for info, manifest in hub.active():
        fields = {
            "name": set(stems(manifest.name.replace("-", " "))),
            "capabilities": {s for c in manifest.capabilities for s in stems(c)},
            "triggers": triggers.get(manifest.name, set()),
            "description": set(stems(manifest.description)),
        }
        total = 0.0
        matched: list[str] = []
        where: dict[str, list[str]] = {}
        for word, stem in terms:
            hits = [f for f in WEIGHTS if stem in fields[f]]
            if not hits:
                continue
            matched.append(word)
            total += max(WEIGHTS[f] for f in hits)
            for f in hits:
                where.setdefault(f, []).append(word)
        score = total / len(terms)
        if score > 0 and score >= threshold:
            found.append(
                Match(info.name, info.version, score, matched, where, manifest.description)
            )
    found.sort(key=lambda m: (-m.score, m.name))
    return found[:k]


def _card_triggers(ws: Workspace) -> dict[str, set[str]]:
    """The stems of the keywords and phrases of each package's routing cards."""
    from agentos.routing.cards import load_cards
    from agentos.shared.text import stems

    try:
        cards = load_cards(ws.cards_dir).cards
    except AgentOSError:  # a broken card is `cards lint`'s to name; search goes on
        return {}
    out: dict[str, set[str]] = {}
    for card in cards:
        words = [*card.triggers.keywords, *card.triggers.phrases]
        out.setdefault(card.agent, set()).update(s for w in words for s in stems(w))
    return out
