"""A workspace: where the hub, the cards, the receipts and AgentOS's state live.

Its layout (:mod:`~agentos.workspace.layout`), its settings in ``agentos.yaml``
(:mod:`~agentos.workspace.settings`) and where a run's and an agent's files are
(:mod:`~agentos.workspace.files`)."""

from agentos.workspace.layout import Workspace, find_workspace

__all__ = ["Workspace", "find_workspace"]
