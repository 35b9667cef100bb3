"""Routing cards: the YAML model, loading a card set, its revision, and lint.

One card per ``routing_cards/*.yaml`` file (docs/formats.md, "Routing cards"). The card set's
revision is the sha256 over its files (name and content), so the router can key its
compiled index, and every receipt can name the exact cards it was decided on.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, Field, ValidationError, model_validator

from agentos.errors import AgentOSError, NotFound, ValidationFailed
from agentos.routing.cardfiles import CARD_SUFFIX, card_files, revision_of
from agentos.shared import limits, patterns
from agentos.shared.checks import CheckSpec
from agentos.shared.models import Name, StrictModel, all_errors
from agentos.shared.text import stem_phrase
from agentos.shared.yaml import parse_yaml

# --- the card model -----------------------------------------------------------------------


def _as_text(value: object) -> object:
    """Numbers are fine as trigger words (``keywords: [404]``); YAML reads them as ints."""
    return str(value) if isinstance(value, int | float) and not isinstance(value, bool) else value


def _short(value: str) -> str:
    limits.refuse_count(limits.TRIGGER_CHARS, len(value))
    if "\0" in value:  # the compiled index keeps a card's trigger texts apart with NUL
        raise ValueError(f"{value!r} holds a NUL character")
    return value


def _has_words(value: str) -> str:
    if not stem_phrase(value):
        raise ValueError(f"{value!r} has no words to match")
    return value


def _compiles(value: str) -> str:
    problem = patterns.problem(value)
    if problem is not None:
        raise ValueError(f"{value!r} is not a valid regular expression: {problem}")
    return value


Term = Annotated[str, BeforeValidator(_as_text), AfterValidator(_short), AfterValidator(_has_words)]
Pattern = Annotated[str, AfterValidator(_short), AfterValidator(_compiles)]
_TRIGGER_LISTS = ("keywords", "phrases", "regex", "require", "exclude")


def _check_constraint(value: str | None) -> str | None:
    if value is None:
        return None
    # one meaning of ">=1.0, <2" for cards and the hub
    from agentos.shared.versions import parse_constraint

    try:
        parse_constraint(value)
    except ValidationFailed as exc:
        raise ValueError(exc.message) from None
    return value


class Triggers(StrictModel):
    keywords: list[Term] = Field(default_factory=list)  # +1 each one present
    phrases: list[Term] = Field(default_factory=list)  # +3 each one present, words in order
    regex: list[Pattern] = Field(default_factory=list)  # +3 each one matching the raw request
    require: list[Term] = Field(default_factory=list)  # all must be present, or no match
    exclude: list[Term] = Field(default_factory=list)  # any one present rules the card out

    @model_validator(mode="before")
    @classmethod
    def _not_too_many(cls, data: Any) -> Any:
        """Counted before any trigger is checked (stemmed, compiled): a card of a million
        keywords is refused at once."""
        if isinstance(data, dict):
            found = sum(len(v) for k in _TRIGGER_LISTS if isinstance(v := data.get(k), list))
            limits.refuse_count(limits.CARD_TRIGGERS, found)
        return data

    @model_validator(mode="after")
    def _something_scores(self) -> Triggers:
        if not (self.keywords or self.phrases or self.regex):
            raise ValueError("a card needs at least one keyword, phrase or regex to score")
        return self


class Card(StrictModel):
    """One routing card, as written in ``routing_cards/<file>.yaml``."""

    id: Name  # unique in the workspace
    agent: Name  # the hub package it routes to
    # A version constraint (">=1.0,<2"); none: the active version
    version: Annotated[str | None, AfterValidator(_check_constraint)] = None
    description: str = ""
    priority: int = Field(default=0, strict=True)  # higher wins a tie on score
    group: Name = "default"  # at most one card of a group is selected
    # At least 1: a card that matched with nothing fired would match every request.
    min_score: int = Field(default=1, ge=1, strict=True)
    triggers: Triggers
    checks: list[CheckSpec] = Field(default_factory=list)  # extra checks of runs it routes


# --- files and revision -------------------------------------------------------------------


def cards_revision(cards_dir: Path) -> str:
    """sha256 over the card files (each file's name and the sha256 of its content)."""
    return revision_of(
        (p.name, hashlib.sha256(read_card(p)).hexdigest()) for p in card_files(cards_dir)
    )


def read_card(path: Path) -> bytes:
    """The bytes of card file ``path``; :class:`ValidationFailed` when it cannot be read,
    :class:`~agentos.errors.TooLarge` (nothing read) when it is over the limit of a card."""
    try:
        return limits.read_within(path, limits.CARD)
    except OSError as exc:
        raise ValidationFailed(f"cannot read: {exc.strerror or exc}", file=path) from None


def _parse(path: Path, data: bytes) -> Any:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValidationFailed("not UTF-8 text", file=path, field="(root)") from None
    return parse_yaml(text, path)


@dataclass(frozen=True)
class Problem:
    """One lint finding: ``file: field: message``."""

    file: str
    field: str
    message: str
    severity: Literal["error", "warning"] = "error"

    def __str__(self) -> str:
        return f"{self.file}: {self.field}: {self.message}"

    def as_dict(self) -> dict[str, str]:
        return {
            "file": self.file,
            "field": self.field,
            "message": self.message,
            "severity": self.severity,
        }


def _card_problems(path: Path, data: bytes) -> tuple[Card | None, list[Problem]]:
    try:
        raw = _parse(path, data)
    except AgentOSError as exc:
        return None, [Problem(str(path), exc.field or "(root)", exc.message)]
    if not isinstance(raw, dict):
        return None, [Problem(str(path), "(root)", "expected a mapping of card fields")]
    try:
        return Card.model_validate(raw), []
    except ValidationError as exc:
        return None, [Problem(str(path), field, msg) for field, msg in all_errors(exc)]


def load_card(path: Path, data: bytes | None = None) -> Card:
    """Read one card file (or check ``data``, its bytes as :func:`read_card` read them);
    the first problem is raised as :class:`ValidationFailed`."""
    card, problems = _card_problems(path, read_card(path) if data is None else data)
    if card is None:
        raise ValidationFailed(problems[0].message, file=problems[0].file, field=problems[0].field)
    return card


@dataclass(frozen=True)
class CardSet:
    """The valid cards of a directory, in file-name order, the sha256 of each file's bytes,
    and the set's revision."""

    cards: tuple[Card, ...]
    files: tuple[Path, ...]
    revision: str
    digests: tuple[str, ...] = ()


def _duplicates(found: list[tuple[Path, Card]]) -> list[Problem]:
    first: dict[str, Path] = {}
    out = []
    for path, card in found:
        if card.id in first:
            out.append(
                Problem(
                    str(path),
                    "id",
                    f"duplicate card id {card.id!r} (also in {first[card.id].name})",
                )
            )
        else:
            first[card.id] = path
    return out


def load_cards(cards_dir: Path) -> CardSet:
    """Load and validate every card of ``cards_dir``.

    Raises :class:`ValidationFailed` naming the file and field of the first problem, so a
    broken card is never silently skipped by the router.
    """
    found: list[tuple[Path, Card]] = []
    digests = []
    for path in card_files(cards_dir):
        data = read_card(path)
        digests.append((path.name, hashlib.sha256(data).hexdigest()))
        card, problems = _card_problems(path, data)
        if card is None:
            p = problems[0]
            raise ValidationFailed(
                p.message, file=p.file, field=p.field, hint="run `agentos cards lint`"
            )
        found.append((path, card))
    dup = _duplicates(found)
    if dup:
        raise ValidationFailed(dup[0].message, file=dup[0].file, field=dup[0].field)
    return CardSet(
        tuple(c for _, c in found),
        tuple(p for p, _ in found),
        revision_of(digests),
        tuple(d for _, d in digests),
    )


# --- lint ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class LintReport:
    files: tuple[Path, ...]  # every card file checked
    cards: tuple[tuple[Path, Card], ...]  # those that fit the schema
    problems: tuple[Problem, ...]

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]

    @property
    def warnings(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "warning"]


