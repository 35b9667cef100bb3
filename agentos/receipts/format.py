"""How a receipt's fields are written as text, and read back: the one owner of both.

Fields are ``key: value`` lines a person reads with ``cat``. Mappings and lists are indented
by two spaces per level (``- `` starts a list item; a mapping in a list starts on the item's
line), an empty one is ``{}`` or ``[]``; a multi-line string is a ``|`` block of indented
lines. A scalar is written plain when reading it back gives the same value: ``null``,
``true``, ``false`` and numbers (``repr``) are themselves; a string is plain unless it would
read as something else (``"42"``, ``"null"``, ``"[]"``, a list item like ``"a: b"``), is
empty, has surrounding spaces or control characters, or starts with ``"`` or ``|``; then it
is one JSON string, with every control character escaped so ``cat`` shows it.

:func:`parse_fields` inverts :func:`render_fields`: for the values receipts are written
with (mappings with string keys, lists, strings, ints, floats, bools, None) the round trip is
exact. Tuples and sets come back as lists, other keys and values as the strings they were
written as. It never raises: what it cannot read is named in the result's ``problem``.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

HEADER = ("receipt", "kind", "time", "run")
RESERVED = frozenset(
    {*HEADER, "request", "request_sha256", "signed_from", "previous", "sha256", "mac"}
)
KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
CONTROL_RE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")
_JSON_ESCAPE = re.compile(r"[\x7f-\x9f\u2028\u2029]")  # json.dumps leaves these raw
# How a mapping's line starts: a plain or a JSON-quoted key, then ':' and a space or nothing.
_KEY_START = re.compile(r'(?:[A-Za-z_][A-Za-z0-9_.-]*|"(?:[^"\\]|\\.)*"):(?: |$)')
_INT_RE = re.compile(r"-?(?:0|[1-9][0-9]*)")
_SCALARS = frozenset({type(None), bool, int, float})  # written by _scalar alone


# --- writing ------------------------------------------------------------------------------


def _quoted(text: str) -> str:
    return _JSON_ESCAPE.sub(
        lambda m: f"\\u{ord(m.group()):04x}", json.dumps(text, ensure_ascii=False)
    )


def _plain_reads_back(text: str) -> bool:
    """Whether ``text`` written plain would be read back as this very string."""
    if (
        not text
        or text != text.strip()
        or text[0] in '"|'
        or CONTROL_RE.search(text)
        or "\n" in text
    ):
        return False
    value = read_scalar(text)
    return isinstance(value, str) and value == text


def _scalar(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    text = str(value)
    return _text(text) if type(text) is str else _written(text)


def _written(text: str) -> str:
    return text if _plain_reads_back(text) else _quoted(text)


_written_short = functools.lru_cache(maxsize=2048)(_written)


def _text(text: str) -> str:
    """A string scalar as written. Receipts repeat their short strings (card, agent and
    check names, reasons), so those are kept; a long one (a request) is not."""
    return _written_short(text) if len(text) <= _KEPT else _written(text)


_KEPT = 200  # the longest string whose written form is kept


def _is_block(value: object) -> bool:
    """A multi-line string shown as an indented block (command output, a long request)."""
    return (
        isinstance(value, str)
        and "\n" in value.strip("\n")
        and not CONTROL_RE.search(value)
        and all(line == line.rstrip() for line in value.split("\n"))
    )


def _key(key: object) -> str:
    text = str(key)
    return text if KEY_RE.match(text) else _quoted(text)


_plain_key = functools.lru_cache(maxsize=1024)(_key)  # a str key (a short name, repeated)


def _items(
    value: list[object] | tuple[object, ...] | set[object] | frozenset[object],
) -> list[object]:
    return sorted(value, key=str) if isinstance(value, set | frozenset) else list(value)


def render(key: str, value: object, pad: str, out: list[str]) -> None:
    """Append the lines of ``key: value`` at indentation ``pad`` to ``out``."""
    if type(value) is str and "\n" not in value:  # most values: a string of one line
        out.append(f"{pad}{key}: {_text(value)}")
    elif type(value) in _SCALARS:
        out.append(f"{pad}{key}: {_scalar(value)}")
    elif isinstance(value, Mapping):
        if not value:
            out.append(f"{pad}{key}: {{}}")
            return
        out.append(f"{pad}{key}:")
        _render_mapping(value, pad + "  ", out)
    elif isinstance(value, list | tuple | set | frozenset):
        items = _items(value)
        if not items:
            out.append(f"{pad}{key}: []")
            return
        out.append(f"{pad}{key}:")
        for item in items:
            _render_item(item, pad + "  ", out)
    elif _is_block(value):
        out.append(f"{pad}{key}: |")
        out.extend(f"{pad}  {line}" if line else "" for line in str(value).split("\n"))
    else:
        out.append(f"{pad}{key}: {_scalar(value)}")


def _render_mapping(value: Mapping[object, object], pad: str, out: list[str]) -> None:
    """A mapping's items at ``pad``; a short string key or value is taken as kept."""
    for k, v in value.items():
        key = _plain_key(k) if type(k) is str and len(k) <= _KEPT else _key(k)
        if type(v) is str and "\n" not in v:
            out.append(f"{pad}{key}: {_text(v)}")
        else:
            render(key, v, pad, out)


