"""Which runtime starts which package: the registry of runtimes by name, loaded lazily (the
heavy frameworks are imported only by the agent process), and a package checked ready to
start here."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from agentos.runtimes.task import Runtime

if TYPE_CHECKING:  # (pydantic's models: `runs list` imports runtimes.usage, not them)
    from agentos.hub.manifest import Manifest
    from agentos.hub.store import Hub, InstalledVersion

_RUNTIMES = {
    "shell": "agentos.runtimes.shell",
    "python": "agentos.runtimes.python",
    "claude-code": "agentos.runtimes.claude_code",
    "gemini-cli": "agentos.runtimes.gemini_cli",
    "codex": "agentos.runtimes.codex",
    "ollama": "agentos.runtimes.ollama",
    "langchain": "agentos.runtimes.langchain",
    "crewai": "agentos.runtimes.crewai",
}


def get_runtime(name: str) -> Runtime:
    module = _RUNTIMES.get(name)
    if module is None:
        from agentos.errors import BadInput

        raise BadInput(f"unknown runtime {name!r}", field="runtime")
    runtime: Runtime = importlib.import_module(module).RUNTIME
    return runtime


def ready_package(
    hub: Hub, ref: str, field: str, where: str = ""
) -> tuple[InstalledVersion, Manifest]:
    """The installed package ``ref``, intact (its files match hub.lock) and able to start
    here (its runtime's preflight); else one line naming ``field`` (and ``where`` the
    reference is set, as a hint, when it is not installed)."""
    from agentos.errors import BadInput

    try:
        info, manifest = hub.get(ref)
    except BadInput as exc:
        hint = "; ".join(h for h in (exc.hint, where) if h) or None
        raise exc.with_context(field=field, hint=hint) from None
    hub.check_intact(info.name, info.version)
    get_runtime(manifest.runtime).preflight(manifest, info.path)
    return info, manifest


def egress_hosts(manifest: Manifest) -> list[str] | None:
    """The hosts an agent of ``manifest`` may reach when its package names them
    (``sandbox.network`` a list), its model API's among them for a CLI runtime (the
    address its base-URL variable gives, else the API's own); None when it names none."""
    network = manifest.sandbox.network if manifest.sandbox is not None else None
    if not isinstance(network, list):
        return None
    from agentos.runtimes.cli_agent import CliAgent

    runtime = get_runtime(manifest.runtime)
    extra = [runtime.api_host(manifest)] if isinstance(runtime, CliAgent) else []
    return list(dict.fromkeys([*network, *(h for h in extra if h)]))
