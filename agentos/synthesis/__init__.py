"""Capability synthesis: a tool built when no installed package can do a request, verified
in the sandbox before it joins the hub.

Its parts: :mod:`~agentos.synthesis.spec` (what the tool must do, and its tests),
:mod:`~agentos.synthesis.engine` (building and verifying it) and
:mod:`~agentos.synthesis.tools` (running a synthesized tool); ``_run_tool.py``,
``_verify_runner.py`` and ``_verify_shim.py`` are copied into the package or the sandbox,
never imported.
"""
