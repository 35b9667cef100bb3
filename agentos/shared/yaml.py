"""Parsing the YAML people write (cards, ``agent.yaml``, ``agentos.yaml``): safe, with
duplicate keys refused, and every problem one line naming the file and where.

YAML itself lets a mapping repeat a key and keeps the last value, so a second ``name:`` or
``triggers:`` further down a file would silently replace the first. Here it is an error
naming the key's field path and both lines.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from agentos.errors import ValidationFailed

_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present: ~10x faster
_MERGE = "tag:yaml.org,2002:merge"


def parse_yaml(data: str | bytes, file: str | Path) -> Any:
    """The document in ``data``; :class:`ValidationFailed` for invalid YAML or a key given
    twice in one mapping."""
    loader = _Loader(data)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _refuse_duplicate_keys(node, file)
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "(root)"
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise ValidationFailed(f"invalid YAML: {problem}", file=file, field=where) from None
    finally:
        loader.dispose()


def _refuse_duplicate_keys(root: yaml.Node, file: str | Path) -> None:
    seen: set[int] = set()  # nodes already walked: aliases share them, and may loop
    stack: list[tuple[yaml.Node, str]] = [(root, "")]
    while stack:
        node, path = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            lines: dict[tuple[str, str], int] = {}
            for key, value in node.value:
                if not isinstance(key, yaml.ScalarNode) or key.tag == _MERGE:
                    stack.append((value, path))
                    continue
                line = key.start_mark.line + 1
                field = f"{path}.{key.value}" if path else str(key.value)
                first = lines.get((key.tag, key.value))
                if first is not None:
                    where = (
                        f"lines {first} and {line}" if first != line else f"twice on line {line}"
                    )
                    raise ValidationFailed(
                        f"duplicate key ({where}); give it once",
                        file=file,
                        field=field,
                    )
                lines[(key.tag, key.value)] = line
                stack.append((value, field))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((item, f"{path}[{i}]") for i, item in enumerate(node.value))
