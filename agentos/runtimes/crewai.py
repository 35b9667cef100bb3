"""``crewai``: kick off the package's CrewAI crew.

The package's ``entry`` (``module:attr``) is a Crew or a factory that builds one (from
``inputs``, an ``llm``, ``tools``: see :mod:`agentos.runtimes.framework_entry`); it is run
with ``kickoff(inputs={request, context, feedback, repo})``. The LLM defaults to the
package's ``model`` served by Ollama; a package that sets no ``model`` brings its own.
CrewAI's telemetry and tracing are switched off in the agent's process.
"""

from __future__ import annotations

from agentos.runtimes.frameworks import FrameworkRuntime

RUNTIME = FrameworkRuntime("crewai")
