"""Package versions: their order and the constraints cards and packages write (``>=1.0, <2``).

One meaning of a version for the hub, the cards and the manifests; ``packaging`` is imported
only when a version is compared.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentos.errors import ValidationFailed

if TYPE_CHECKING:
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version


def version_key(version: str) -> Version:
    """Sort key for a validated semantic version."""
    from packaging.version import Version

    return Version(version)


def parse_constraint(constraint: str) -> SpecifierSet:
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        return SpecifierSet(constraint)
    except InvalidSpecifier:
        raise ValidationFailed(
            f"{constraint!r} is not a version constraint like '>=1.0,<2'", field="version"
        ) from None
