"""Memories: notes agents leave for later tasks, kept as Markdown files under the
workspace's ``memory/`` folder and indexed in the knowledge store, so a later task's
context (``AGENTOS_CONTEXT_FILE``) finds them like any other text."""

from __future__ import annotations

import hashlib
import re
import time
from pathlib import Path

from agentos.errors import BadInput
from agentos.shared.fs import atomic_write
from agentos.workspace.layout import Workspace

MEMORY_DIR = "memory"
MAX_CHARS = 20_000


def save_memory(ws: Workspace, text: str, title: str | None = None) -> Path:
    """Write the note and index it; its file."""
    from agentos.knowledge.store import open_store

    if not text.strip():
        raise BadInput("a memory needs some text", field="text")
    text = text[:MAX_CHARS]
    heading = (title or text.strip().splitlines()[0])[:120]
    slug = re.sub(r"[^a-z0-9]+", "-", heading.lower()).strip("-")[:48] or "note"
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    path = ws.root / MEMORY_DIR / f"{time.strftime('%Y%m%d-%H%M%S')}-{slug}-{digest}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, f"# {heading}\n\n{text.strip()}\n")
    with open_store(ws) as store:
        store.add([path])
    return path