def _render_item(item: object, pad: str, out: list[str]) -> None:
    if type(item) is str and "\n" not in item:  # most items: a string of one line
        out.append(f"{pad}- {_item_text(item)}")
    elif isinstance(item, Mapping) and item:
        first = len(out)
        _render_mapping(item, pad + "  ", out)
        out[first] = f"{pad}- {out[first][len(pad) + 2 :]}"
    elif isinstance(item, list | tuple | set | frozenset) and item:
        out.append(f"{pad}-")
        for sub in _items(item):
            _render_item(sub, pad + "  ", out)
    elif _is_block(item):
        out.append(f"{pad}- |")
        out.extend(f"{pad}    {line}" if line else "" for line in str(item).split("\n"))
    else:
        out.append(f"{pad}- {_item_scalar(item)}")


def _item_scalar(item: object) -> str:
    """A list item's scalar as written."""
    rendered: list[str] = []
    render("", item, "", rendered)
    text = rendered[0][2:]
    if _KEY_START.match(text):  # a string that would read as a mapping's first key
        text = _quoted(str(item))
    return text


@functools.lru_cache(maxsize=2048)
def _item_short(item: str) -> str:
    return _item_scalar(item)


def _item_text(item: str) -> str:
    """A list item's string as written (kept when short, as :func:`_text` does)."""
    return _item_short(item) if len(item) <= _KEPT else _item_scalar(item)


def render_fields(fields: Mapping[str, object]) -> list[str]:
    """``fields`` as readable ``key: value`` lines (lists and mappings indented)."""
    out: list[str] = []
    for key, value in fields.items():
        if key in RESERVED or not KEY_RE.match(key):
            raise ValueError(f"receipt field {key!r} is reserved or not a plain name")
        render(key, value, "", out)
    return out


# --- reading ------------------------------------------------------------------------------


def read_scalar(text: str) -> object:
    """The value a scalar's text stands for (the inverse of how scalars are written)."""
    if text.startswith('"'):
        try:
            value = json.loads(text)
        except ValueError:
            return text
        return value if isinstance(value, str) else text
    if text in _CONSTANTS:
        return _CONSTANTS[text]
    if text == "{}":
        return {}
    if text == "[]":
        return []
    if _INT_RE.fullmatch(text):
        try:
            return int(text)
        except ValueError:  # more digits than Python converts
            return text
    if text[:1] in "-.0123456789in":
        try:
            number = float(text)
        except ValueError:
            return text
        if repr(number) == text:
            return number
    return text


_CONSTANTS: dict[str, object] = {"null": None, "true": True, "false": False}


class _Unreadable(Exception):
    """A line that does not fit the format; parsing stops there."""


