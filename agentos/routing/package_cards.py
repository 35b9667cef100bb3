"""Cards that come with a package: a package may ship ``cards/*.yaml``, routing cards
for itself, so that a new agent is one ``hub install``.

The cards of a package's *active* version are copied into the workspace's cards folder as
``<package>--<file>``: installing or switching versions (``hub use``) puts them there,
removing the package takes them away. Those files belong to the package: a change made to
one by hand is replaced at the next install or switch (copy it under another name to keep
it). Every card of a package must route to the package itself, and no card id may be one
another card of the workspace already has; a package whose cards break either rule is not
installed (an install that fails here is undone).

Hand-written cards are added with :func:`add_card` (``agentos cards add FILE``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from agentos.errors import AgentOSError, BadInput, Conflict, TooLarge
from agentos.hub.store import Hub, InstallResult
from agentos.routing.cardfiles import CARD_SUFFIX, card_files
from agentos.routing.cards import Card, load_card, load_cards, read_card
from agentos.shared import limits
from agentos.shared.fs import atomic_write
from agentos.workspace.layout import Workspace

CARDS_DIR = "cards"  # in a package
SEPARATOR = "--"  # <package>--<file> in the workspace's cards folder


@dataclass(frozen=True)
class CardsChange:
    written: list[str] = field(default_factory=list)  # card files, as named in the workspace
    removed: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, list[str]]:
        return {"cards_written": self.written, "cards_removed": self.removed}


def shipped_cards(package_dir: Path, ref: str) -> list[tuple[Path, Card]]:
    """The cards package ``ref`` (NAME@VERSION) ships in ``package_dir/cards``, each valid,
    within the limits of a card and routing to the package itself, and at most
    ``limits.PACKAGE_CARDS`` of them (else :class:`BadInput` naming the file as
    ``NAME@VERSION/cards/FILE``, and the field)."""
    name = ref.split("@")[0]
    folder = package_dir / CARDS_DIR
    if not folder.is_dir() or folder.is_symlink():
        return []
    files = card_files(folder)
    if len(files) > limits.PACKAGE_CARDS.most:
        raise TooLarge(limits.PACKAGE_CARDS.refusal(len(files)), file=f"{ref}/{CARDS_DIR}")
    out = []
    for path in files:
        where = f"{ref}/{CARDS_DIR}/{path.name}"
        try:
            card = load_card(path)
        except AgentOSError as exc:
            raise exc.with_context(file=where) from None
        if card.agent != name:
            raise BadInput(
                f"routes to {card.agent!r}: a package's cards route to the package itself "
                f"({name!r})",
                file=where,
                field="agent",
            )
        out.append((path, card))
    return out


def owned_by(name: str, file_name: str) -> bool:
    return file_name.startswith(name + SEPARATOR) and file_name.endswith(CARD_SUFFIX)


def sync_cards(ws: Workspace, name: str) -> CardsChange:
    """Make package ``name``'s cards in the workspace those of its active version (none
    once it is removed)."""
    hub = Hub(ws.hub_dir)
    ref = name
    try:
        info, _ = hub.get(name)
        ref = f"{info.name}@{info.version}"
        shipped = shipped_cards(info.path, ref)
    except AgentOSError as exc:
        if exc.field != "package":  # not installed any more: its cards go
            raise
        shipped = []
    wanted = {f"{name}{SEPARATOR}{path.name}": (path, card) for path, card in shipped}
    others = {card.id: path for path, card in _workspace_cards(ws) if not owned_by(name, path.name)}
    for path, card in wanted.values():
        if card.id in others:
            raise Conflict(
                f"card id {card.id!r} is already the id of {others[card.id]}",
                file=f"{ref}/{CARDS_DIR}/{path.name}",
                field="id",
            )
        others[card.id] = path  # two cards of the package with one id: the second is refused
    change = CardsChange()
    ws.cards_dir.mkdir(parents=True, exist_ok=True)
    for file_name, (path, _card) in sorted(wanted.items()):
        target = ws.cards_dir / file_name
        data = read_card(path)
        if not target.is_file() or target.is_symlink() or target.read_bytes() != data:
            atomic_write(target, data)
            change.written.append(file_name)
    for stale in sorted(p for p in ws.cards_dir.iterdir() if owned_by(name, p.name)):
        if stale.name not in wanted:
            stale.unlink()
            change.removed.append(stale.name)
    return change


def install_package(ws: Workspace, source: str) -> tuple[InstallResult, CardsChange]:
    """``hub install`` with the package's cards: when its cards cannot be put in place, the
    install is undone (the version it added removed, the version active before made active
    again) and the error raised."""
    hub = Hub(ws.hub_dir)
    before = {v.name: v for v in hub.versions() if v.active}
    installed = {(v.name, v.version) for v in hub.versions()}
    result = hub.install(source)
    try:
        return result, sync_cards(ws, result.name)
    except AgentOSError:
        if (result.name, result.version) not in installed:
            hub.remove(f"{result.name}@{result.version}")
        previous = before.get(result.name)
        if previous is not None:
            hub.use(f"{previous.name}@{previous.version}")
        raise


def add_card(ws: Workspace, source: Path, *, force: bool = False) -> tuple[Path, Card, bool]:
    """Copy a hand-written card into the workspace's cards as ``<id>.yaml``, once it is
    valid and its id is new (``force``: it replaces the card that has the id, unless a
    package owns that card). Returns the file written, the card, and whether it replaced
    one."""
    if not source.is_file():
        raise BadInput("no such card file", file=source)
    data = read_card(source)  # read once: what is checked is what is copied
    card = load_card(source, data)
    holder = next((p for p, c in _workspace_cards(ws) if c.id == card.id), None)
    owner = next(
        (p.name.split(SEPARATOR)[0] for p in [holder] if p is not None and SEPARATOR in p.name),
        None,
    )
    if holder is not None and owner is not None:
        raise Conflict(
            f"card id {card.id!r} belongs to package {owner!r} ({holder}); give this card "
            "another id",
            file=source,
            field="id",
        )
    if holder is not None and not force:
        raise Conflict(
            f"card id {card.id!r} is already the id of {holder}; --force replaces it",
            file=source,
            field="id",
        )
    target = ws.cards_dir / f"{card.id}{CARD_SUFFIX}"
    ws.cards_dir.mkdir(parents=True, exist_ok=True)
    atomic_write(target, data)
    if holder is not None and holder != target:
        holder.unlink()
    return target, card, holder is not None


def _workspace_cards(ws: Workspace) -> list[tuple[Path, Card]]:
    card_set = load_cards(ws.cards_dir)
    return list(zip(card_set.files, card_set.cards, strict=True))
