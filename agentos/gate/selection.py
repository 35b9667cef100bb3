"""Which checks a piece of work gets: the package's, then the card's, then the workspace's
(``agentos.yaml``) -- never the agent's worktree's, so an agent cannot edit its own checks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from agentos.errors import NotFound
from agentos.hub.manifest import Manifest
from agentos.hub.store import Hub
from agentos.routing.cards import load_cards
from agentos.shared.checks import CheckSpec
from agentos.workspace.layout import Workspace

if TYPE_CHECKING:
    from agentos.gate.repo import RepoProfile
from agentos.gate.environment import tests_timeout

# --- which checks --------------------------------------------------------------------------


def collect_checks(
    ws: Workspace, *, package: Manifest | None = None, card_checks: Sequence[CheckSpec] = ()
) -> list[CheckSpec]:
    """The checks of a run: the package's, then the card's, then the workspace's.

    They are read from the hub (``package``, as loaded from the hub), the card and
    ``agentos.yaml`` at the workspace root -- never from an agent's worktree.

    Duplicate names: a check identical to one already collected (same name, same
    definition) runs once. A check with a name already taken but a *different* definition
    is kept as well -- a later source never replaces or weakens an earlier one -- and is
    renamed ``NAME [card]`` or ``NAME [workspace]`` (``[card 2]``... if needed) so every
    result and receipt line names one check.
    """
    sources: list[tuple[str, Sequence[CheckSpec]]] = [
        ("package", package.checks if package is not None else ()),
        ("card", card_checks),
        ("workspace", ws.settings.checks),
    ]
    out: list[CheckSpec] = []
    taken: dict[str, CheckSpec] = {}
    for source, checks in sources:
        for check in checks:
            first = taken.get(check.name)
            if first is None:
                taken[check.name] = check
                out.append(check)
                continue
            if first == check:
                continue
            n = 1
            while (new := f"{check.name} [{source}{f' {n}' if n > 1 else ''}]") in taken:
                n += 1
            renamed = check.model_copy(update={"name": new})
            taken[new] = renamed
            out.append(renamed)
    return out


def select_checks(checks: Sequence[CheckSpec], names: Sequence[str]) -> list[CheckSpec]:
    """The checks named in ``names`` (all of them when ``names`` is empty), in gate order."""
    if not names:
        return list(checks)
    known = {c.name for c in checks}
    missing = [n for n in names if n not in known]
    if missing:
        have = ", ".join(repr(n) for n in sorted(known)) or "none"
        raise NotFound(f"no check named {missing[0]!r} (checks: {have})", field="check")
    wanted = set(names)
    return [c for c in checks if c.name in wanted]


def describe(check: CheckSpec, profile: RepoProfile | None = None) -> str:
    """What a check does, in one line (a ``tests`` check: with the command ``profile``
    gives it, when known)."""
    if check.run is not None:
        where = f" (in {check.cwd})" if check.cwd else ""
        return f"`{check.run}`{where}, timeout {check.timeout:g}s"
    if check.tests is not None:
        which = " ".join(check.tests) or "the whole suite"
        if profile is None:
            return f"the repository's tests ({which})"
        return (
            f"the repository's tests ({which}): `{profile.test_command(check.tests)}`, "
            f"timeout {tests_timeout(check, profile):g}s"
        )
    if check.file_exists is not None:
        return f"file_exists {check.file_exists}"
    if check.file_contains is not None:
        return f"file_contains {check.file_contains.path} /{check.file_contains.pattern}/"
    if check.no_changes_outside is not None:
        return f"no_changes_outside {', '.join(check.no_changes_outside) or '(nothing)'}"
    return f"max_diff_lines {check.max_diff_lines}"


def load_package(ws: Workspace, ref: str | None) -> Manifest | None:
    """The manifest of hub package ``name[@version]`` (None when ``ref`` is None)."""
    if not ref:
        return None
    return Hub(ws.hub_dir).get(ref)[1]


def gate_checks(
    ws: Workspace, *, package: str | None = None, card: str | None = None
) -> list[CheckSpec]:
    """The checks a run would get, for ``agentos gate run/hook``: those of hub package
    ``package`` (``name[@version]``) and of the card with id ``card`` -- whose agent, at the
    version the card asks for, is the package when ``package`` is not given -- then the
    workspace's."""
    card_checks: Sequence[CheckSpec] = ()
    if card:
        found = [c for c in load_cards(ws.cards_dir).cards if c.id == card]
        if not found:
            raise NotFound(f"no card with id {card!r} in {ws.cards_dir}", field="card")
        card_checks = found[0].checks
        if not package:
            hub = Hub(ws.hub_dir)
            package = f"{found[0].agent}@{hub.resolve(found[0].agent, found[0].version)}"
    return collect_checks(ws, package=load_package(ws, package), card_checks=card_checks)
