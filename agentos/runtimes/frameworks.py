"""What the framework runtimes (ollama, langchain, crewai) need before an agent starts.

Two kinds of requirement, both checked without importing the frameworks themselves:
the Python modules of an extra (found by the import system, never executed here) and, for
packages that use an Ollama model, a reachable Ollama server that has the model pulled.
Every failure is a :class:`MissingTool` whose one line names the command that fixes it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from agentos import install_hint
from agentos.errors import MissingTool, ValidationFailed
from agentos.hub.manifest import MANIFEST, Manifest
from agentos.runtimes.task import AgentTask

DEFAULT_HOST = "http://127.0.0.1:11434"
DEFAULT_PORT = 11434
PROBE_TIMEOUT = 2.0  # seconds for the GET /api/tags that tells whether the server is up

# runtime -> (the extra that installs it, the modules the runtime itself imports)
EXTRAS: dict[str, tuple[str, tuple[str, ...]]] = {
    "ollama": ("ollama", ("ollama",)),
    "langchain": ("langchain", ("langchain_core", "langchain")),
    "crewai": ("crewai", ("crewai",)),
}
# Modules needed only when the package uses its Ollama model through the framework.
OLLAMA_BRIDGE: dict[str, tuple[str, ...]] = {
    "ollama": (),
    "langchain": ("langchain_ollama",),
    "crewai": (),  # crewai talks to Ollama's OpenAI-compatible endpoint itself
}


def pip_command(runtime: str) -> str:
    return install_hint(EXTRAS[runtime][0])


def parse_host(value: str | None) -> str:
    """Normalise an OLLAMA_HOST value the way the ``ollama`` client does.

    ``None``/``""`` -> the default; a bare host or ``host:port`` gets ``http://`` and port
    11434; a URL keeps its scheme (and gets 80/443 when it names no port).
    """
    value = (value or "").strip()
    if not value:
        return DEFAULT_HOST
    scheme, sep, rest = value.partition("://")
    if not sep:
        scheme, rest = "http", value
    parts = urlsplit(f"{scheme}://{rest}")
    try:
        explicit = parts.port
    except ValueError as exc:
        raise MissingTool(
            f"OLLAMA_HOST={value!r} is not a valid address", field="OLLAMA_HOST"
        ) from exc
    port = explicit or (DEFAULT_PORT if not sep else 443 if scheme == "https" else 80)
    host = parts.hostname or "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    path = parts.path.rstrip("/")
    return f"{scheme}://{host}:{port}{path}"


def agent_host(manifest: Manifest, environ: Mapping[str, str] | None = None) -> str:
    """The Ollama server the agent will talk to.

    The agent's environment is scrubbed: it sees OLLAMA_HOST only when the package lists it
    in ``env``; otherwise the client falls back to the default address.
    """
    environ = os.environ if environ is None else environ
    if "OLLAMA_HOST" in manifest.env:
        return parse_host(environ.get("OLLAMA_HOST"))
    return DEFAULT_HOST


def importable(module: str) -> bool:
    """Whether ``import module`` would find it (without running it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def missing_modules(modules: Sequence[str]) -> list[str]:
    return [m for m in modules if not importable(m)]


def require_modules(runtime: str, *, bridge: bool) -> None:
    """Raise unless the runtime's extra (and, for Ollama models, its bridge) is installed."""
    modules = EXTRAS[runtime][1] + (OLLAMA_BRIDGE[runtime] if bridge else ())
    missing = missing_modules(modules)
    if missing:
        names = ", ".join(m.replace("_", "-") for m in missing)
        raise MissingTool(
            f"the {runtime} runtime needs {names}, which is not installed: "
            f"run `{pip_command(runtime)}`",
            field="runtime",
        )


@dataclass(frozen=True)
class ServerStatus:
    host: str
    reachable: bool
    models: tuple[str, ...] = ()
    error: str = ""

    def has_model(self, model: str) -> bool:
        wanted = {model, model if ":" in model else f"{model}:latest"}
        return any(name in wanted for name in self.models)


def probe_server(host: str, timeout: float = PROBE_TIMEOUT) -> ServerStatus:
    """GET ``host``/api/tags: is an Ollama server there, and which models has it pulled?"""
    import urllib.error
    import urllib.request

    # No proxy: the agent's scrubbed environment has none either.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"{host}/api/tags", timeout=timeout) as response:
            data = json.loads(response.read().decode("utf-8") or "{}")
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return ServerStatus(host, False, error=str(reason))
    models = data.get("models") if isinstance(data, dict) else None
    names = tuple(
        str(m.get("name") or m.get("model") or "") for m in models or [] if isinstance(m, dict)
    )
    return ServerStatus(host, True, names)


def require_server(runtime: str, manifest: Manifest) -> None:
    """Raise unless the agent's Ollama server answers and has the package's model."""
    assert manifest.model is not None
    host = agent_host(manifest)
    status = probe_server(host)
    if not status.reachable:
        hint = ""
        if "OLLAMA_HOST" in os.environ and "OLLAMA_HOST" not in manifest.env:
            hint = (
                " (OLLAMA_HOST is set here, but the package does not list it in `env`, "
                "so its agent uses the default address)"
            )
        raise MissingTool(
            f"the {runtime} runtime needs an Ollama server, and none answers at "
            f"{host}{hint}: start one with `ollama serve`",
            field="runtime",
        )
    if not status.has_model(manifest.model):
        raise MissingTool(
            f"the Ollama server at {host} does not have the model "
            f"{manifest.model!r}: run `ollama pull {manifest.model}`",
            field="model",
        )


def require_model_field(runtime: str, manifest: Manifest, package_dir: Path) -> str:
    if not manifest.model:
        raise ValidationFailed(
            f"the {runtime} runtime needs a model (e.g. qwen2.5-coder:7b)",
            file=package_dir / MANIFEST,
            field="model",
        )
    return manifest.model


class FrameworkRuntime:
    """``langchain`` and ``crewai``: the pane runs :mod:`agentos.runtimes.framework_entry`.

    A package that sets ``model`` uses it through Ollama, so it needs the server; one that
    sets none builds its own model and needs only the framework.
    """

    def __init__(self, name: str) -> None:
        self.name = name

    def preflight(self, manifest: Manifest, package_dir: Path) -> None:
        uses_ollama = manifest.model is not None
        require_modules(self.name, bridge=uses_ollama)
        if uses_ollama:
            require_server(self.name, manifest)

    def command(self, task: AgentTask) -> list[str]:
        argv = [
            sys.executable,
            "-m",
            "agentos.runtimes.framework_entry",
            self.name,
            str(task.package_dir),
            task.manifest.entry,
            str(task.files.io),  # the run files it may write
        ]
        return argv + ([task.manifest.model] if task.manifest.model else [])

    def path_dirs(self) -> list[str]:
        return [str(Path(sys.executable).parent)]

    def environment(self, task: AgentTask) -> dict[str, str]:
        return {}

    def meter(self, task: AgentTask) -> None:
        return None  # it writes $AGENTOS_USAGE_FILE, if anything
