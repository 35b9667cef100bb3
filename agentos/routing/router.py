"""The deterministic router: routing cards in, a decision and its receipt out.

The card set is compiled once into an index (see :mod:`agentos.routing.index`) and cached
under ``.agentos/cache/`` by the card set's revision, so a fresh process reads the index
instead of parsing YAML; the index is also kept in memory for the life of the process.

A decision depends only on the request, the card files and ``hub/hub.lock``: same inputs,
same decision, in any process. Ties are broken by rule (score, then priority), never by
order, and a tie those cannot break is a ``clarify``.
"""

from __future__ import annotations

import hashlib
import json
import marshal
import os
import stat
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from agentos.errors import NotFound, ValidationFailed, check_request
from agentos.hub.versions import hub_versions, parse_ref
from agentos.hub.versions import resolve as resolve_version
from agentos.receipts import Receipt, write_receipt
from agentos.routing.cardfiles import CARD_SUFFIX, revision_of
from agentos.routing.index import FORMAT, Hit, Index, cache_name
from agentos.shared import limits
from agentos.workspace.layout import Workspace

if TYPE_CHECKING:
    from agentos.shared.checks import CheckSpec
    from agentos.shared.dirwatch import DirWatch

ROUTE, CLARIFY, NO_MATCH = "route", "clarify", "no_match"
# The card group of agents that only verify (run the tests, report): they change nothing,
# and run after the agents that change code, on their integrated work.
VERIFY_GROUP = "verify"


@dataclass(frozen=True)
class Selected:
    """A card chosen for the task force, with the agent version the hub resolved."""

    card: str
    agent: str
    version: str
    score: int
    fired: list[str]
    priority: int
    group: str
    checks: list[CheckSpec] = field(default_factory=list)

    @property
    def ref(self) -> str:
        return f"{self.agent}@{self.version}"

    def as_dict(self) -> dict[str, object]:
        return {
            "card": self.card,
            "agent": self.agent,
            "version": self.version,
            "score": self.score,
            "fired": list(self.fired),
            "priority": self.priority,
            "group": self.group,
            "checks": [c.model_dump(mode="json", exclude_none=True) for c in self.checks],
        }


@dataclass(frozen=True)
class Rejected:
    card: str
    reason: str

    def as_dict(self) -> dict[str, object]:
        return {"card": self.card, "reason": self.reason}


@dataclass(frozen=True)
class Decision:
    """``route``: ``selected`` is the task force, strongest card first.
    ``clarify``: some group's best cards tie; ``tied`` names them (``selected`` keeps the
    other groups' winners). ``no_match``: nothing matched.

    ``rejected`` lists the cards that fired a trigger but were ruled out (exclude, require,
    min_score, the hub, or a better card in their group) with the reason; cards that fired
    nothing are not listed.
    """

    decision: str
    selected: list[Selected]
    rejected: list[Rejected]
    tied: list[str]
    cards_revision: str
    hub_revision: str
    # Who chose the task force: the routing cards, `run --agent`, or (when no card matched)
    # the workspace's `run.default_agent`.
    decided_by: str = "cards"

    def as_dict(self) -> dict[str, object]:
        return {
            "decision": self.decision,
            "decided_by": self.decided_by,
            "selected": [s.as_dict() for s in self.selected],
            "rejected": [r.as_dict() for r in self.rejected],
            "tied": list(self.tied),
            "cards_revision": self.cards_revision,
            "hub_revision": self.hub_revision,
        }

    def receipt_fields(self) -> dict[str, object]:
        selected = []
        for s in self.selected:
            entry: dict[str, object] = {
                "card": s.card,
                "agent": s.ref,
                "score": s.score,
                "priority": s.priority,
                "group": s.group,
                "fired": s.fired,
            }
            if s.checks:
                entry["checks"] = [c.name for c in s.checks]
            selected.append(entry)
        return {
            "decision": self.decision,
            "decided_by": self.decided_by,
            "selected": selected,
            "tied": self.tied,
            "rejected": [r.as_dict() for r in self.rejected],
            "cards_revision": self.cards_revision,
            "hub_revision": self.hub_revision,
        }


# --- the compiled card set ----------------------------------------------------------------

_INDEXES: dict[Path, Index] = {}


def cache_dir(ws: Workspace) -> Path:
    return ws.state_dir / "cache"


