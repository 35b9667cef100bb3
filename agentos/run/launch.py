"""Starting one agent in its tmux pane: the scrubbed environment, the wrapper, the exit file.

The pane runs ``env -i bash --noprofile --norc wrapper.sh``. The wrapper loads the agent's
environment from a 0600 file (so secrets never appear on a command line), runs the
runtime's command in the worktree with its output also appended to the agent's log, and
writes the exit status to a file with an atomic rename: that file, not the screen, is how
AgentOS knows the agent has ended.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from agentos.runtimes import AgentTask, get_runtime
from agentos.sandbox.egress import PROXY_PORT
from agentos.shared.fs import write_new
from agentos.workspace.files import SYSTEM_PATH, AgentFiles

_RELAY = Path(__file__).resolve().parent.parent / "sandbox" / "net_relay.py"
# Variables every agent gets besides those its package lists and the AGENTOS_* ones.
BASE_PATH = ("/usr/local/bin", "/usr/bin", "/bin")


def pycache_dir(task: AgentTask) -> Path:
    """Where an agent's Python keeps bytecode: one cache per package version, kept between
    runs, writable by that package's agents only."""
    return task.workspace / ".agentos" / "cache" / "pycache" / task.manifest.ref


def agent_env(
    task: AgentTask,
    files: AgentFiles,
    path_dirs: list[str],
    parent: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The whole environment of an agent: nothing of the parent's leaks unless listed."""
    parent = os.environ if parent is None else parent
    dirs = [*path_dirs, str(Path(sys.executable).parent), *BASE_PATH]
    env = {
        "PATH": ":".join(dict.fromkeys(dirs)),
        "HOME": parent.get("HOME", "/tmp"),
        "LANG": "C.UTF-8",
        "TERM": "tmux-256color",
        "PYTHONUNBUFFERED": "1",
        # Bytecode is looked up only in the package's own cache, never in __pycache__
        # beside the sources: a .pyc planted in a package or the worktree is never what
        # runs (and what the package compiled once is not compiled again every run).
        "PYTHONPYCACHEPREFIX": str(pycache_dir(task)),
    }
    env.update(task.manifest.passed(parent))
    env.update(
        {
            "AGENTOS_RUN_ID": task.run_id,
            "AGENTOS_AGENT": task.agent,
            "AGENTOS_AGENT_VERSION": task.manifest.version,
            "AGENTOS_PACKAGE_DIR": str(task.package_dir),
            "AGENTOS_WORKSPACE": str(task.workspace),
            "AGENTOS_REPO": str(task.repo),
            "AGENTOS_WORKTREE": str(task.worktree),
            "AGENTOS_REQUEST": task.request,
            "AGENTOS_CONTEXT_FILE": str(task.context_file),
            "AGENTOS_FEEDBACK_FILE": str(task.feedback_file),
            "AGENTOS_ATTEMPT": str(task.attempt),
            "AGENTOS_HEARTBEAT_FILE": str(files.heartbeat),
            "AGENTOS_USAGE_FILE": str(files.usage),
        }
    )
    return env


def prepare(
    task: AgentTask,
    files: AgentFiles,
    environment: Callable[[dict[str, str]], dict[str, str]] | None = None,
    confine: Callable[[list[str], dict[str, str]], list[str]] | None = None,
    relay: bool = False,
) -> tuple[list[str], dict[str, str]]:
    """Write the env file, the wrapper and the launcher; return the pane's argv and the
    agent's environment.

    ``environment`` completes the scrubbed environment (the repository's interpreter and
    variables, see :meth:`agentos.gate.repo.RepoProfile.environment`); ``confine`` turns the
    wrapper's argv into the confined one (see :mod:`agentos.sandbox`), given the agent's
    environment. With ``relay`` (a package that names its hosts, in a sandbox), the
    wrapper first starts the relay to AgentOS's proxy (:mod:`agentos.sandbox.egress`) and
    the agent's HTTP(S)_PROXY name it."""
    files.run_dir.mkdir(parents=True, exist_ok=True)
    files.io.mkdir(exist_ok=True)
    files.log.parent.mkdir(parents=True, exist_ok=True)
    runtime = get_runtime(task.manifest.runtime)
    env = agent_env(task, files, runtime.path_dirs())
    env.update(runtime.environment(task))
    if environment is not None:
        env = environment(env)
    start_relay = ""
    if relay:
        proxy = f"http://127.0.0.1:{PROXY_PORT}"
        for name in ("NO_PROXY", "no_proxy"):
            env.pop(name, None)
        env.update(HTTPS_PROXY=proxy, HTTP_PROXY=proxy, https_proxy=proxy, http_proxy=proxy)
        argv = [sys.executable, "-I", "-S", str(_RELAY), str(files.egress_socket), str(PROXY_PORT)]
        start_relay = (
            f"{shlex.join(argv)} >> {shlex.quote(str(files.log))} 2>&1 || {{ "
            f"echo 'AgentOS: the relay to its network proxy did not start' >> "
            f"{shlex.quote(str(files.log))}; echo 1 > {shlex.quote(str(files.exit_file))}; "
            "exit 1; }\n"
        )
    command = runtime.command(task)
    files.exit_file.unlink(missing_ok=True)
    write_new(
        files.env_file, "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items()), 0o600
    )
    log = shlex.quote(str(files.log))
    write_new(
        files.wrapper,
        "#!/usr/bin/env bash\n"
        f"# AgentOS wrapper for {task.agent} (run {task.run_id}, attempt {task.attempt})\n"
        f"set -a; . {shlex.quote(str(files.env_file))}; set +a\n"
        f"cd {shlex.quote(str(task.worktree))} || exit 1\n"
        f"{start_relay}"
        f"printf '\\n== AgentOS: {task.agent} attempt {task.attempt} ==\\n' >> {log}\n"
        # The pane shows the log; the agent writes to it directly. Through a pipe the
        # wrapper would wait for whatever the agent left holding its output, and a tee
        # killed with the session would lose the output's tail.
        f"tail -n +1 -f --pid=$$ {log} &\n"
        f"{shlex.join(command)} >> {log} 2>&1\n"
        "status=$?\n"
        # A builtin write, no fork: it works when the agent exhausted its processes.
        f"printf '%s\\n' \"$status\" > {shlex.quote(str(files.exit_file))}\n",
        0o755,
    )
    files.stopped.unlink(missing_ok=True)
    files.log.touch()  # a confined agent's log is bound into its sandbox: it must exist
    argv = files.wrapper_command
    if confine is not None:
        argv = confine(argv, env)
    # Started with an empty environment: the sandbox's own processes (bubblewrap is pid 1
    # inside, readable at /proc/1/environ) hold nothing of the pane's, which is the
    # orchestrator's. The agent's variables come from its env file.
    clean = [shutil.which("env", path=SYSTEM_PATH) or "/usr/bin/env", "-i"]
    write_new(
        files.launcher,
        "#!/bin/sh\n# AgentOS: the agent's wrapper, confined\nexec "
        + shlex.join([*clean, *argv])
        + "\n",
        0o755,
    )
    return files.pane_command, env