class _Resolver:
    """What lint needs from the hub: does the agent exist, does a version fit."""

    def __init__(self, hub_dir: Path) -> None:
        from agentos.hub.store import Hub

        self.hub = Hub(hub_dir)
        self.installed = {n: p.versions for n, p in self.hub.read_lock().packages.items()}

    def problems(self, path: Path, card: Card) -> list[Problem]:
        if not self.installed.get(card.agent):
            return [
                Problem(
                    str(path),
                    "agent",
                    f"agent {card.agent!r} is not installed in the hub (see `agentos hub list`)",
                )
            ]
        try:
            self.hub.resolve(card.agent, card.version)
        except NotFound as exc:
            return [
                Problem(
                    str(path),
                    "version",
                    f"{exc.message}; the router will reject this card",
                    "warning",
                )
            ]
        return []


def _stem_duplicates(path: Path, card: Card) -> list[Problem]:
    out = []
    for kind in ("keywords", "phrases", "require", "exclude"):
        seen: dict[tuple[str, ...], str] = {}
        for i, term in enumerate(getattr(card.triggers, kind)):
            key = stem_phrase(term)
            if key in seen:
                out.append(
                    Problem(
                        str(path),
                        f"triggers.{kind}[{i}]",
                        f"{term!r} is the same as {seen[key]!r} after stemming; it counts once",
                        "warning",
                    )
                )
            else:
                seen[key] = term
    rules_out = {stem_phrase(t): t for t in card.triggers.exclude}
    for i, term in enumerate(card.triggers.require):
        if stem_phrase(term) in rules_out:
            out.append(
                Problem(
                    str(path),
                    f"triggers.require[{i}]",
                    f"{term!r} is also excluded: this card can never match",
                    "warning",
                )
            )
    for i, pattern in enumerate(card.triggers.regex):
        if patterns.compile(pattern).search(""):
            out.append(
                Problem(
                    str(path),
                    f"triggers.regex[{i}]",
                    f"{pattern!r} matches the empty string, so every request",
                    "warning",
                )
            )
    return out


