"""The MCP server: AgentOS's library as MCP tools, for the clients people use (Claude Code,
Gemini CLI, Codex, MCP Inspector) and for the agents of a run.

Its parts: :mod:`~agentos.mcp_server.server` (the tools, over stdio or HTTP),
:mod:`~agentos.mcp_server.agents` (the tools one agent of a run gets, on a Unix socket),
:mod:`~agentos.mcp_server.models` (the tools' result documents),
:mod:`~agentos.mcp_server.transport` (HTTP with its token, :mod:`~agentos.mcp_server.auth`),
:mod:`~agentos.mcp_server.clients` (registering the server with an MCP client) and
:mod:`~agentos.mcp_server.paths` (the paths a tool may be given).
"""
