"""Which files make a card set, and its revision: kept apart from :mod:`agentos.routing.cards` so
that routing on cached, compiled cards never builds the card schema."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

CARD_SUFFIX = ".yaml"


def card_files(cards_dir: Path) -> list[Path]:
    """The card files of a card set, in name order (dot files are ignored)."""
    try:
        entries = list(cards_dir.iterdir())
    except FileNotFoundError:
        return []
    return sorted(
        (p for p in entries if p.name.endswith(CARD_SUFFIX) and not p.name.startswith(".")),
        key=lambda p: p.name,
    )


def revision_of(digests: Iterable[tuple[str, str]]) -> str:
    """The revision of a card set from ``(file name, sha256 of content)`` in name order."""
    listing = "".join(f"{digest}  {name}\n" for name, digest in digests)
    return hashlib.sha256(listing.encode()).hexdigest()
