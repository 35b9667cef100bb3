"""Verifying the chain: every receipt's hash, link and mac, the head and the anchor.

What is judged, receipt by receipt, and what it means:

- its content against its sha256, its id against its file name, its link against the one
  before it: an edited, removed, reordered or moved receipt;
- its mac, under the workspace's key: a receipt forged, or rewritten with recomputed hashes;
- its ``signed_from``: from which receipt on this workspace's receipts are signed. Any
  receipt from there on without a mac (and not written with signing turned off) had it
  stripped, or was written outside AgentOS. This needs no key and no anchor, so a
  downgrade (macs stripped, bodies edited, hashes and head recomputed, key and anchor
  deleted) fails even where nothing else on disk remembers that the workspace was signed.
  Receipts written before AgentOS signed them (no ``signed_from``, no mac) pass as long as
  no later receipt says signing had begun. Someone who rewrites every receipt from the
  first signed one on into that older form forges a whole history: only a copy kept
  elsewhere tells it.
- the key and the anchor themselves: once receipts are signed, a missing key or anchor is a
  problem. With ``hashes_only`` (a machine without the key) neither is read, no mac is
  checked, and the report says so.
- receipts signed before the key's first receipt, with another key: when that first receipt
  is a ``rekey`` receipt (the key was replaced on purpose), they are noted as signed with a
  previous key, not verifiable, and not a problem: their content is pinned by the rekey
  receipt's signed link, so they cannot have changed since; what they said before it, only
  an outside copy vouches for. Without a rekey receipt there, each is a problem.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from agentos.receipts.chain import (
    ANCHOR_FILE,
    FIRST,
    HEAD_FILE,
    OFF,
    PREVIOUS_RE,
    STATE_ANCHOR,
    Chained,
    Sealed,
    open_directory,
    read_regular,
    receipt_id,
    sealed,
)
from agentos.receipts.place import open_chain
from agentos.receipts.sign import (
    KEY_FILE,
    STATE_KEY,
    Key,
    load_key,
    read_anchor,
)
from agentos.workspace.layout import Workspace


@dataclass(frozen=True)
class ChainReport:
    """What verifying found: ``problems`` (each naming a receipt id, or the key, the anchor
    or the head; none: the chain is intact) and ``notes``, true things that are not
    problems (signing turned off, receipts signed with a replaced key, macs not checked)."""

    receipts: int
    problems: tuple[str, ...]
    notes: tuple[str, ...]
    macs_checked: bool
    signed: tuple[int, int] | None = None  # the first and last receipt that carry a mac

    @property
    def ok(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict[str, object]:
        return {
            "ok": self.ok,
            "receipts": self.receipts,
            "macs_checked": self.macs_checked,
            "problems": list(self.problems),
            "notes": list(self.notes),
        }


@dataclass(frozen=True)
class Snapshot:
    """What verifying reads under the chain's lock: a consistent listing, head and anchor,
    and how to read a receipt (a file, read after the lock is let go; a row of the table,
    read in the same snapshot)."""

    read: Callable[[str], bytes]
    files: dict[int, str]
    head: tuple[int, str] | None
    key: Key | None
    anchor: tuple[int, str] | None
    anchor_file: bool
    hashes_only: bool
    head_name: str = HEAD_FILE  # what the messages call the head and the anchor
    anchor_name: str = STATE_ANCHOR


def snapshot(chain: Chained, state_dir: Path, *, hashes_only: bool) -> Snapshot:
    key = None if hashes_only else load_key(state_dir)
    directory = chain.directory
    return Snapshot(
        chain.read if directory is None else (lambda name: read_regular(directory / name)),
        chain.files(),
        chain.head(),
        key,
        None if key is None else read_anchor(chain, key),
        chain.has_anchor(),
        hashes_only,
        chain.head_name,
        chain.anchor_name,
    )


def verify_receipts(ws: Workspace, *, hashes_only: bool = False) -> ChainReport:
    """Walk the chain (see the module's docstring). ``hashes_only``: without the key.

    Where the state is PostgreSQL, the chain is the state's table, and a machine that holds
    no key (one that reads, never writes) verifies hashes only, and says so."""
    signing = bool(ws.settings_data["receipts"]["sign"])
    if ws.state.shared:
        keyless = not hashes_only and not os.path.lexists(ws.state_dir / KEY_FILE)
        with open_chain(ws, exclusive=False) as chain:
            report = check(
                snapshot(chain, ws.state_dir, hashes_only=hashes_only or keyless), signing=signing
            )
        if keyless:
            note = (
                f"this machine holds no receipts key ({STATE_KEY}), so the receipts were "
                "verified by hashes only: `agentos receipts key import FILE` (the key of a "
                "machine that writes them) checks their MACs too"
            )
            report = replace(report, notes=(note, *report.notes))
        return report
    directory = ws.receipts_dir
    if not directory.is_dir():
        key = None if hashes_only else load_key(ws.state_dir)
        anchor = None if key is None else read_anchor(_Gone(ws.state_dir / ANCHOR_FILE), key)
        problems = (
            ()
            if anchor is None
            else (f"{directory}: missing, but AgentOS wrote {anchor[0]} receipts there",)
        )
        return ChainReport(0, problems, _signing_notes(signing, 0, hashes_only), key is not None)
    with open_chain(ws, exclusive=False) as chain:
        seen = snapshot(chain, ws.state_dir, hashes_only=hashes_only)
    return check(seen, signing=signing)


def verify_directory(
    directory: Path, state_dir: Path, *, hashes_only: bool = False, signing: bool = True
) -> ChainReport:
    """Walk the chain in a folder ``receipts export`` wrote (its anchor in it), with the key
    of the workspace at ``state_dir`` (none: ``hashes_only``)."""
    if not (directory / HEAD_FILE).is_file():
        from agentos.errors import BadInput

        raise BadInput(
            f"holds no receipts chain (no {HEAD_FILE}): give a folder `agentos receipts "
            "export` wrote",
            file=directory,
        )
    with open_directory(directory, exclusive=False, anchor=directory / ANCHOR_FILE) as chain:
        seen = snapshot(chain, state_dir, hashes_only=hashes_only)
    seen = replace(seen, anchor_name=str(directory / ANCHOR_FILE))
    return check(seen, signing=signing)


class _Gone(Chained):
    """A workspace's chain whose folder is gone: only its anchor is left to read."""

    def __init__(self, anchor: Path) -> None:
        self.anchor_file = anchor

    def anchor(self) -> bytes:
        return read_regular(self.anchor_file)

    def has_anchor(self) -> bool:
        return os.path.lexists(self.anchor_file)


def verify_chain(ws: Workspace) -> list[str]:
    """Walk the chain; return every problem, each naming a receipt id (empty: intact)."""
    return list(verify_receipts(ws).problems)


def check(seen: Snapshot, *, signing: bool) -> ChainReport:
    """Judge the receipts ``seen`` lists (read now, outside the chain's lock)."""
    walk = _Walk(seen)
    walk.run()
    return walk.report(signing)


def _signing_notes(signing: bool, off: int, hashes_only: bool) -> tuple[str, ...]:
    notes = []
    if hashes_only:
        notes.append(
            "hashes only: MACs and the anchor were not checked (no key was read); hashes, "
            "links and signed_from lines were"
        )
    if not signing:
        notes.append(
            "signing is off (agentos.yaml: receipts: {sign: false}): new receipts carry no "
            "mac, and only their hashes and links are checked"
        )
    if off:
        notes.append(
            f"{off} receipt{'s' * (off != 1)} written with signing off: no mac, only "
            "hashes and links"
        )
    return tuple(notes)


def _span(seqs: list[int]) -> str:
    first, last = receipt_id(min(seqs)), receipt_id(max(seqs))
    return first if first == last else f"{first}-{last}"


class _Walk:
    """One pass over the receipts, in order; problems are kept with the receipt they name,
    and sorted by it at the end."""

    def __init__(self, seen: Snapshot) -> None:
        self.seen = seen
        self.key = seen.key
        self.found: list[tuple[int, int, str]] = []  # (receipt, order within it, problem)
        self.unsigned: list[int] = []  # no mac, no signed_from: legal before signing began
        self.starts: set[int] = set()  # where the receipts say signing began
        self.other_key: list[int] = []  # signed, before the key's first receipt, not by it
        self.signed: tuple[int, int] | None = None  # the first and last receipt with a mac
        self.off = 0
        self.rekeyed = False  # the key's first receipt is a rekey receipt it signed

    def problem(self, seq: int, order: int, text: str) -> None:
        self.found.append((seq, order, text))

    def run(self) -> None:
        seen = self.seen
        files, head, anchor = seen.files, seen.head, seen.anchor
        if head is None and files:
            self.problem(
                0,
                0,
                f"{receipt_id(max(files))}: the chain's head ({seen.head_name}) is missing "
                "or unreadable, so the newest receipts cannot be checked",
            )
        newest_file = max(files, default=0)
        top = max(newest_file, anchor[0] if anchor else 0)
        if head is not None and head[0] > top:
            self.problem(
                0,
                3,
                f"{receipt_id(head[0])}: the chain's head ({seen.head_name}) names a receipt "
                f"beyond the newest there is ({receipt_id(top) if top else 'none'})",
            )
        previous: str | None = FIRST
        for seq in range(1, top + 1):
            rid = receipt_id(seq)
            name = files.get(seq)
            if name is None:
                if anchor is not None and newest_file < seq <= anchor[0]:
                    why = (
                        f"removed from the chain's end (AgentOS last wrote {receipt_id(anchor[0])})"
                    )
                    self.problem(seq, 0, f"{rid}: missing: {why}")
                else:
                    self.problem(seq, 0, f"{rid}: missing (deleted or renamed)")
                previous = None
                continue
            closing, intact = self._one(seq, rid, seen.read(name), previous)
            declared = None if closing is None else closing.sha256
            if closing is not None and intact:
                self._signature(seq, rid, closing)
            if head is not None and seq == head[0] and declared != head[1]:
                self.problem(
                    seq,
                    2,
                    f"{rid}: changed after it was written (the chain's head records another "
                    "sha256)",
                )
            if anchor is not None and seq == anchor[0] and declared != anchor[1]:
                self.problem(
                    seq,
                    2,
                    f"{rid}: changed after it was written (AgentOS's record of the newest "
                    "receipt holds another sha256)",
                )
            previous = None if declared is None else f"{rid} {declared}"

    def _one(
        self, seq: int, rid: str, data: bytes, expected_previous: str | None
    ) -> tuple[Sealed | None, bool]:
        """The receipt's closing lines (None when its sha256 line is gone), and whether its
        own content is intact (when it is not, that says more than a signature could)."""
        closing = sealed(data)
        if closing is None:
            self.problem(
                seq, 0, f"{rid}: changed after it was written (its closing sha256 line is gone)"
            )
            return None, False
        content = closing.content
        intact = True
        if hashlib.sha256(content).hexdigest() != closing.sha256:
            self.problem(
                seq, 0, f"{rid}: changed after it was written (content does not match its sha256)"
            )
            intact = False
        if not content.startswith(f"receipt: {rid}\n".encode()):
            holds = content.split(b"\n", 1)[0].decode("utf-8", "replace").removeprefix("receipt: ")
            self.problem(
                seq, 0, f"{rid}: the file holds receipt {holds!r}: receipts were moved or reordered"
            )
            intact = False
        previous = PREVIOUS_RE.search(content)
        if previous is None:
            self.problem(seq, 0, f"{rid}: changed after it was written (its previous line is gone)")
            intact = False
        elif expected_previous not in (None, previous.group(1).decode()):
            before = expected_previous.split()[0] if expected_previous != FIRST else "the start"
            self.problem(
                seq,
                0,
                f"{rid}: does not follow {before}: one of them was changed, or receipts were "
                "reordered",
            )
        return closing, intact

    def _signature(self, seq: int, rid: str, closing: Sealed) -> None:
        """Judge an intact receipt's mac and signed_from (those that depend on receipts after
        it are judged in :meth:`report`)."""
        if closing.signed_from == OFF:
            self.off += 1
            return
        starts = closing.signing_starts
        if closing.signed_from is not None:
            if starts is None:
                self.problem(
                    seq,
                    1,
                    f"{rid}: its signed_from line ({closing.signed_from!r}) names no receipt: "
                    "written outside AgentOS",
                )
            else:
                self.starts.add(starts)
        if not closing.mac:
            if starts is None:
                self.unsigned.append(seq)
            else:
                self.problem(seq, 1, _stripped(rid, starts))
            return
        self.signed = (seq, seq) if self.signed is None else (self.signed[0], seq)
        key = self.key
        if key is None:
            return
        if key.matches(closing.mac, rid, closing.sha256):
            if seq == key.first_signed:
                self.rekeyed = closing.content.startswith(f"receipt: {rid}\nkind: rekey\n".encode())
        elif seq < key.first_signed:
            self.other_key.append(seq)
        else:
            self.problem(
                seq,
                1,
                f"{rid}: its signature does not match the workspace's key: forged, or "
                "rewritten with recomputed hashes",
            )

    def report(self, signing: bool) -> ChainReport:
        seen, key = self.seen, self.key
        required = min(self.starts | ({key.first_signed} if key else set()), default=None)
        for seq in self.unsigned:
            if required is not None and seq >= required:
                self.problem(seq, 1, _stripped(receipt_id(seq), required))
        notes = list(_signing_notes(signing, self.off, seen.hashes_only))
        if self.other_key and key is not None:
            first = receipt_id(key.first_signed)
            if self.rekeyed:
                notes.append(
                    f"{_span(self.other_key)}: signed with a previous key, not verifiable (the "
                    f"key was replaced by rekey {first}; their hashes and links are checked)"
                )
            else:
                for seq in self.other_key:
                    self.problem(
                        seq,
                        1,
                        f"{receipt_id(seq)}: signed with another key than the workspace's, and "
                        f"{first}, where its key begins, is no rekey receipt: forged, or the key "
                        "was replaced by hand",
                    )
        ever_signed = self.signed is not None or bool(self.starts) or seen.anchor_file
        if not seen.hashes_only and ever_signed:
            if key is None:
                self.problem(
                    0,
                    1,
                    f"the receipts key ({STATE_KEY}) is missing, but receipts here are signed: "
                    "restore it from a backup or `agentos receipts key import FILE` (`agentos "
                    "receipts verify --hashes-only` checks all else without it)",
                )
            if not seen.anchor_file:
                self.problem(
                    0,
                    2,
                    f"AgentOS's record of the newest receipt ({seen.anchor_name}) is missing: "
                    "receipts removed from the chain's end cannot be told",
                )
            elif key is not None and seen.anchor is None:
                self.problem(
                    0,
                    2,
                    f"AgentOS's record of the newest receipt ({seen.anchor_name}) is forged (its "
                    "signature does not match the key): receipts removed from the chain's end "
                    "cannot be told",
                )
        self.found.sort(key=lambda p: (p[0], p[1]))
        return ChainReport(
            receipts=len(seen.files),
            problems=tuple(p[2] for p in self.found),
            notes=tuple(notes),
            macs_checked=key is not None,
            signed=self.signed,
        )


def _stripped(rid: str, starts: int) -> str:
    return (
        f"{rid}: carries no signature, though receipts here are signed from "
        f"{receipt_id(starts)} on: its mac was stripped, or it was written outside AgentOS"
    )
