"""``langchain``: run the package's LangChain Runnable or agent.

The package's ``entry`` (``module:attr``) is a Runnable, an agent, or a factory returning
one; it is invoked with the request, the context and the repository path (see
:mod:`agentos.runtimes.framework_entry` for what a factory may ask for, tools included).
The model defaults to the package's ``model`` served by Ollama through langchain-ollama;
a package that sets no ``model`` builds its own and needs no Ollama server.
"""

from __future__ import annotations

from agentos.runtimes.frameworks import FrameworkRuntime

RUNTIME = FrameworkRuntime("langchain")
