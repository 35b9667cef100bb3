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
from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

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


def describe(used: Mapping[str, Any] | None) -> str:
    """Usage as a person reads it: ``1234 tokens, cost 0.0035`` (its parts that are
    known), or "" when none was reported."""
    if not used:
        return ""
    parts = []
    if used.get("tokens") is not None:
        parts.append(f"{used['tokens']} tokens")
    if used.get("cost") is not None:
        parts.append(f"cost {used['cost']:.4g}")
    return ", ".join(parts)


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


# -- what a CLI says it used, read from its machine-readable output as it streams ----------

MAX_LINE = 1 << 20  # a longer line (a tool's whole output) is skipped, never a usage event


class Price(Protocol):
    """What one model costs per million tokens (``prices:`` in agentos.yaml)."""

    @property
    def input(self) -> float: ...
    @property
    def output(self) -> float: ...
    @property
    def cached_input(self) -> float | None: ...


@dataclass(frozen=True)
class Tokens:
    """The tokens one model used: ``input`` (``cached`` of them read from its cache) and
    ``output``."""

    input: int = 0
    output: int = 0
    cached: int = 0

    @property
    def total(self) -> int:
        return self.input + self.output

    def __add__(self, other: Tokens) -> Tokens:
        return Tokens(
            self.input + other.input, self.output + other.output, self.cached + other.cached
        )

    def cost(self, price: Price) -> float:
        cached = min(self.cached, self.input)
        cached_price = price.input if price.cached_input is None else price.cached_input
        per_token = (
            (self.input - cached) * price.input + cached * cached_price + self.output * price.output
        )
        return per_token / 1_000_000


def priced(models: Mapping[str, Tokens], prices: Mapping[str, Price]) -> float | None:
    """What ``models`` cost by the price table, or None when a model that used tokens has
    no price there (a cost is never guessed)."""
    used = {name: tokens for name, tokens in models.items() if tokens.total}
    if not used or any(name not in prices for name in used):
        return None
    return sum(tokens.cost(prices[name]) for name, tokens in used.items())


class Meter:
    """One attempt's usage, as a CLI reports it in its machine-readable output: fed the
    output's lines as they come (:meth:`line`); :meth:`usage` is the total so far. Each
    CLI runtime reads its own events (:meth:`event`) into ``models`` (tokens per model)
    and ``cost`` (what the CLI itself says it cost, when it says)."""

    def __init__(self) -> None:
        self.models: dict[str, Tokens] = {}
        self.cost: float | None = None

    def line(self, text: str) -> None:
        text = text.strip()
        if not text.startswith("{"):
            return  # the CLI's other output (its stderr shares the log)
        try:
            event = json.loads(text)
        except ValueError:
            return
        if isinstance(event, dict):
            self.event(event)

    def event(self, event: dict[str, Any]) -> None:
        raise NotImplementedError

    def usage(self, prices: Mapping[str, Price]) -> Usage | None:
        """Tokens and cost so far: the cost the CLI reported, else the price table's,
        else none; None when nothing was reported."""
        if not self.models and self.cost is None:
            return None
        tokens = sum(t.total for t in self.models.values())
        cost = self.cost if self.cost is not None else priced(self.models, prices)
        return Usage(tokens, cost)


def count(data: Mapping[str, Any], key: str) -> int:
    """A token count from a CLI's event: a whole number >= 0, else 0."""
    value = data.get(key)
    return value if type(value) is int and value >= 0 else 0


def amount(value: object) -> float | None:
    """A cost from a CLI's event: a finite number >= 0, else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) and value >= 0 else None


class LogTail:
    """The lines appended to a log since ``offset``, read as they come: :meth:`read` hands
    each whole new line to ``sink``."""

    def __init__(self, path: Path, sink: Callable[[str], None]) -> None:
        self.path = path
        self.sink = sink
        self.offset = path.stat().st_size if path.exists() else 0
        self._partial = b""
        self._skipping = False  # inside a line longer than MAX_LINE

    def read(self) -> None:
        try:
            with self.path.open("rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return
        self.offset += len(data)
        *lines, rest = (self._partial + data).split(b"\n")
        for raw in lines:
            if not self._skipping:
                self.sink(raw.decode("utf-8", errors="replace"))
            self._skipping = False
        if len(rest) > MAX_LINE:
            rest, self._skipping = b"", True
        self._partial = rest


@dataclass(frozen=True)
class Budget:
    """What one agent may use over its attempts in a run (``run.budget``)."""

    tokens: int | None = None
    cost: float | None = None

    def exceeded(self, used: Usage | None) -> str | None:
        """Why ``used`` is over the budget, or None."""
        if used is None:
            return None
        if self.tokens is not None and used.tokens is not None and used.tokens > self.tokens:
            return f"{used.tokens} tokens, over its budget of {self.tokens}"
        if self.cost is not None and used.cost is not None and used.cost > self.cost:
            return f"cost {used.cost:g}, over its budget of {self.cost:g}"
        return None
