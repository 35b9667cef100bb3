"""Is this machine ready to run agents? Each tool and runtime, and the command that fixes it.

Nothing here imports a framework: extras are looked up by the import system, CLIs on
PATH, the Ollama server with one short HTTP request. tmux and git are required for any
run; every runtime is optional. When a workspace is given, the Ollama models its active
packages name are checked too.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agentos.errors import AgentOSError
from agentos.runtimes import get_runtime
from agentos.runtimes.cli_agent import CliAgent
from agentos.runtimes.frameworks import (
    EXTRAS,
    OLLAMA_BRIDGE,
    ServerStatus,
    missing_modules,
    parse_host,
    pip_command,
    probe_server,
)
from agentos.workspace.layout import Workspace

_DISTRIBUTIONS = {"ollama": "ollama", "langchain": "langchain", "crewai": "crewai"}


@dataclass(frozen=True)
class Check:
    name: str
    kind: str  # "tool", "server", "runtime", "model", "key", "repo" or "workspace"
    ready: bool
    detail: str
    fix: str = ""
    required: bool = False

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Diagnosis:
    checks: list[Check] = field(default_factory=list)

    @property
    def ready(self) -> bool:
        """Whether runs can start at all (the required tools are there)."""
        return all(c.ready for c in self.checks if c.required)

    def as_dict(self) -> dict[str, Any]:
        return {"ready": self.ready, "checks": [c.as_dict() for c in self.checks]}


def _version(argv: list[str]) -> str:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    lines = (out.stdout or out.stderr).strip().splitlines()
    return lines[0] if lines else ""


def _settings_check(ws: Workspace) -> Check:
    """The workspace's agentos.yaml is valid (an invalid one fails every command)."""
    try:
        ws.settings  # noqa: B018 -- loading validates it
    except AgentOSError as exc:
        return Check(
            "settings", "workspace", False, str(exc), f"fix {ws.settings_file}", required=True
        )
    where = ws.settings_file if ws.settings_file.exists() else f"{ws.root} (defaults)"
    return Check("settings", "workspace", True, str(where), required=True)


def _sandbox_check(ws: Workspace) -> Check:
    """Which sandbox confines agents here (``agentos sandbox doctor`` proves it)."""
    from agentos.sandbox import INSTALL_HINT, choose

    try:
        chosen = choose(ws.settings.sandbox)
    except AgentOSError as exc:
        return Check("sandbox", "tool", False, exc.message, INSTALL_HINT, required=True)
    if not chosen.confined:
        return Check("sandbox", "tool", True, f"none: {chosen.reason}", INSTALL_HINT)
    return Check("sandbox", "tool", True, chosen.reason, required=True)


def _keyring_check() -> Check:
    """Whether each sandbox gets a session keyring of its own (keyutils' keyctl)."""
    from agentos.sandbox import KEYRING_HINT, keyctl

    program = keyctl()
    if program is None:
        return Check("keyctl", "tool", False, "not installed", KEYRING_HINT)
    return Check("keyctl", "tool", True, f"{program}: each sandbox has a keyring of its own")


def _tool(name: str, fix: str) -> Check:
    path = shutil.which(name)
    if path is None:
        return Check(name, "tool", False, f"{name} is not on PATH", fix, required=True)
    return Check(
        name, "tool", True, _version([path, "-V" if name == "tmux" else "--version"]), required=True
    )


def _server(environ: Mapping[str, str]) -> ServerStatus:
    return probe_server(parse_host(environ.get("OLLAMA_HOST")))


def _server_check(status: ServerStatus) -> Check:
    if not status.reachable:
        return Check(
            "ollama server",
            "server",
            False,
            f"no answer at {status.host}",
            "ollama serve  (https://ollama.com/download)",
        )
    models = ", ".join(status.models) or "no models pulled yet"
    return Check("ollama server", "server", True, f"{status.host}: {models}")


def _dist_version(runtime: str) -> str:
    try:
        return f"{_DISTRIBUTIONS[runtime]} {importlib.metadata.version(_DISTRIBUTIONS[runtime])}"
    except importlib.metadata.PackageNotFoundError:
        return runtime


