"""Routing: which agent handles a request, decided by cards, with a receipt.

Its parts: :mod:`~agentos.routing.cards` (the card model, loading a card set, lint),
:mod:`~agentos.routing.cardfiles` (which files make a card set, and its revision),
:mod:`~agentos.routing.index` (the compiled index a decision reads),
:mod:`~agentos.routing.router` (a decision and its receipt),
:mod:`~agentos.routing.package_cards` (cards that come with a package) and
:mod:`~agentos.routing.capabilities` (which installed package can do what a request asks).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentos.shared.faces import lazy

if TYPE_CHECKING:
    from agentos.routing.cards import Card, load_cards
    from agentos.routing.router import Decision, decide, route

FACE = {
    "Decision": "agentos.routing.router",
    "route": "agentos.routing.router",
    "decide": "agentos.routing.router",
    "Card": "agentos.routing.cards",
    "load_cards": "agentos.routing.cards",
}
__all__ = [
    "Card",
    "Decision",
    "decide",
    "load_cards",
    "route",
]
if not TYPE_CHECKING:  # a type checker reads the imports above instead
    __getattr__, __dir__ = lazy(__name__, FACE)