def compile_cards(ws: Workspace) -> Index:
    """Load, validate and compile the workspace's cards, and cache the index on disk."""
    from agentos.routing.cards import load_cards  # the card schema, only needed to compile

    cards = load_cards(ws.cards_dir)
    files = [(path.name, digest) for path, digest in zip(cards.files, cards.digests, strict=True)]
    index = Index.build(cards.cards, cards.revision, files)
    _keep_index(ws, index)
    return index


def _keep_index(ws: Workspace, index: Index) -> None:
    """The compiled cards in the cache, by their revision (a cache: no fsync, a torn file is
    compiled again); older ones removed."""
    directory = cache_dir(ws)
    target = directory / cache_name(index.revision)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        tmp.write_bytes(index.dumps())
        os.replace(tmp, target)
        for old in directory.glob("router-*.idx"):
            if old != target:
                old.unlink(missing_ok=True)
    except OSError as exc:  # a read-only workspace still routes, just without the cache
        import logging  # a one-shot `agentos route` does not pay for logging's import

        logging.getLogger(__name__).warning(
            "cannot cache the compiled cards in %s: %s", directory, exc
        )


def _newest_kept(ws: Workspace) -> Index | None:
    """The newest compiled index in the cache, of whatever card set (None if none loads)."""
    kept = []
    with suppress(OSError):
        for path in cache_dir(ws).glob(f"router-*-f{FORMAT}-*.idx"):
            with suppress(OSError):
                kept.append((path.stat().st_mtime_ns, path))
    for _, path in sorted(kept, reverse=True):
        with suppress(OSError, ValueError, EOFError, TypeError):
            return Index.loads(path.read_bytes())
    return None


# An index is updated in place of compiling the whole set when at most this share of its
# files changed, and while the rows updates left empty stay under a quarter of it.
_UPDATE_SHARE = 10


