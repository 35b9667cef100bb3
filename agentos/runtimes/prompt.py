"""The task as the in-pane framework agents read it: request, context, fed-back failures.

Read from the files and variables the orchestrator gives every agent, at the moment the
agent starts (so a restart by the guardian, or a retry, sees the current feedback). Also
the heartbeat the agents touch at each step, which tells the guardian they are working.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

MAX_CONTEXT = 24_000  # characters of knowledge-store context put into the first message


def _read(variable: str) -> str:
    path = os.environ.get(variable)
    if not path or not Path(path).is_file():
        return ""
    return Path(path).read_text(encoding="utf-8", errors="replace").strip()


def request() -> str:
    return os.environ.get("AGENTOS_REQUEST", "").strip()


def context() -> str:
    text = _read("AGENTOS_CONTEXT_FILE")
    if len(text) > MAX_CONTEXT:
        text = text[:MAX_CONTEXT] + "\n[... the rest is in AGENTOS_CONTEXT.md]"
    return text


def feedback() -> str:
    return _read("AGENTOS_FEEDBACK_FILE")


def attempt() -> int:
    try:
        return int(os.environ.get("AGENTOS_ATTEMPT", "1"))
    except ValueError:
        return 1


def user_message() -> str:
    """The first user message: the request, then the context, then last attempt's failures."""
    parts = ["## Request", request()]
    ctx = context()
    if ctx:
        parts += ["## Context from the knowledge store", ctx]
    fb = feedback()
    if fb:
        parts += [f"## Attempt {attempt()}: the checks failed last time; fix this", fb]
    return "\n\n".join(parts) + "\n"


def heartbeat() -> None:
    """Touch AGENTOS_HEARTBEAT_FILE: the agent has just made progress."""
    path = os.environ.get("AGENTOS_HEARTBEAT_FILE")
    if path:
        # OSError: the run directory is gone, so the run is over and nobody is watching.
        with contextlib.suppress(OSError):
            Path(path).write_text(f"{time.time():.0f}\n", encoding="utf-8")
