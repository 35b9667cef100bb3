"""Verifying the chain: every receipt's hash, link and mac, the head and the anchor."""

from __future__ import annotations

import hashlib

from agentos.receipts.chain import (
    FIRST,
    HEAD_FILE,
    PREVIOUS_RE,
    TRAILER_RE,
    open_chain,
    read_regular,
    receipt_id,
)
from agentos.receipts.sign import STATE_ANCHOR, STATE_KEY, Key, load_key, read_anchor
from agentos.workspace import Workspace


def _check_one(
    rid: str, data: bytes, expected_previous: str | None
) -> tuple[str | None, str | None, list[str]]:
    """The sha256 the receipt declares (None when it has lost it); its mac, when its own
    content is intact ("" when it has none; None when its content no longer matches its
    sha256 or id, which says more than a signature could); and its problems."""
    problems = []
    trailer = TRAILER_RE.search(data)
    if trailer is None:
        return (
            None,
            None,
            [f"{rid}: changed after it was written (its closing sha256 line is gone)"],
        )
    declared = trailer.group(1).decode()
    content = data[: trailer.start() + (1 if trailer.group(0).startswith(b"\n") else 0)]
    if hashlib.sha256(content).hexdigest() != declared:
        problems.append(f"{rid}: changed after it was written (content does not match its sha256)")
    if not content.startswith(f"receipt: {rid}\n".encode()):
        holds = content.split(b"\n", 1)[0].decode("utf-8", "replace").removeprefix("receipt: ")
        problems.append(
            f"{rid}: the file holds receipt {holds!r}: receipts were moved or reordered"
        )
    previous = PREVIOUS_RE.search(content)
    if previous is None:
        problems.append(f"{rid}: changed after it was written (its previous line is gone)")
    mac = None if problems else (trailer.group(2) or b"").decode()
    if previous is not None and expected_previous not in (None, previous.group(1).decode()):
        before = expected_previous.split()[0] if expected_previous != FIRST else "the start"
        problems.append(
            f"{rid}: does not follow {before}: one of them was changed, or receipts were reordered"
        )
    return declared, mac, problems


def _check_mac(rid: str, seq: int, declared: str, mac: str, key: Key | None) -> str | None:
    """What is wrong with an intact receipt's signature (``mac``, "" for none), if anything."""
    if key is None:
        return (
            f"{rid}: signed, but the workspace's key ({STATE_KEY}) is missing: "
            "its receipts cannot be authenticated"
            if mac
            else None
        )
    if not mac:
        if seq < key.first_signed:
            return None  # written before the workspace had a key
        return f"{rid}: carries no signature of the workspace's key: written outside AgentOS"
    if not key.matches(mac, rid, declared):
        return (
            f"{rid}: its signature does not match the workspace's key: forged, or "
            "rewritten with recomputed hashes"
        )
    return None


def verify_chain(ws: Workspace) -> list[str]:
    """Walk the chain; return every problem, each naming a receipt id (empty: intact)."""
    directory = ws.receipts_dir
    if not directory.is_dir():
        key = load_key(ws.state_dir)
        anchor = None if key is None else read_anchor(ws.state_dir, key)
        if anchor is None:
            return []
        return [f"{directory}: missing, but AgentOS wrote {anchor[0]} receipts there"]
    with open_chain(directory, exclusive=False) as chain:  # a consistent listing, head, anchor
        files = chain.files()
        head = chain.head()
        key = load_key(ws.state_dir)
        anchor = None if key is None else read_anchor(ws.state_dir, key)
    problems: list[str] = []
    if head is None and files:
        problems.append(
            f"{receipt_id(max(files))}: the chain's head ({HEAD_FILE}) is missing "
            "or unreadable, so the newest receipts cannot be checked"
        )
    if key is not None and anchor is None:
        problems.append(
            f"AgentOS's record of the newest receipt ({STATE_ANCHOR}) is missing or forged: "
            "receipts removed from the chain's end cannot be told"
        )
    newest_file = max(files, default=0)
    top = max(newest_file, anchor[0] if anchor else 0)
    if head is not None and head[0] > top:
        problems.append(
            f"{receipt_id(head[0])}: the chain's head ({HEAD_FILE}) names a receipt beyond "
            f"the newest there is ({receipt_id(top) if top else 'none'})"
        )
    previous: str | None = FIRST
    missing_key_told = False
    for seq in range(1, top + 1):
        rid = receipt_id(seq)
        name = files.get(seq)
        if name is None:
            if anchor is not None and newest_file < seq <= anchor[0]:
                problems.append(
                    f"{rid}: missing: removed from the chain's end "
                    f"(AgentOS last wrote {receipt_id(anchor[0])})"
                )
            else:
                problems.append(f"{rid}: missing (deleted or renamed)")
            previous = None
            continue
        declared, mac, found = _check_one(rid, read_regular(directory / name), previous)
        problems.extend(found)
        if declared is not None and mac is not None:
            wrong = _check_mac(rid, seq, declared, mac, key)
            if wrong is not None and not (key is None and missing_key_told):
                problems.append(wrong)
                missing_key_told = key is None
        if head is not None and seq == head[0] and declared != head[1]:
            problems.append(
                f"{rid}: changed after it was written (the chain's head records another sha256)"
            )
        if anchor is not None and seq == anchor[0] and declared != anchor[1]:
            problems.append(
                f"{rid}: changed after it was written (AgentOS's record of the newest "
                "receipt holds another sha256)"
            )
        previous = None if declared is None else f"{rid} {declared}"
    return problems