def _updated_index(ws: Workspace, previous: Index, revision: str) -> Index | None:
    """``previous`` with only the card files that changed since read again (as the scan
    that gave ``revision`` saw them); None when the whole set should be compiled: too much
    changed, a changed card is not valid or clashes with another (compiling all of them
    says which, as it always has), or the files moved on since the scan."""
    from agentos.errors import AgentOSError

    if not previous.files or _SCANNED.get(ws.cards_dir) != revision:
        return None
    stats, files = _STATS[ws.cards_dir], previous.files
    delta = _DELTAS.get(ws.cards_dir)
    if delta is not None and delta[:2] == (previous.revision, revision):
        looked = delta[2]  # the watch named what changed between the two: nothing else did
    else:
        looked = stats.keys() | files.keys()
    changed = [n for n in looked if n in stats and files.get(n, ("",))[0] != stats[n][4]]
    removed = [n for n in looked if n in files and (n not in stats or n in changed)]
    limit = max(16, len(stats) // _UPDATE_SHARE)
    if len(removed) + len(changed) > limit or previous.dead_rows() + len(removed) > limit * 2.5:
        return None
    from agentos.routing.cards import load_card, read_card

    added = []
    try:
        for name in sorted(changed):
            path = ws.cards_dir / name
            data = read_card(path)
            digest = stats[name][4]
            if hashlib.sha256(data).hexdigest() != digest:
                return None  # written again since the scan
            added.append((name, digest, load_card(path, data)))
        return previous.updated(revision, removed, added)
    except (AgentOSError, ValueError):
        return None


# The card set's revision without reading every card on every route: a file whose size,
# mtime, ctime and inode are those recorded when it was hashed keeps its hash, provided it
# was last changed well before that hashing (git's "racy clean" rule, so an edit within the
# file system's timestamp granularity is never missed). Anything else is hashed again.
_RACY_NS = 2_000_000_000
_STAT_FILE = "cards.stat"
_Entry = tuple[int, int, int, int, str, int]  # size, mtime, ctime, inode, sha256, hashed at
_STATS: dict[Path, dict[str, _Entry]] = {}  # by card file name, as the last scan saw them
_SCANNED: dict[Path, str] = {}  # the revision of those entries
# What the last scan of a watched folder looked at again: (revision before, after, names).
_DELTAS: dict[Path, tuple[str, str, frozenset[str]]] = {}
# In a process that routes more than once, a watch on the cards folder (agentos.shared.dirwatch)
# says which cards changed since the last look: when none did, the revision is the last
# one, with no stat of any card; when some did, only those are looked at again. The watch
# starts at a folder's second look: a process that routes once (`agentos route`) has nothing
# to watch for.
_WATCHES: dict[Path, DirWatch] = {}  # oldest first
_WATCHED_AT: dict[Path, tuple[int, int] | None] = {}  # the folder each watch is on (dev, inode)
# The card files of a watched folder whose writes its watch may not hear of: a link to a file
# elsewhere, or a file with another name (written there, the write is that folder's event).
# They are looked at again, by their stat, at every decision.
_UNHEARD: dict[Path, frozenset[str]] = {}
_MAX_WATCHES = 8
_REVISIONS: dict[Path, str] = {}
_LOOKED: set[Path] = set()  # folders this process has read the cards of


# One look at the card folders at a time in a process (the MCP server's tools and a workflow's
# tasks decide in threads): the events a look takes from a folder's watch are in the
# revision and stats it leaves, before another thread looks.
_LOCK = threading.RLock()


def current_revision(ws: Workspace) -> str:
    """``cards.cards_revision(ws.cards_dir)``: the last one when the folder's watch saw
    no change since, else computed from a stat cache when it can be."""
    with _LOCK:
        return _current_revision(ws)


def _current_revision(ws: Workspace) -> str:
    directory = ws.cards_dir
    watch = _WATCHES.get(directory)
    if watch is not None and watch.active and _folder(directory) != _WATCHED_AT.get(directory):
        watch.close()  # the path leads to another folder now (a link pointed elsewhere)
    names = watch.changes() if watch is not None else None
    # The last revision is kept again only once this look is done: a look that raised (a
    # card file the scan refuses) leaves none, and the next one reads the folder again
    # (and refuses it again) rather than take the events it consumed for no change.
    last = _REVISIONS.pop(directory, None)
    if names is not None and last is not None and directory in _STATS:
        unheard = _UNHEARD.get(directory, frozenset())
        revision = _scan_revision(ws, only=names, restat=unheard) if names or unheard else last
        _REVISIONS[directory] = revision
        return revision
    if directory in _LOOKED and (watch is None or not watch.active):
        watch = _watch(directory)  # before the folder is read again
    _LOOKED.add(directory)
    revision = _scan_revision(ws)
    if watch is not None and watch.active:
        _REVISIONS[directory] = revision
    return revision


def _watch(directory: Path) -> DirWatch:
    """A new watch on ``directory``; a process keeps at most ``_MAX_WATCHES`` (inotify
    instances are a per-user resource other programs need too), the oldest closed first."""
    from agentos.shared.dirwatch import DirWatch

    old = _WATCHES.pop(directory, None)
    if old is not None:
        old.close()
    while len(_WATCHES) >= _MAX_WATCHES:
        _WATCHES.pop(next(iter(_WATCHES))).close()
    _WATCHED_AT[directory] = _folder(directory)  # before the watch: a change between shows
    watch = _WATCHES[directory] = DirWatch(directory)
    return watch


def _folder(directory: Path) -> tuple[int, int] | None:
    """Which folder ``directory`` leads to now (device, inode); None when none."""
    try:
        st = os.stat(directory)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _is_card_file(name: str) -> bool:
    return name.endswith(CARD_SUFFIX) and not name.startswith(".")


def _scan_revision(
    ws: Workspace, only: set[str] | None = None, restat: frozenset[str] = frozenset()
) -> str:
    """The card set's revision, from the files' stats and the hashes kept for them; with
    ``only``, the names the folder's watch saw change, the other files are as the last scan
    of this process saw them and only these are looked at (and hashed) again, with those of
    ``restat`` (looked at by their stat, as every file is without ``only``)."""
    directory = ws.cards_dir
    stat_path = cache_dir(ws) / _STAT_FILE
    unheard: set[str] = set()
    if only is not None:
        known = _STATS[directory]
        fresh = dict(known)
        names = sorted(n for n in only | restat if _is_card_file(n))
        for name in names:
            fresh.pop(name, None)
        looked = frozenset(names)
        unheard = set(_UNHEARD.get(directory, frozenset()) - looked)
    else:
        known = _STATS.get(directory) or _read_stats(directory, stat_path)
        fresh = {}
        names = None
    now = time.time_ns()
    rehashed = 0
    try:
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except (FileNotFoundError, NotADirectoryError):
        dir_fd = None
    try:  # os with a directory fd, not pathlib: this loop runs for every card on every route
        if names is None:
            names = [] if dir_fd is None else sorted(filter(_is_card_file, os.listdir(dir_fd)))
        elif dir_fd is None:
            names = []
        shown = str(directory)
        for name in names:
            try:
                st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                if stat.S_ISLNK(st.st_mode) or st.st_nlink > 1:
                    unheard.add(name)
                    st = _followed(name, dir_fd, f"{shown}/{name}")
                limits.check_stat(st, limits.CARD, f"{shown}/{name}")  # before it is hashed
                sig = (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
                # A change the watch named is hashed again; anything else by its stat.
                old = known.get(name) if only is None or name not in only else None
                if old is not None and old[:4] == sig and max(sig[1], sig[2]) < old[5] - _RACY_NS:
                    fresh[name] = old
                    continue
                # Never waited on: a card swapped for a FIFO since its stat is not read.
                fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK, dir_fd=dir_fd)
                with open(fd, "rb") as fh:
                    limits.check_stat(os.fstat(fd), limits.CARD, f"{shown}/{name}")
                    digest = hashlib.file_digest(fh, "sha256").hexdigest()
            except FileNotFoundError:
                continue
            except PermissionError as exc:  # as a whole compile says it (read_card)
                raise ValidationFailed(
                    f"cannot read: {exc.strerror or exc}", file=f"{shown}/{name}"
                ) from None
            fresh[name] = (*sig, digest, now)
            rehashed += 1
    finally:
        if dir_fd is not None:
            os.close(dir_fd)
    if only is not None:
        fresh = dict(sorted(fresh.items()))
    # The kept stats are for the next process. A watching process that saw a few cards
    # change leaves them be: a new process hashes those few again (and keeps them).
    if only is None and (rehashed or fresh.keys() != known.keys()):
        with suppress(OSError):  # a cache: no fsync; a torn or lost file is rebuilt
            stat_path.parent.mkdir(parents=True, exist_ok=True)
            tmp = stat_path.with_name(f".{_STAT_FILE}.{os.getpid()}.tmp")
            tmp.write_bytes(marshal.dumps((str(directory), fresh)))
            os.replace(tmp, stat_path)
    revision = revision_of((name, entry[4]) for name, entry in fresh.items())
    if only is not None:
        _DELTAS[directory] = (_SCANNED[directory], revision, looked)
    else:
        _DELTAS.pop(directory, None)
    _STATS[directory] = fresh
    _SCANNED[directory] = revision
    _UNHEARD[directory] = frozenset(unheard)
    return revision


def _followed(name: str, dir_fd: int | None, shown: str) -> os.stat_result:
    """The stat of the file a card that is a link leads to. A link that leads nowhere is not
    a card removed: it cannot be read, as a whole compile of the folder says."""
    try:
        return os.stat(name, dir_fd=dir_fd)
    except OSError as exc:
        raise ValidationFailed(f"cannot read: {exc.strerror or exc}", file=shown) from None


def _read_stats(directory: Path, stat_path: Path) -> dict[str, _Entry]:
    """The stats and hashes a process kept for the card files of ``directory``."""
    with suppress(OSError, ValueError, EOFError, TypeError):
        loaded = marshal.loads(stat_path.read_bytes())
        if isinstance(loaded, tuple) and len(loaded) == 2 and loaded[0] == str(directory):
            return {
                name: entry
                for name, entry in dict(loaded[1]).items()
                if isinstance(entry, tuple) and len(entry) == 6
            }
    return {}


def load_index(ws: Workspace) -> Index:
    """The compiled index of the workspace's cards as they are now on disk: the one this
    process has when no card changed; the one kept in the cache for this card set; this
    process's own, or else the newest kept one, with the changed cards alone compiled again
    (kept for the next process only in the second case: a process that routes all day
    does not write 10,000 cards' index at each edit); else a new one."""
    with _LOCK:
        return _load_index(ws)


def _load_index(ws: Workspace) -> Index:
    revision = current_revision(ws)
    previous = _INDEXES.get(ws.cards_dir)
    if previous is not None and previous.revision == revision:
        return previous
    index = None
    with suppress(OSError, ValueError, EOFError, TypeError):
        cached = Index.loads((cache_dir(ws) / cache_name(revision)).read_bytes())
        if cached.revision == revision:
            index = cached
    if index is None and previous is not None:  # this process's own, with what changed
        index = _updated_index(ws, previous, revision)
    if index is None:  # the newest one kept on disk, with what changed since
        older = _newest_kept(ws)
        index = None if older is None else _updated_index(ws, older, revision)
        if index is not None:
            _keep_index(ws, index)
    if index is None:
        index = compile_cards(ws)
    _INDEXES[ws.cards_dir] = index
    return index


# --- the hub, read once per decision ------------------------------------------------------

# Resolutions against one hub revision, replaced whole when the hub changes (thread-safe:
# readers hold on to the pair they got). They are kept beside the hub's versions in the
# cache, by the hub's revision, so that a new process resolves a card's constraint without
# importing `packaging` (6 ms of every `agentos route`) unless the hub or the constraint is
# new to it.
_resolved: tuple[str, dict[tuple[str, str | None], str | NotFound]] = ("", {})


def _resolved_file(ws: Workspace, revision: str) -> Path:
    return cache_dir(ws) / f"hub-resolved-{revision}.marshal"


def _load_resolved(ws: Workspace, revision: str) -> dict[tuple[str, str | None], str | NotFound]:
    with suppress(OSError, ValueError, EOFError, TypeError):
        kept = marshal.loads(_resolved_file(ws, revision).read_bytes())
        if isinstance(kept, dict):
            return {
                key: value if fits else NotFound(value)
                for key, (fits, value) in kept.items()
                if isinstance(key, tuple)
                and len(key) == 2
                and isinstance(key[0], str)
                and isinstance(key[1], str | None)
                and isinstance(fits, bool)
                and isinstance(value, str)
            }
    return {}


def _keep_resolved(
    ws: Workspace, revision: str, memo: dict[tuple[str, str | None], str | NotFound]
) -> None:
    kept = {
        key: (False, found.message) if isinstance(found, NotFound) else (True, found)
        for key, found in memo.items()
    }
    target = _resolved_file(ws, revision)
    with suppress(OSError):  # a cache: no fsync; a torn or lost file is resolved again
        for old in target.parent.glob("hub-resolved-*.marshal"):
            if old != target:
                old.unlink(missing_ok=True)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        tmp.write_bytes(marshal.dumps(kept))
        os.replace(tmp, target)


def _resolver(ws: Workspace) -> tuple[str, Callable[[str, str | None], str]]:
    """The hub's revision, and ``resolve(agent, constraint)`` against that revision."""
    global _resolved
    rev, versions = hub_versions(ws.hub_dir / "hub.lock", cache_dir(ws))
    known = _resolved
    if known[0] != rev:
        known = _resolved = (rev, _load_resolved(ws, rev))
    memo = known[1]

    def resolve(agent: str, constraint: str | None) -> str:
        key = (agent, constraint)
        if key not in memo:
            try:
                memo[key] = resolve_version(versions, agent, constraint)
            except NotFound as exc:
                memo[key] = exc
            _keep_resolved(ws, rev, dict(memo))
        found = memo[key]
        if isinstance(found, NotFound):
            raise found
        return found

    return rev, resolve


# --- deciding -----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Candidate:
    hit: Hit
    id: str
    version: str
    priority: int


def decide_with(
    index: Index, request: str, hub_revision: str, resolve: Callable[[str, str | None], str]
) -> Decision:
    """The decision for ``request`` on a compiled index; ``resolve`` is the hub's."""
    return decide_hits(index, index.match(request), hub_revision, resolve)


def decide_hits(
    index: Index, hits: list[Hit], hub_revision: str, resolve: Callable[[str, str | None], str]
) -> Decision:
    """The decision from the cards that fired (``hits``, in card order): rules, hub, groups."""
    rejected: list[Rejected] = []
    groups: dict[str, list[_Candidate]] = {}
    for hit in hits:
        card_id, agent, constraint, priority, group = index.card(hit.card)
        if hit.reason is not None:
            rejected.append(Rejected(card_id, hit.reason))
            continue
        try:
            version = resolve(agent, constraint)
        except NotFound as exc:
            rejected.append(Rejected(card_id, exc.message))
            continue
        groups.setdefault(group, []).append(_Candidate(hit, card_id, version, priority))
    selected: list[Selected] = []
    tied: list[str] = []
    for group in sorted(groups):
        ranked = sorted(groups[group], key=lambda c: (-c.hit.score, -c.priority, c.id))
        top = ranked[0]
        best = [c for c in ranked if (c.hit.score, c.priority) == (top.hit.score, top.priority)]
        if len(best) > 1:
            tied.extend(c.id for c in best)
            winner = "the tied cards " + ", ".join(c.id for c in best)
        else:
            selected.append(_selected(index, top, group))
            winner = top.id
        for c in ranked[len(best) :]:
            why = (
                f"score {c.hit.score} < {top.hit.score}"
                if c.hit.score < top.hit.score
                else f"same score {c.hit.score}, priority {c.priority} < {top.priority}"
            )
            rejected.append(Rejected(c.id, f"lost to {winner} in group {group!r}: {why}"))
    selected.sort(key=lambda s: (-s.score, -s.priority, s.card))
    rejected.sort(key=lambda r: r.card)
    verdict = CLARIFY if tied else ROUTE if selected else NO_MATCH
    return Decision(verdict, selected, rejected, tied, index.revision, hub_revision)


def _selected(index: Index, c: _Candidate, group: str) -> Selected:
    card_id, agent = index.card(c.hit.card)[:2]
    checks_json = index.checks_json(c.hit.card)
    checks = []
    if checks_json:  # the check schema, only for a card that has checks
        from agentos.shared.checks import CheckSpec

        checks = [CheckSpec.model_validate(d) for d in json.loads(checks_json)]
    return Selected(card_id, agent, c.version, c.hit.score, c.hit.fired, c.priority, group, checks)


def decide(
    ws: Workspace, request: str, *, agent: str | None = None, change: bool = False
) -> Decision:
    """Route ``request`` on the workspace's cards and hub, as they are now. Writes nothing
    but the compiled-cards cache.

    ``agent`` (``NAME[@VERSION]``, from ``run --agent``) decides instead of the cards. When
    no card matches, the workspace's ``run.default_agent`` takes the request, if it names
    one; when the request asks for a ``change`` and only cards of the ``verify`` group
    matched (agents that change nothing), the default agent joins them to make the change.
    A tie stays a tie. The decision says who decided (``decided_by``).
    """
    check_request(request)
    index = load_index(ws)
    hub_revision, resolve = _resolver(ws)
    if agent:
        return _chosen(agent, "--agent", "--agent", index, hub_revision, resolve, [])
    decision = decide_with(index, request, hub_revision, resolve)
    default = ws.settings_data["run"]["default_agent"]
    where = f"{ws.settings_file}: run.default_agent"
    if decision.decision == NO_MATCH and default:
        return _chosen(
            default, "run.default_agent", where, index, hub_revision, resolve, decision.rejected
        )
    verifiers_only = all(s.group == VERIFY_GROUP for s in decision.selected)
    if decision.decision == ROUTE and change and verifiers_only and default:
        joined = _chosen(default, "run.default_agent", where, index, hub_revision, resolve, [])
        if all(s.agent != joined.selected[0].agent for s in decision.selected):
            return replace(
                decision,
                selected=[*joined.selected, *decision.selected],
                decided_by="cards and run.default_agent",
            )
    return decision


def _chosen(
    ref: str,
    decided_by: str,
    where: str,
    index: Index,
    hub_revision: str,
    resolve: Callable[[str, str | None], str],
    rejected: list[Rejected],
) -> Decision:
    """The task force of one agent named by ``ref`` (``NAME[@VERSION]``), not by a card."""
    name, version = parse_ref(ref)
    try:
        resolved = resolve(name, f"=={version}" if version else None)
    except NotFound as exc:
        raise exc.with_context(field=where) from None
    selected = Selected(f"({decided_by})", name, resolved, 0, [], 0, "default")
    return Decision(ROUTE, [selected], rejected, [], index.revision, hub_revision, decided_by)


def route(
    ws: Workspace,
    request: str,
    *,
    run_id: str | None = None,
    agent: str | None = None,
    change: bool = False,
) -> tuple[Decision, Receipt]:
    """Decide, and write the route receipt."""
    decision = decide(ws, request, agent=agent, change=change)
    receipt = write_receipt(ws, "route", decision.receipt_fields(), run_id=run_id, request=request)
    return decision, receipt


__all__ = [
    "CLARIFY",
    "NO_MATCH",
    "ROUTE",
    "VERIFY_GROUP",
    "Decision",
    "Rejected",
    "Selected",
    "compile_cards",
    "decide",
    "decide_with",
    "load_index",
    "route",
]
