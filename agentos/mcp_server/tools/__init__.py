"""The MCP server's tools, one module per family, each with a ``register`` function that
adds its tools to the server.

:mod:`~agentos.mcp_server.tools.routing` (route, interview),
:mod:`~agentos.mcp_server.tools.runs` (run_task, task_status, runs_list, run_events, run_log,
run_cancel), :mod:`~agentos.mcp_server.tools.knowledge` (kb_search, kb_add),
:mod:`~agentos.mcp_server.tools.receipts` (receipts_list, receipt_show),
:mod:`~agentos.mcp_server.tools.hub` (hub_list, hub_install),
:mod:`~agentos.mcp_server.tools.guardian` (guardian_status),
:mod:`~agentos.mcp_server.tools.evals` (eval_run, eval_report),
:mod:`~agentos.mcp_server.tools.evolve` (evolve_start, evolve_status),
:mod:`~agentos.mcp_server.tools.synthesis` (hub_search, synthesize_capability) and
:mod:`~agentos.mcp_server.tools.workflows` (create_task, get_tasks, submit_result,
save_memory). What they share is :mod:`~agentos.mcp_server.tools.common`.
"""
