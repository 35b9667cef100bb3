"""What an agent says it used: tokens and cost, written to ``$AGENTOS_USAGE_FILE``.

An agent that talks to a model knows what the model billed it; AgentOS does not. So each
agent may write a JSON object to the file named by ``$AGENTOS_USAGE_FILE`` (its running
total for the attempt, rewritten as often as it likes)::

    {"tokens": 1234, "cost": 0.0021}

Both fields are optional; ``tokens`` is a whole number >= 0, ``cost`` a finite number >= 0
(in whatever currency the package's models bill; AgentOS only adds and compares). AgentOS
reads the file after each attempt, as the agent left it: a regular file only (never through
a link), at most 4 KB; anything else is not a report, and the run notes why. The agent is
an adversary here too: what it reports is what it claims, recorded as such.
"""

from __future__ import annotations

import json
import math
import os
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentos.shared.fs import read_regular

MAX_BYTES = 4096


@dataclass(frozen=True)
class Usage:
    tokens: int | None = None
    cost: float | None = None

    def __add__(self, other: Usage) -> Usage:
        return Usage(_sum(self.tokens, other.tokens), _sum(self.cost, other.cost))

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in (("tokens", self.tokens), ("cost", self.cost)) if v is not None}


def _sum(a: Any, b: Any) -> Any:
    return b if a is None else a if b is None else a + b


def parse_usage(text: str) -> Usage:
    """A usage report from its JSON text; :class:`ValueError` saying what is wrong."""
    try:
        data = json.loads(text)
    except ValueError:
        raise ValueError("not JSON") from None
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    unknown = sorted(set(data) - {"tokens", "cost"})
    if unknown:
        raise ValueError(f"unknown field {unknown[0]!r} (tokens and cost are known)")
    tokens, cost = data.get("tokens"), data.get("cost")
    if tokens is not None and (type(tokens) is not int or tokens < 0):
        raise ValueError("tokens must be a whole number >= 0")
    if cost is not None and (
        isinstance(cost, bool)
        or not isinstance(cost, int | float)
        or not math.isfinite(cost)
        or cost < 0
    ):
        raise ValueError("cost must be a finite number >= 0")
    return Usage(tokens, None if cost is None else float(cost))


def take_usage(path: Path) -> tuple[Usage | None, str | None]:
    """The usage the agent left at ``path`` (then removed, so the next attempt starts
    afresh), or None and why it is not one (None, None: nothing was written)."""
    try:
        data = read_regular(path, MAX_BYTES + 1)
    except FileNotFoundError:
        return None, None
    _remove(path)
    if data is None:
        return None, "$AGENTOS_USAGE_FILE is not a regular file"
    if len(data) > MAX_BYTES:
        return None, f"$AGENTOS_USAGE_FILE is over {MAX_BYTES} bytes"
    try:
        return parse_usage(data.decode("utf-8", errors="replace")), None
    except ValueError as exc:
        return None, f"$AGENTOS_USAGE_FILE: {exc}"


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        return  # a folder the agent made is left to the run's cleanup
    with suppress(OSError):
        path.unlink()


def report_usage(usage: Usage) -> None:
    """An agent's side: its running total to $AGENTOS_USAGE_FILE, written whole (by
    rename); nothing when the variable is not set (run outside AgentOS)."""
    name = os.environ.get("AGENTOS_USAGE_FILE")
    if not name:
        return
    path = Path(name)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(usage.as_dict()), encoding="utf-8")
    tmp.replace(path)