def _regex_hazards(path: Path, card: Card) -> list[Problem]:
    """Regexes that would backtrack catastrophically anywhere but in RE2."""
    found = [(f"triggers.regex[{i}]", p) for i, p in enumerate(card.triggers.regex)]
    found += [
        (f"checks[{i}].file_contains.pattern", c.file_contains.pattern)
        for i, c in enumerate(card.checks)
        if c.file_contains is not None
    ]
    return [
        Problem(str(path), field, f"{pattern!r} {why}", "warning")
        for field, pattern in found
        if (why := patterns.hazard(pattern)) is not None
    ]


def lint_cards(path: Path, hub_dir: Path | None) -> LintReport:
    """Every problem of the card file or directory ``path``.

    Errors: unreadable or invalid YAML, unknown or missing fields, bad values, bad regexes,
    duplicate ids, agents not installed in the hub at ``hub_dir``. Warnings: version
    constraints no installed version meets, triggers that repeat after stemming, regexes
    that match everything or would backtrack catastrophically outside RE2.
    """
    if path.is_dir():
        files = card_files(path)
    elif path.is_file():
        files = [path]
    else:
        raise NotFound("no such card file or directory", file=path)
    problems: list[Problem] = []
    found: list[tuple[Path, Card]] = []
    for file in files:
        try:
            card, errors = _card_problems(file, read_card(file))
        except ValidationFailed as exc:
            card, errors = None, [Problem(str(file), exc.field or "(root)", exc.message)]
        problems.extend(errors)
        if card is not None:
            found.append((file, card))
    problems.extend(_duplicates(found))
    resolver = _Resolver(hub_dir) if hub_dir is not None else None
    for file, card in found:
        if resolver is not None:
            problems.extend(resolver.problems(file, card))
        problems.extend(_stem_duplicates(file, card))
        problems.extend(_regex_hazards(file, card))
    if path.is_dir():
        problems.extend(
            Problem(str(p), "(file)", f"ignored: card files end in {CARD_SUFFIX}", "warning")
            for p in sorted(path.glob("*.yml"))
        )
    problems.sort(key=lambda p: p.file)  # stable: each file's problems stay in field order
    return LintReport(tuple(files), tuple(found), tuple(problems))


__all__ = [
    "CARD_SUFFIX",
    "Card",
    "CardSet",
    "LintReport",
    "Problem",
    "Triggers",
    "card_files",
    "cards_revision",
    "lint_cards",
    "load_card",
    "load_cards",
    "read_card",
    "revision_of",
]