@dataclass
class _Cursor:
    lines: list[str]
    first: int  # the number of the first line in the whole text, for messages
    at: int = 0

    def peek(self) -> str | None:
        return self.lines[self.at] if self.at < len(self.lines) else None

    def fail(self, why: str) -> _Unreadable:
        return _Unreadable(f"line {self.first + self.at}: {why}")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _split_key(text: str, cur: _Cursor) -> tuple[str, str | None]:
    """``key: rest`` -> (key, rest); ``key:`` -> (key, None)."""
    if text.startswith('"'):
        try:
            key, end = json.JSONDecoder().raw_decode(text)
        except ValueError:
            raise cur.fail("a quoted key that does not end") from None
        if not isinstance(key, str):
            raise cur.fail("a key that is not a string")
    else:
        end = text.find(":")
        key = text[:end]
        if end < 0 or not KEY_RE.match(key):
            raise cur.fail(f"expected 'key: value', found {text[:40]!r}")
    rest = text[end:]
    if rest == ":":
        return key, None
    if not rest.startswith(": "):
        raise cur.fail(f"expected ': ' after the key {key!r}")
    return key, rest[2:]


def _value(cur: _Cursor, rest: str | None, indent: int) -> object:
    """The value whose ``key:`` line (at ``indent``) ended with ``rest``."""
    if rest == "|":
        return _block(cur, indent + 2)
    if rest is not None:
        return read_scalar(rest)
    nxt = cur.peek()
    if nxt is None or not nxt or _indent(nxt) != indent + 2:
        raise cur.fail("expected the indented lines of a mapping or a list")
    body = nxt[indent + 2 :]
    if body == "-" or body.startswith("- "):
        items: list[object] = []
        _list(cur, indent + 2, items)
        return items
    mapping: dict[str, object] = {}
    _mapping(cur, indent + 2, mapping)
    return mapping


def _mapping(cur: _Cursor, indent: int, out: dict[str, object]) -> None:
    while (line := cur.peek()) is not None:
        if not line:
            raise cur.fail("an empty line outside a | block")
        if _indent(line) < indent:
            return
        if _indent(line) > indent:
            raise cur.fail("more indented than the keys around it")
        key, rest = _split_key(line[indent:], cur)
        cur.at += 1
        out[key] = _value(cur, rest, indent)


def _list(cur: _Cursor, indent: int, out: list[object]) -> None:
    while (line := cur.peek()) is not None:
        if not line or _indent(line) < indent:
            return
        body = line[indent:]
        if _indent(line) > indent or not (body == "-" or body.startswith("- ")):
            raise cur.fail("expected a list item ('- ')")
        rest = body[2:]
        if body == "-":  # a list in a list
            cur.at += 1
            nxt = cur.peek()
            if nxt is None or _indent(nxt) != indent + 2:
                raise cur.fail("expected the items of a list in a list")
            sub: list[object] = []
            _list(cur, indent + 2, sub)
            out.append(sub)
        elif rest == "|":
            cur.at += 1
            out.append(_block(cur, indent + 4))
        elif _KEY_START.match(rest):  # a mapping, its first key on the item's line
            cur.lines[cur.at] = " " * (indent + 2) + rest
            mapping: dict[str, object] = {}
            out.append(mapping)
            _mapping(cur, indent + 2, mapping)
        else:
            cur.at += 1
            out.append(read_scalar(rest))


def _block(cur: _Cursor, indent: int) -> str:
    """A ``|`` block: lines indented by ``indent``, and empty lines (only blocks have them)."""
    taken = []
    pad = " " * indent
    while (line := cur.peek()) is not None and (not line or line.startswith(pad)):
        taken.append(line[indent:])
        cur.at += 1
    return "\n".join(taken)


def parse_fields(lines: list[str], first: int = 1) -> tuple[dict[str, object], str | None]:
    """The fields written as ``lines`` (without their newlines; the first is line ``first``
    of its text), and what could not be read: None, or ``line N: why`` (the fields read
    before that line are kept)."""
    out: dict[str, object] = {}
    cur = _Cursor(list(lines), first)
    try:
        _mapping(cur, 0, out)
    except _Unreadable as exc:
        return out, str(exc)
    except RecursionError:
        return out, "nested too deeply to read"
    return out, None
