"""AgentOS: an operating layer for AI coding agents working on a repository."""

__version__ = "0.1.0"
