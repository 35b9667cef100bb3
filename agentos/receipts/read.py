"""Reading receipts back: the list in chain order, one receipt's text, and its parts parsed
(:mod:`agentos.receipts.format` is how fields are written and read)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from agentos.errors import NotFound
from agentos.receipts.chain import NAME_RE, SUFFIX, file_of, receipt_id
from agentos.receipts.format import HEADER, parse_fields
from agentos.workspace.layout import Workspace


@dataclass(frozen=True)
class ReceiptInfo:
    id: str
    kind: str
    time: str
    run_id: str | None
    file: Path | None  # its file (None: in the state's table, on PostgreSQL)

    @property
    def path(self) -> Path:
        """Its file; a receipt in the state's table (PostgreSQL) has none."""
        return file_of(self.id, self.file)

    def as_dict(self) -> dict[str, object]:
        return {
            "id": self.id,
            "kind": self.kind,
            "time": self.time,
            "run_id": self.run_id,
            "path": None if self.file is None else str(self.file),
        }


def _receipt_paths(directory: Path) -> list[tuple[int, Path]]:
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    found = ((m, name) for name in names if (m := NAME_RE.match(name)))
    return sorted(
        (int(m.group(1)), directory / name)
        for m, name in found
        if receipt_id(int(m.group(1))) == m.group(1)
    )


def _header(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    with path.open("rb") as fh:
        for raw in fh:
            key, sep, value = raw.decode("utf-8", "replace").rstrip("\n").partition(": ")
            if not sep or key not in HEADER or key in out:
                break
            out[key] = value
    return out


def list_receipts(ws: Workspace, run_id: str | None = None) -> list[ReceiptInfo]:
    """Every receipt in chain order, or those of one run."""
    if ws.state.shared:
        from agentos.receipts.table import listed

        return [
            ReceiptInfo(receipt_id(seq), kind, time, run, None)
            for seq, kind, time, run in listed(ws, run_id)
        ]
    out = []
    for seq, path in _receipt_paths(ws.receipts_dir):
        head = _header(path)
        if run_id is not None and head.get("run") != run_id:
            continue
        out.append(
            ReceiptInfo(
                receipt_id(seq), head.get("kind", "?"), head.get("time", "?"), head.get("run"), path
            )
        )
    return out


def _seq(rid: str) -> int:
    text = rid.strip().removesuffix(SUFFIX)
    if not text.isdigit() or int(text) == 0:
        raise NotFound(f"{rid!r} is not a receipt id (like 00000042)", field="id")
    return int(text)


def receipt_path(ws: Workspace, rid: str) -> Path:
    """The file of receipt ``rid`` (``00000042``, ``42`` or ``00000042.txt``)."""
    path = ws.receipts_dir / f"{receipt_id(_seq(rid))}{SUFFIX}"
    if not path.is_file():
        raise NotFound(f"no receipt {path.stem} in {ws.receipts_dir}", field="id")
    return path


def read_receipt(ws: Workspace, id: str) -> str:
    """The text of a receipt, exactly as written (from its file, or the state's table)."""
    if ws.state.shared:
        from agentos.receipts.table import text_of

        return text_of(ws, _seq(id)).decode("utf-8", "replace")
    return receipt_path(ws, id).read_text(encoding="utf-8", errors="replace")


@dataclass(frozen=True)
class ParsedReceipt:
    """A receipt read back: its header, its request, its fields as they were written (the
    same mappings, lists and scalars, see :mod:`agentos.receipts.format`), its chain link
    and signature lines, and its text. ``problem`` names the first line that could not be
    read (a receipt edited by hand); the fields before it are kept."""

    id: str
    kind: str
    time: str
    run_id: str | None
    request: str | None
    request_sha256: str | None
    fields: dict[str, object]
    previous: str | None
    sha256: str | None
    problem: str | None
    text: str
    path: Path | None = None
    mac: str | None = None
    signed_from: str | None = None

    def as_dict(self) -> dict[str, object]:
        return {
            "id": self.id,
            "path": None if self.path is None else str(self.path),
            "kind": self.kind,
            "time": self.time,
            "run": self.run_id,
            "request": self.request,
            "request_sha256": self.request_sha256,
            "fields": self.fields,
            "signed_from": self.signed_from,
            "previous": self.previous,
            "sha256": self.sha256,
            "mac": self.mac,
            "problem": self.problem,
            "text": self.text,
        }


def parse_receipt(text: str, path: Path | None = None) -> ParsedReceipt:
    """Read a receipt's text back into its parts; never raises (see ``problem``)."""
    lines = text.split("\n")  # only \n: a quoted value may hold other line separators
    if lines[-1] == "":
        lines.pop()
    head: dict[str, str] = {}
    start = 0
    for line in lines:
        key, sep, value = line.partition(": ")
        if not sep or key not in HEADER or key in head:
            break
        head[key] = value
        start += 1
    end = len(lines)
    trailer: dict[str, str] = {}
    for key in ("mac", "sha256", "previous", "signed_from"):
        if end > start and lines[end - 1].startswith(f"{key}: "):
            trailer[key] = lines[end - 1][len(key) + 2 :]
            end -= 1
    fields, problem = parse_fields(lines[start:end], first=start + 1)
    missing = [key for key in ("receipt", "kind", "time") if key not in head]
    if missing:
        problem = f"line {start + 1}: the header has no {', '.join(missing)}"
    request = fields.pop("request", None)
    request_sha256 = fields.pop("request_sha256", None)
    return ParsedReceipt(
        id=head.get("receipt") or (path.stem if path is not None else "?"),
        kind=head.get("kind", "?"),
        time=head.get("time", "?"),
        run_id=head.get("run"),
        request=None if request is None else str(request),
        request_sha256=None if request_sha256 is None else str(request_sha256),
        fields=fields,
        previous=trailer.get("previous"),
        sha256=trailer.get("sha256"),
        problem=problem,
        text=text,
        path=path,
        mac=trailer.get("mac"),
        signed_from=trailer.get("signed_from"),
    )


def load_receipt(ws: Workspace, id: str) -> ParsedReceipt:
    """Receipt ``id`` (``00000042``, ``42`` or ``00000042.txt``), read and parsed."""
    if ws.state.shared:
        return parse_receipt(read_receipt(ws, id))
    path = receipt_path(ws, id)
    return parse_receipt(path.read_text(encoding="utf-8", errors="replace"), path)
