"""Where a run's files are: the one place that lays them out.

``.agentos/runs/<run>/`` holds what lives only while the run does (each agent's wrapper,
env file, exit status, heartbeat; removed at teardown: env files hold secrets);
``.agentos/logs/<run>/`` what is kept after it (the orchestrator's log and pid, the run's
events, each agent's pane output).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from agentos.workspace.layout import Workspace

SYSTEM_PATH = "/usr/bin:/bin"  # where the wrapper's own programs come from


def runs_root(ws: Workspace) -> Path:
    """``.agentos/runs``: one folder per live run."""
    return ws.state_dir / "runs"


@dataclass(frozen=True)
class RunFiles:
    run_dir: Path  # .agentos/runs/<run>
    logs: Path  # .agentos/logs/<run>

    @classmethod
    def of(cls, ws: Workspace, run_id: str) -> RunFiles:
        return cls(runs_root(ws) / run_id, ws.logs_dir / run_id)

    @property
    def start_file(self) -> Path:
        """How a background run was asked for (request, repository, options), written
        before its process starts, read by that process and by :func:`agentos.run.control.status`
        while the run is not in state.db yet. 0600: it holds the request."""
        return self.logs / "start.json"

    @property
    def orchestrator_log(self) -> Path:
        """What a background run's process printed (``run --detach``, MCP ``run_task``)."""
        return self.logs / "orchestrator.log"

    @property
    def pid_file(self) -> Path:
        """The background process's pid and start time, written by whoever started it."""
        return self.logs / "orchestrator.pid"

    @property
    def cancelled(self) -> Path:
        """Written when a background run is cancelled before it recorded itself."""
        return self.logs / "cancelled"

    @property
    def events(self) -> Path:
        """The run's events, one JSON object per line (:mod:`agentos.run.events`)."""
        return self.logs / "events.jsonl"

    def agent(self, name: str) -> AgentFiles:
        return AgentFiles(self.run_dir / name, self.logs / f"{name}.log")


@dataclass(frozen=True)
class AgentFiles:
    """The files of one agent of a run; :meth:`RunFiles.agent` lays them out."""

    run_dir: Path  # .agentos/runs/<run>/<agent>: wrapper, env file, exit status
    log: Path  # .agentos/logs/<run>/<agent>.log: the pane's output, kept after the run

    @property
    def wrapper(self) -> Path:
        return self.run_dir / "wrapper.sh"

    @property
    def env_file(self) -> Path:
        return self.run_dir / "agent.env"

    @property
    def io(self) -> Path:
        """The one directory of its run files the agent may write (in its sandbox): its
        exit status, its heartbeat, its framework's state. The wrapper, the env file and the
        launcher beside it are AgentOS's, read-only to the agent."""
        return self.run_dir / "io"

    @property
    def cli_home(self) -> Path:
        """Where a CLI agent's program keeps its configuration and state for the run
        (Claude Code's CLAUDE_CONFIG_DIR, Gemini CLI's GEMINI_CLI_HOME, Codex's CODEX_HOME):
        written by AgentOS before each attempt, never the user's own."""
        return self.io / "cli-home"

    @property
    def mcp_socket(self) -> Path:
        """Where AgentOS serves the MCP tools its package asks for
        (:mod:`agentos.runtimes.agent_tools`), in the run files the agent may read, not replace."""
        return self.run_dir / "mcp.sock"

    @property
    def egress_socket(self) -> Path:
        """Where AgentOS's proxy for an agent whose package names its hosts listens
        (agentos.sandbox.egress), in the run files the agent may read, not replace."""
        return self.run_dir / "egress.sock"

    @property
    def exit_file(self) -> Path:
        return self.io / "exit"

    @property
    def heartbeat(self) -> Path:
        return self.io / "heartbeat"

    @property
    def outbox(self) -> Path:
        """What the agent asks of AgentOS besides its work (agentos.run.outbox)."""
        return self.io / "outbox.jsonl"

    @property
    def kept_outbox(self) -> Path:
        """Its outbox, kept after the run (the io folder goes with the run's files)."""
        return kept_outbox(self.log)

    @property
    def usage(self) -> Path:
        """What the agent says it used (tokens, cost): :mod:`agentos.runtimes.usage`."""
        return self.io / "usage.json"

    @property
    def stopped(self) -> Path:
        """Written (with the reason) by the guardian when it kills the agent for good."""
        return self.run_dir / "stopped"

    @property
    def check_pid(self) -> Path:
        """The process group of the gate check running now, with its start time, so that gc
        can end it if the orchestrator dies during the gate."""
        return self.run_dir / "check.pid"

    @property
    def launcher(self) -> Path:
        """The script the pane runs: the agent's wrapper, confined (see agentos.sandbox)."""
        return self.run_dir / "launch.sh"

    @property
    def pane_command(self) -> list[str]:
        """What the pane runs; the guardian respawns it to restart the agent."""
        return ["/bin/sh", str(self.launcher)]

    @property
    def wrapper_command(self) -> list[str]:
        """The wrapper with an empty environment (it loads the agent's own)."""
        # The system's own (a PATH of the caller's may name a copy the sandbox hides).
        bash = shutil.which("bash", path=SYSTEM_PATH) or "/bin/bash"
        return [
            shutil.which("env", path=SYSTEM_PATH) or "/usr/bin/env",
            "-i",
            bash,
            "--noprofile",
            "--norc",
            str(self.wrapper),
        ]

    def exit_code(self) -> int | None:
        """The agent's exit status, once the wrapper has written it."""
        try:
            return int(self.exit_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None


def kept_outbox(log: Path) -> Path:
    """Where an agent's outbox is kept after its run, beside its log (``<agent>.log``):
    ``<agent>.outbox.jsonl``; a run's report names the log, so this is found from it."""
    return log.with_suffix(".outbox.jsonl")
