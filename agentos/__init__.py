"""AgentOS: an operating layer for AI coding agents working on a repository.

The stable imports, kept across versions, are :mod:`agentos.sdk` (run workflows from code)
and :mod:`agentos.errors` (what AgentOS raises); each lists its public names in ``__all__``.
Every other module is internal and may move between versions (docs/architecture.md maps
them; CHANGES.md says what moved). The command line and the MCP tools are the other stable
faces.
"""

__version__ = "0.1.0"

# The distribution's name on PyPI (`agentos` there is an unrelated project); the import
# package and the command are `agentos`.
DISTRIBUTION = "agentos-kit"


def install_hint(extra: str) -> str:
    """The command that installs one of AgentOS's extras."""
    return f"pip install '{DISTRIBUTION}[{extra}]'"
