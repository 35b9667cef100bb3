"""AgentOS: an operating layer for AI coding agents working on a repository."""

__version__ = "0.1.0"

# The distribution's name on PyPI (`agentos` there is an unrelated project); the import
# package and the command are `agentos`.
DISTRIBUTION = "agentos-kit"


def install_hint(extra: str) -> str:
    """The command that installs one of AgentOS's extras."""
    return f"pip install '{DISTRIBUTION}[{extra}]'"