def _framework(runtime: str, server: ServerStatus) -> Check:
    missing = missing_modules(EXTRAS[runtime][1] + OLLAMA_BRIDGE[runtime])
    if missing:
        names = ", ".join(m.replace("_", "-") for m in missing)
        return Check(runtime, "runtime", False, f"not installed: {names}", pip_command(runtime))
    detail = _dist_version(runtime)
    if runtime == "ollama":
        if not server.reachable:
            return Check(
                runtime, "runtime", False, f"{detail}; the server is not running", "ollama serve"
            )
        return Check(runtime, "runtime", True, detail)
    if not server.reachable:
        return Check(
            runtime, "runtime", True, f"{detail}; Ollama models need the server", "ollama serve"
        )
    return Check(runtime, "runtime", True, detail)


def _cli(runtime: str) -> Check:
    agent = get_runtime(runtime)
    assert isinstance(agent, CliAgent)
    path = shutil.which(agent.program)
    if path is None:
        return Check(
            runtime,
            "runtime",
            False,
            f"the `{agent.program}` CLI is not on PATH",
            agent.install_hint,
        )
    return Check(runtime, "runtime", True, _version([path, "--version"]) or path)


def _models(ws: Workspace, server: ServerStatus) -> list[Check]:
    """One check per Ollama model the workspace's active packages use (server up only)."""
    from agentos.hub.store import Hub

    if not server.reachable:
        return []
    hub = Hub(ws.hub_dir)
    users: dict[str, list[str]] = {}
    for _, manifest in hub.active():
        if manifest.model is not None and manifest.runtime in EXTRAS:
            users.setdefault(manifest.model, []).append(manifest.name)
    return [
        Check(
            f"model {model}",
            "model",
            server.has_model(model),
            ("pulled" if server.has_model(model) else "not pulled")
            + f"; used by {', '.join(names)}",
            "" if server.has_model(model) else f"ollama pull {model}",
        )
        for model, names in sorted(users.items())
    ]


def _keys(ws: Workspace) -> list[Check]:
    """One check per active package of an installed agent CLI: does it have a key its model
    API takes (asked as a run's preflight asks)?"""
    from agentos.hub.store import Hub
    from agentos.runtimes.model_api import NoKey

    checks = []
    for _, manifest in Hub(ws.hub_dir).active():
        runtime = get_runtime(manifest.runtime)
        if not isinstance(runtime, CliAgent) or shutil.which(runtime.program) is None:
            continue
        name = f"key {manifest.name}"
        try:
            checks.append(Check(name, "key", True, runtime.credential(manifest)))
        except NoKey as exc:
            checks.append(Check(name, "key", False, exc.detail, exc.fix))
    return checks


def repo_checks(ws: Workspace | None, repo: Path) -> list[Check]:
    """Whether ``repo``'s tests can run: its interpreter exists, its test program is there,
    its suite collects. One check per problem, whose detail names the fix."""
    from agentos.gate.repo import check_profile, repo_profile

    profile = repo_profile(ws or Workspace(repo), repo)
    problems = check_profile(profile)
    if not problems:
        collect = profile.collect_command()
        how = f"`{collect}` passes" if collect else "nothing cheap proves it starts"
        return [Check("repo tests", "repo", True, f"{profile.tool}: `{profile.test}`; {how}")]
    return [Check("repo tests", "repo", False, problem, required=True) for problem in problems]


def diagnose(
    ws: Workspace | None = None,
    environ: Mapping[str, str] | None = None,
    repo: Path | None = None,
) -> Diagnosis:
    """Check tmux, git, the Ollama server, every runtime, (with ``ws``) its models and the
    keys of its CLI agents, and (with ``repo``) whether that repository's tests can run."""
    environ = os.environ if environ is None else environ
    server = _server(environ)
    bash = shutil.which("bash")
    checks = [
        _tool("tmux", "apt-get install tmux  (macOS: brew install tmux)"),
        _tool("git", "apt-get install git  (macOS: brew install git)"),
        _server_check(server),
        Check(
            "shell",
            "runtime",
            bash is not None,
            bash or "bash is not on PATH",
            "" if bash else "apt-get install bash",
        ),
        Check("python", "runtime", True, f"Python {sys.version.split()[0]}"),
        *(_cli(name) for name in ("claude-code", "gemini-cli", "codex")),
        *(_framework(name, server) for name in ("ollama", "langchain", "crewai")),
    ]
    if ws is not None:
        settings = _settings_check(ws)
        checks.append(settings)
        if settings.ready:
            checks.append(_sandbox_check(ws))
            checks.append(_keyring_check())
            checks += _models(ws, server)
            checks += _keys(ws)
    if repo is not None:
        checks += repo_checks(ws, repo)
    return Diagnosis(checks)
