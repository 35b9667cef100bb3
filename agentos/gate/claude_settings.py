"""Claude Code's ``.claude/settings.json``: merging the gate's ``Stop`` hook into it.

The file's shape (``hooks.Stop[].hooks[] = {type: command, command, timeout}``) is Claude
Code's; everything else in it belongs to the user and is kept as it is.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from agentos.errors import ValidationFailed
from agentos.gate.builtin import git
from agentos.shared.fs import atomic_write

HOOK_EVENT = "Stop"
HOOK_TIMEOUT = 1800  # seconds Claude Code gives the hook; the checks' own timeouts still apply


def _is_ours(hook: Any) -> bool:
    command = hook.get("command") if isinstance(hook, dict) else None
    return isinstance(command, str) and "agentos" in command and " gate hook" in command


def merge_stop_hook(
    repo: Path, command: str, *, timeout: int = HOOK_TIMEOUT, local: bool = False
) -> tuple[Path, bool]:
    """Merge a Stop hook running ``command`` into ``repo/.claude/settings.json`` (or
    ``settings.local.json`` with ``local``), keeping everything already there.

    An AgentOS gate hook already present is updated in place, so merging twice changes
    nothing. Returns the settings file and whether it changed.
    """
    path = repo / ".claude" / ("settings.local.json" if local else "settings.json")
    settings: Any = {}
    if path.exists():
        try:
            settings = json.loads(path.read_text(encoding="utf-8") or "{}")
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ValidationFailed(f"not valid JSON: {exc}", file=path) from None
    if not isinstance(settings, dict):
        raise ValidationFailed("expected a JSON object", file=path, field="(root)")
    hooks = settings.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise ValidationFailed("expected an object", file=path, field="hooks")
    stop = hooks.setdefault(HOOK_EVENT, [])
    if not isinstance(stop, list):
        raise ValidationFailed("expected a list", file=path, field=f"hooks.{HOOK_EVENT}")
    ours = {"type": "command", "command": command, "timeout": timeout}
    placed = False
    emptied: list[Any] = []
    for group in stop:
        inner = group.get("hooks") if isinstance(group, dict) else None
        if not isinstance(inner, list) or not any(_is_ours(h) for h in inner):
            continue
        kept: list[Any] = []
        for hook in inner:
            if not _is_ours(hook):
                kept.append(hook)
            elif not placed:  # the first copy of our hook is updated, any other dropped
                kept.append(ours)
                placed = True
        inner[:] = kept
        if not kept:
            emptied.append(group)
    stop[:] = [g for g in stop if not any(g is e for e in emptied)]
    if not placed:
        stop.append({"hooks": [ours]})
    text = json.dumps(settings, indent=2, ensure_ascii=False) + "\n"
    before = path.read_text(encoding="utf-8") if path.exists() else None
    if text == before:
        return path, False
    atomic_write(path, text)
    if local:
        _exclude_locally(repo, ".claude/settings.local.json")
    return path, True


def _exclude_locally(repo: Path, rel: str) -> None:
    """Add ``rel`` to the repository's ``info/exclude`` so diff checks and ``git add -A``
    never see it."""
    out = git(repo, "rev-parse", "--git-path", "info/exclude")
    if out.returncode != 0:
        return
    exclude = Path(os.fsdecode(out.stdout.strip()))
    exclude = exclude if exclude.is_absolute() else repo / exclude
    line = "/" + rel
    existing = exclude.read_text(encoding="utf-8") if exclude.exists() else ""
    if line not in existing.splitlines():
        exclude.parent.mkdir(parents=True, exist_ok=True)
        sep = "" if not existing or existing.endswith("\n") else "\n"
        exclude.write_text(existing + sep + line + "\n", encoding="utf-8")
