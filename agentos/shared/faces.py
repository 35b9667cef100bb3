"""A folder's public names, imported when first used (PEP 562).

A concept's ``__init__.py`` names its public face in a ``FACE`` mapping (name -> the module
that defines it) and takes its module ``__getattr__`` and ``__dir__`` from :func:`lazy`
(outside ``TYPE_CHECKING``: a type checker reads the same names as imports, and reports a
name that is not there): ``from agentos.hub import Hub`` works, and the CLI's fast paths
that import one part of a folder (the router reads :mod:`agentos.hub.versions`) do not pay
for the rest (pydantic, YAML, gitpython).
The layout test reads ``FACE`` as imports, so a face cannot hide an import circle.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping


def lazy(
    package: str, face: Mapping[str, str]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The module ``__getattr__`` of ``package`` that serves the names of ``face``, and its
    ``__dir__`` that lists them with what the module already holds."""

    def __getattr__(name: str) -> object:
        module = face.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *face})

    return __getattr__, __dir__
