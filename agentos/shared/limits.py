"""Size limits on what AgentOS reads from people and packages: a card, a manifest, an eval
suite, a workflow, the workspace's settings, a request; the triggers of a card and the
cards a package ships.

Each limit is far above any real file of its kind (the figures are in ``why``, and in
docs/formats.md, "Size limits") and far below what makes AgentOS slow: a 16 MB card of
two million keywords once took 13.9 s and 1.18 GB to accept, and then 1.5 s and 524 MB on
every route. A file is measured before it is read (its size from ``fstat``; then at most
the limit and one byte are read, for a file that grows meanwhile), so one over its limit
costs nothing; the refusal is one line naming the file and the limit, exit code 2. What is
not a regular file (a FIFO, a device) is refused as such.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from agentos.errors import REQUEST_MAX_BYTES, TooLarge, ValidationFailed

KB = 1024
MB = 1024 * KB


@dataclass(frozen=True)
class Limit:
    """The most of ``unit`` that ``of`` may have; ``why``: the figures it was chosen from."""

    of: str  # what is limited, as a refusal says it: "a card"
    most: int
    unit: str  # "bytes", or what is counted: "triggers", "characters", "cards"
    why: str

    @property
    def shown(self) -> str:
        if self.unit == "bytes":
            return size_text(self.most, exact=True)
        return f"{self.most:,} {self.unit}"

    def refusal(self, found: int | None = None) -> str:
        """The one-line refusal of ``found`` (None: a size not known, only that it is over)."""
        if self.unit != "bytes":
            return f"{self.of} may have at most {self.shown}; this one has {found:,}"
        if found is None:
            return f"it is over the {self.shown} limit of {self.of}"
        tenth = (MB if found >= MB else KB) // 10  # what one decimal of size_text shows
        size = size_text(found) if found - self.most >= tenth else f"{found:,} bytes"
        return f"{size} is over the {self.shown} limit of {self.of}"


def size_text(size: int, *, exact: bool = False) -> str:
    """``900 bytes``, ``16.0 MB``; ``exact``: a whole number of KB or MB as one (``256 KB``,
    a limit)."""
    for unit, scale in (("MB", MB), ("KB", KB)):
        if size >= scale:
            whole, rest = divmod(size, scale)
            return f"{whole} {unit}" if exact and not rest else f"{size / scale:.1f} {unit}"
    return f"{size:,} bytes"


CARD = Limit(
    "a card",
    256 * KB,
    "bytes",
    "the bundled cards are 306 to 424 bytes; a card at the trigger limits (1,000 triggers of "
    "200 characters) is about 210 KB",
)
CARD_TRIGGERS = Limit(
    "a card",
    1000,
    "triggers",
    "keywords, phrases, regex, require and exclude together; the bundled cards have 9 to 14. "
    "A card of 1,000 keywords compiles in 0.1 s and routes a 64 KB request in 0.05 s, as the "
    "bundled cards do; 100 such cards take 1.5 s to compile once, then 0.09 s and 120 MB "
    "per route",
)
TRIGGER_CHARS = Limit(
    "a trigger",
    200,
    "characters",
    "a keyword is a word or two; a phrase of 200 characters is some 30 words, and a regex "
    "of 200 characters a long one",
)
PACKAGE_CARDS = Limit(
    "a package",
    100,
    "cards",
    "a package's cards route to the package itself: one or two do; without this limit the "
    "card limits would not bound what one package adds to every route",
)
MANIFEST = Limit(
    "a manifest (agent.yaml)",
    64 * KB,
    "bytes",
    "the bundled manifests are 357 to 903 bytes (a CLI runtime's prompt is a file of the "
    "package, not in agent.yaml)",
)
SUITE = Limit(
    "an eval suite's suite.yaml",
    1 * MB,
    "bytes",
    "the bundled ones are 324 and 343 bytes",
)
SPLIT = Limit(
    "an eval suite's split (tasks.jsonl)",
    64 * MB,
    "bytes",
    "read a line at a time, each at most 1 MB; the bundled splits are 373 and 469 bytes, and "
    "common benchmarks (GSM8K's 1,319 test tasks, MBPP, HumanEval) are under 1 MB",
)
WORKFLOW = Limit(
    "a workflow",
    1 * MB,
    "bytes",
    "the bundled workflows are 1,343 and 1,554 bytes",
)
SETTINGS = Limit(
    "the workspace's settings (agentos.yaml)",
    1 * MB,
    "bytes",
    "a fresh workspace's is a few hundred bytes",
)
REQUEST = Limit(
    "a request",
    REQUEST_MAX_BYTES,
    "bytes",
    "a run's request travels as one command-line argument (at most 128 KB); a 64 KB "
    "request routes in 0.05 s",
)

ALL = (
    CARD,
    CARD_TRIGGERS,
    TRIGGER_CHARS,
    PACKAGE_CARDS,
    MANIFEST,
    SUITE,
    SPLIT,
    WORKFLOW,
    SETTINGS,
    REQUEST,
)


@contextmanager
def open_within(path: Path, limit: Limit, *, file: str | Path | None = None) -> Iterator[BinaryIO]:
    """``path`` opened for reading once it is known to be a regular file within ``limit``
    (its size from ``fstat``, nothing read): else :class:`TooLarge`, or
    :class:`ValidationFailed` for what is not a regular file (a FIFO would block the reader,
    a device never end), naming ``file`` (default: ``path``). :class:`OSError` as ``open``
    raises it."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO: opened at once, then refused
    with os.fdopen(fd, "rb") as fh:
        check_stat(os.fstat(fd), limit, path if file is None else file)
        yield fh


def check_stat(st: os.stat_result, limit: Limit, file: str | Path) -> None:
    """Refuse the file ``st`` describes unless it is a regular file within ``limit``."""
    if not stat.S_ISREG(st.st_mode):
        raise ValidationFailed("not a regular file", file=file)
    if st.st_size > limit.most:
        raise TooLarge(limit.refusal(st.st_size), file=file)


def read_within(path: Path, limit: Limit, *, file: str | Path | None = None) -> bytes:
    """The bytes of ``path`` (see :func:`open_within`), never more read than ``limit`` and
    one byte: a file that grew since it was measured is refused too."""
    with open_within(path, limit, file=file) as fh:
        data = fh.read(limit.most + 1)
    if len(data) > limit.most:
        raise TooLarge(limit.refusal(), file=path if file is None else file)
    return data


def refuse_count(limit: Limit, found: int) -> None:
    """``ValueError`` (for a pydantic validator) when ``found`` is over a count ``limit``."""
    if found > limit.most:
        raise ValueError(limit.refusal(found))
