"""An agent's outbox: what a confined agent asks of AgentOS besides its work.

An agent cannot reach the workspace (its sandbox hides it), so it writes requests, one
JSON object a line, to ``$AGENTOS_OUTBOX`` (its io folder); ``agentos tasks create`` and
``agentos results submit`` do that for it when they run inside a run. After each attempt
AgentOS keeps what was written (a regular file only, never through a link, at most
:data:`MAX_BYTES`) beside the agent's log, ``.agentos/logs/<run>/<agent>.outbox.jsonl``;
whoever started the run (the workflow scheduler) reads it with :func:`read_outbox` and
decides. The agent is an adversary here too: every entry is checked when it is read,
never trusted for more than a request.
"""

from __future__ import annotations

import json
import os
from contextlib import suppress
from pathlib import Path
from typing import Any

from agentos.shared.fs import read_regular
from agentos.workspace.files import AgentFiles

OUTBOX_ENV = "AGENTOS_OUTBOX"
MAX_BYTES = 256 * 1024
MAX_ENTRIES = 200
KINDS = ("task", "result", "memory")


def keep_outbox(files: AgentFiles) -> None:
    """Move what the agent wrote to its outbox beside its log (appended; the outbox is
    emptied for the next attempt)."""
    path = files.outbox
    try:
        data = read_regular(path, MAX_BYTES) or b""
    except FileNotFoundError:
        return
    with suppress(OSError):
        path.unlink()  # a link or FIFO it left goes too
    if data:
        with files.kept_outbox.open("ab") as out:
            out.write(data if data.endswith(b"\n") else data + b"\n")


def read_outbox(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """The entries kept at ``path`` that are well formed, and why the others are not."""
    entries: list[dict[str, Any]] = []
    problems: list[str] = []
    try:
        lines = path.read_bytes()[:MAX_BYTES].decode("utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        return entries, problems
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        if len(entries) >= MAX_ENTRIES:
            problems.append(f"line {number}: over {MAX_ENTRIES} entries; the rest ignored")
            break
        try:
            entry = json.loads(line)
        except ValueError:
            problems.append(f"line {number}: not JSON")
            continue
        if not isinstance(entry, dict) or entry.get("kind") not in KINDS:
            problems.append(f"line {number}: not a {'/'.join(KINDS)} entry")
            continue
        entries.append(entry)
    return entries, problems


def post(entry: dict[str, Any]) -> Path:
    """The agent's side: append one entry to $AGENTOS_OUTBOX."""
    path = Path(os.environ[OUTBOX_ENV])
    with path.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(entry) + "\n")
    return path


def in_a_run() -> bool:
    return bool(os.environ.get(OUTBOX_ENV))
