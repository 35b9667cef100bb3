"""Which of AgentOS's MCP tools an agent package may ask for (``mcp:`` in its agent.yaml).

Apart from the manifest's model (:mod:`agentos.hub.manifest`, which validates ``mcp:``
against it) so that an agent's MCP server checks its tools without building that model.
"""

from __future__ import annotations

# AgentOS's MCP tools an agent may ask for (`mcp:` in agent.yaml), offered to it during its
# run only: those that read, and those that post to its outbox (as `agentos tasks create`
# does inside a run). Never one that starts a run, installs a package or changes the
# workspace behind the run's back.
AGENT_TOOLS = (
    "kb_search",
    "hub_search",
    "hub_list",
    "receipts_list",
    "receipt_show",
    "task_status",
    "runs_list",
    "get_tasks",
    "create_task",
    "submit_result",
    "save_memory",
)
