"""Is this machine ready to run agents? Each tool and runtime, and the command that fixes it.

Nothing here imports a framework: extras are looked up by the import system, CLIs on
PATH, the Ollama server with one short HTTP request. tmux and git are required for any
run; every runtime is optional. When a workspace is given, the Ollama models its active
packages name are checked too, the keys of its CLI agents, and the programs its checks
run (the workspace's, the active packages' and the cards'), found as a run finds them
(:func:`agentos.gate.environment.missing_programs`): a run whose checks name a program that
is not there stops at once, so each such program is required. Each active package is then
ready or not, by what it needs (:class:`AgentReadiness`).
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
from agentos.gate.environment import check_env, check_program, gate_environment
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
    # "tool", "server", "runtime", "model", "key", "program", "repo", "workspace" or "state"
    kind: str
    ready: bool
    detail: str
    fix: str = ""
    required: bool = False

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class AgentReadiness:
    """Whether one active package can run here: ``needs`` names the checks (of
    :attr:`Diagnosis.checks`) it depends on that are not ready: its runtime, its key, its
    model, the programs its checks and the workspace's run."""

    name: str
    version: str
    needs: list[str]

    @property
    def ready(self) -> bool:
        return not self.needs

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "version": self.version,
            "ready": self.ready,
            "needs": self.needs,
        }


@dataclass(frozen=True)
class Diagnosis:
    checks: list[Check] = field(default_factory=list)
    agents: list[AgentReadiness] = field(default_factory=list)  # with a workspace

    @property
    def ready(self) -> bool:
        """Whether runs can start (the required tools are there, and the programs the
        checks run); a missing runtime or key only stops the packages that use it
        (:attr:`agents`)."""
        return all(c.ready for c in self.checks if c.required)

    def as_dict(self) -> dict[str, Any]:
        return {
            "ready": self.ready,
            "checks": [c.as_dict() for c in self.checks],
            "agents": [a.as_dict() for a in self.agents],
        }


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


def _state_check(ws: Workspace) -> Check:
    """The state can be used: its database opens (on PostgreSQL: the server answers, the
    credentials are taken, the database is there) and its schema is this AgentOS's."""
    from agentos.state.database import describe

    try:
        found = describe(ws.state)
    except AgentOSError as exc:
        return Check(
            "state", "state", False, str(exc), exc.hint or "see docs/state.md", required=True
        )
    hosts = f"; {len(found['hosts'])} host(s) heartbeat" if found["hosts"] else ""
    return Check(
        "state",
        "state",
        True,
        f"{found['where']} ({found['backend']}): schema {found['schema']}; this host "
        f"{found['host']}{hosts}",
        required=True,
    )


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


# How to install a program checks commonly run; any other: install it, or change the check.
_PROGRAM_FIXES = {
    name: f"pip install {name}"
    for name in ("ruff", "pytest", "mypy", "black", "flake8", "pylint", "tox", "nox", "uv")
}


@dataclass(frozen=True)
class _Use:
    """A check that runs a program, and whose it is."""

    check: str  # the check's name
    owner: str  # "agentos.yaml", a package's NAME@VERSION, or "card ID"
    package: str | None  # the package whose runs it is part of; None: every run


def _check_uses(ws: Workspace) -> tuple[dict[str, list[_Use]], list[Check]]:
    """Every program the workspace's checks, its active packages' and its cards' run, with
    who runs it; and a check for a card set that does not load (routing stops on it)."""
    from agentos.hub.store import Hub
    from agentos.routing.cards import load_cards

    uses: dict[str, list[_Use]] = {}

    def add(checks: list[Any], owner: str, package: str | None) -> None:
        for check in checks:
            program = check_program(check)
            if program is not None:
                uses.setdefault(program, []).append(_Use(check.name, owner, package))

    add(ws.settings.checks, ws.settings_file.name, None)
    for info, manifest in Hub(ws.hub_dir).active():
        add(manifest.checks, f"{manifest.name}@{info.version}", manifest.name)
    problems = []
    try:
        cards = load_cards(ws.cards_dir).cards
    except AgentOSError as exc:
        problems.append(
            Check("cards", "workspace", False, str(exc), "agentos cards lint", required=True)
        )
        cards = ()
    for card in cards:
        add(card.checks, f"card {card.id}", card.agent)
    return uses, problems


def _program_checks(uses: dict[str, list[_Use]], env: Mapping[str, str]) -> list[Check]:
    """One required check per program the checks run: found where a run's checks look for
    it (the PATH, then AgentOS's own interpreter's directory), or the fix."""
    out = []
    for program, users in sorted(uses.items()):
        path = shutil.which(program, path=env.get("PATH"))
        runs = "; ".join(f"check {u.check!r} of {u.owner}" for u in users)
        if path is not None:
            out.append(Check(f"program {program}", "program", True, f"{path}: {runs}", "", True))
            continue
        fix = _PROGRAM_FIXES.get(program, f"install {program} on PATH")
        owners = sorted({u.owner for u in users if u.package is not None and "@" in u.owner})
        if owners:
            fix += f"  (or remove the agent: agentos hub remove {owners[0]})"
        elif any(u.package is None for u in users):
            fix += f"  (or change the check in {users[0].owner})"
        out.append(
            Check(
                f"program {program}",
                "program",
                False,
                f"`{program}` is not on PATH, and {runs} runs it: a run with that check "
                "stops before any agent starts",
                fix,
                required=True,
            )
        )
    return out


def _agents(
    ws: Workspace, checks: list[Check], uses: dict[str, list[_Use]]
) -> list[AgentReadiness]:
    """Each active package, and the checks it needs that are not ready."""
    from agentos.hub.store import Hub

    failing = {c.name for c in checks if not c.ready}
    out = []
    for info, manifest in Hub(ws.hub_dir).active():
        wanted = [manifest.runtime, f"key {manifest.name}"]
        if manifest.model is not None:
            wanted.append(f"model {manifest.model}")
        wanted += [
            f"program {program}"
            for program, users in sorted(uses.items())
            if any(u.package in (None, manifest.name) for u in users)
        ]
        needs = [name for name in wanted if name in failing]
        out.append(AgentReadiness(manifest.name, info.version, needs))
    return out


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
    """Check tmux, git, the Ollama server, every runtime, (with ``ws``) its models, the
    keys of its CLI agents and the programs its checks run, and (with ``repo``) whether
    that repository's tests can run; with ``ws``, whether each active package can run."""
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
    uses: dict[str, list[_Use]] | None = None  # the programs the checks run, by program
    if ws is not None:
        settings = _settings_check(ws)
        checks.append(settings)
        if settings.ready:
            checks.append(_state_check(ws))
            checks.append(_sandbox_check(ws))
            checks.append(_keyring_check())
            checks += _models(ws, server)
            checks += _keys(ws)
            uses, problems = _check_uses(ws)
            checks += problems
            checks += _program_checks(uses, _check_environment(ws, environ, repo))
    if repo is not None:
        checks += repo_checks(ws, repo)
    agents = [] if ws is None or uses is None else _agents(ws, checks, uses)
    return Diagnosis(checks, agents)


def _check_environment(
    ws: Workspace, environ: Mapping[str, str], repo: Path | None
) -> dict[str, str]:
    """The environment a run's checks would have: :func:`check_env` of this PATH, and with
    ``repo`` the repository's own (its interpreter first)."""
    base = {"PATH": environ.get("PATH", os.defpath)}
    if repo is None:
        return check_env(base)
    from agentos.gate.repo import repo_profile

    return gate_environment(repo_profile(ws, repo), repo, base)
