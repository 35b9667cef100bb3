"""Shared fixtures: real workspaces, real subprocesses of the CLI, real git repositories."""

from __future__ import annotations

import logging
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, AnyStr, Generic, NoReturn

import pytest
import yaml

from agentos.hub.store import Hub
from agentos.workspace.layout import Workspace, init_workspace

REPO_ROOT = Path(__file__).resolve().parent.parent

# Keep agents, git and the CLI in tests away from the developer's own configuration.
os.environ.setdefault("GIT_AUTHOR_NAME", "AgentOS Test")
os.environ.setdefault("GIT_AUTHOR_EMAIL", "test@agentos.invalid")
os.environ.setdefault("GIT_COMMITTER_NAME", "AgentOS Test")
os.environ.setdefault("GIT_COMMITTER_EMAIL", "test@agentos.invalid")
os.environ["GIT_CONFIG_NOSYSTEM"] = "1"
os.environ.pop("AGENTOS_HOME", None)
# A workspace's fork servers (agentos.shared.forkserver: of the agents' MCP servers, of
# `agentos route`) wait a minute for the next request, not ten: each test's workspace starts
# its own.
os.environ.setdefault("AGENTOS_FORKSERVER_IDLE", "60")
# `agentos route` and `mcp serve` run in their own process, as they did: a command server
# started by the first call of each test's workspace would double that call's imports for
# nothing. tests/test_cli_fast.py turns it on where it is what is tested.
os.environ.setdefault("AGENTOS_CLI_SERVER", "0")

# Set by .ci/run: what scripts/test installs (bubblewrap, tmux, the npm CLIs, chromium) is
# there, so a test that would skip for want of it fails instead.
CI = bool(os.environ.get("AGENTOS_CI"))


def missing(reason: str) -> NoReturn:
    """Skip the test for want of a tool scripts/test installs, or of a sandbox that works
    here; under CI (``AGENTOS_CI``) fail it: there such a test never goes unrun."""
    if CI:
        pytest.fail(f"{reason} (AGENTOS_CI is set: this fails instead of skipping)", pytrace=False)
    pytest.skip(reason)


def requires(available: bool, reason: str) -> pytest.MarkDecorator:
    """Mark a test that needs what ``reason`` names: without it, :func:`missing`."""
    return pytest.mark.requires(available=available, reason=reason)


SLOWEST = Path(__file__).with_name("slowest.txt")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The modules of the slowest tests first (tests/slowest.txt), the one of the slowest
    test first, and in each its slowest tests first; the rest in their order. xdist hands
    each worker the next test as it frees, so a two-minute test started last would keep
    one worker busy long after the other has finished. A module's tests stay together (its
    module fixtures are made once per worker); an xdist group (the cluster's tests) keeps
    its order."""
    seconds: dict[str, float] = {}
    for line in SLOWEST.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            took, _, test = line.partition(" ")
            seconds[test.strip()] = float(took)
    weight: dict[str, float] = {}
    for nodeid, value in seconds.items():
        module = nodeid.partition("::")[0]
        weight[module] = max(weight.get(module, 0.0), value)

    def first(item: pytest.Item) -> tuple[float, str, float]:
        module = item.nodeid.partition("::")[0]
        if item.get_closest_marker("xdist_group") or module not in weight:
            return (0.0, "", 0.0)
        return (-weight[module], module, -seconds.get(item.nodeid, 0.0))

    items.sort(key=first)  # (stable: the rest in their order)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    for mark in item.iter_markers("requires"):
        if not mark.kwargs["available"]:
            missing(mark.kwargs["reason"])


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    """A fresh workspace seeded with the bundled agents and cards.

    Its runs start no background guardian (tests of the guardian turn it on), so that no
    daemon outlives the test that started it.
    """
    workspace, _ = init_workspace(tmp_path / "ws")
    workspace.settings_file.write_text("run: {guardian: false}\n")
    return workspace


CliRunner = Callable[..., subprocess.CompletedProcess[str]]

# Two tiers. Most of the CLI's behaviour (output, exit codes, --json) is tested in-process,
# through the CLI's own entry point (agentos.cli.entry, as `agentos ARGS` runs it), as a
# user's shell would see it but without a new Python each time. A test that needs a real
# process (what importing costs, the interpreter's settings, an exec, output a child writes
# to the process's own stdout) says so with @pytest.mark.process and gets `python -m agentos`;
# an in-process run that does what only a real process would show fails, naming the marker.
_PROCESS_ONLY_ENV = ("PYTHON", "TZ", "LANG", "LC_")  # read when Python starts
_PROCESS_ONLY_COMMANDS = ("attach",)  # replaces the process with tmux
_MARK = "mark the test @pytest.mark.process"


def _command(args: tuple[str, ...]) -> str | None:
    """The command of ``agentos ARGS``: the first argument that is not an option (or the
    value of --workspace)."""
    rest = list(args)
    while rest and rest[0].startswith("-"):
        option = rest.pop(0)
        if option in ("--workspace", "-w") and rest:
            rest.pop(0)
    return rest[0] if rest else None


def _needs_process(args: tuple[str, ...], env: dict[str, str] | None) -> str | None:
    changed = sorted(
        key
        for key, value in (env or {}).items()
        if key.startswith(_PROCESS_ONLY_ENV) and os.environ.get(key) != value
    )
    if changed:
        return f"env {changed}"
    command = _command(args)
    if command in _PROCESS_ONLY_COMMANDS:
        return f"`agentos {command}`"
    return None


class _Timeout(BaseException):
    """The in-process run took longer than its timeout (a subprocess would have been killed)."""


def _catchable_signals() -> list[signal.Signals]:
    return [s for s in signal.Signals if s not in (signal.SIGKILL, signal.SIGSTOP)]


def run_in_process(
    argv: list[str],
    *,
    input: str | None,
    env: dict[str, str] | None,
    cwd: Path | None,
    timeout: float,
) -> subprocess.CompletedProcess[str]:
    """``agentos argv`` through :func:`agentos.cli.entry`, in this process: stdin, stdout,
    stderr, the environment and the working directory as a subprocess would have them,
    restored after; an exception that escapes is a traceback on stderr and exit code 1, as
    Python would make it; past ``timeout`` it is :class:`subprocess.TimeoutExpired`.

    What a real process would show and this one would hide fails the test, naming the
    marker: output written to file descriptors 1 and 2 (a child's, or os.write), a signal
    handler left installed, the environment changed, a thread left running that would keep
    a real process from exiting."""
    import tempfile
    import threading
    import traceback

    from click.testing import CliRunner as ClickRunner

    from agentos.cli import entry

    here = os.getcwd()
    root = logging.getLogger()
    handlers = {s: signal.getsignal(s) for s in _catchable_signals()}
    environ = dict(os.environ)
    threads = set(threading.enumerate())
    raw = [tempfile.TemporaryFile() for _ in (1, 2)]  # noqa: SIM115 (closed once read)
    saved = [os.dup(fd) for fd in (1, 2)]

    def expire(_signum: int, _frame: object) -> None:
        raise _Timeout

    with ClickRunner().isolation(input=input, env=env) as (out, err, _):
        # A new process prints warnings it logs to stderr (Python's last-resort handler);
        # here pytest's own handlers would take them.
        printed = logging.StreamHandler(sys.stderr)
        printed.setLevel(logging.WARNING)
        root.addHandler(printed)
        for fd, to in zip((1, 2), raw, strict=True):
            os.dup2(to.fileno(), fd)
        # pytest-timeout's timer for the test, when armed: put back with the time it has left
        outer, _ = signal.getitimer(signal.ITIMER_REAL)
        started = time.monotonic()
        previous_alarm = signal.signal(signal.SIGALRM, expire)
        signal.setitimer(signal.ITIMER_REAL, timeout)
        timed_out = False
        try:
            if cwd is not None:
                os.chdir(cwd)
            code = entry(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except _Timeout:
            timed_out = True
            code = 1
        except Exception:
            traceback.print_exc()
            code = 1
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous_alarm)
            if outer:
                left = outer - (time.monotonic() - started)
                signal.setitimer(signal.ITIMER_REAL, max(left, 0.001))
            for fd, keep in zip((1, 2), saved, strict=True):
                os.dup2(keep, fd)
                os.close(keep)
            root.removeHandler(printed)
            os.chdir(here)
            sys.stdout.flush()
            sys.stderr.flush()
        stdout = out.getvalue().decode("utf-8", "replace")
        stderr = err.getvalue().decode("utf-8", "replace")
    if timed_out:
        raise subprocess.TimeoutExpired(["agentos", *argv], timeout, stdout, stderr)
    problems = []
    for name, file in zip(("stdout", "stderr"), raw, strict=True):
        file.seek(0)
        written = file.read()
        file.close()
        if written:
            problems.append(f"wrote {written[:200]!r} to the process's own {name}")
    for sig, handler in handlers.items():
        if signal.getsignal(sig) != handler:
            signal.signal(sig, handler)
            problems.append(f"left a handler for {sig.name}")
    if dict(os.environ) != environ:
        changed = sorted(set(os.environ.items()) ^ set(environ.items()))
        os.environ.clear()
        os.environ.update(environ)
        problems.append(f"changed the environment: {changed[:5]}")
    for thread in set(threading.enumerate()) - threads:
        thread.join(timeout=5)
        if thread.is_alive() and not thread.daemon:
            problems.append(f"left thread {thread.name!r} running (a process would not exit)")
    if problems:
        pytest.fail(f"`agentos {' '.join(argv)}` " + "; ".join(problems) + f": {_MARK}")
    return subprocess.CompletedProcess(["agentos", *argv], code, stdout, stderr)


@pytest.fixture
def cli(ws: Workspace, request: pytest.FixtureRequest) -> CliRunner:
    """Run ``agentos`` against the test workspace: in-process, or in a real subprocess for a
    test marked ``@pytest.mark.process``. An in-process test that asks for what only a new
    process has fails, naming the marker."""
    in_process = request.node.get_closest_marker("process") is None

    def run(
        *args: str,
        input: str | None = None,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
        workspace: Path | None = ws.root,
        timeout: float = 120,
    ) -> subprocess.CompletedProcess[str]:
        prefix = ["--workspace", str(workspace)] if workspace is not None else []
        if in_process:
            needs = _needs_process(args, env)
            if needs is not None:
                pytest.fail(f"{needs} needs a real process: {_MARK}")
            return run_in_process([*prefix, *args], input=input, env=env, cwd=cwd, timeout=timeout)
        return subprocess.run(
            [sys.executable, "-m", "agentos", *prefix, *args],
            input=input,
            capture_output=True,
            text=True,
            env={**os.environ, **(env or {})},
            cwd=cwd,
            timeout=timeout,
        )

    return run


def write_package(
    directory: Path,
    name: str = "demo-agent",
    version: str = "1.0.0",
    files: dict[str, str] | None = None,
    **fields: Any,
) -> Path:
    """Write a valid shell agent package (fields override the manifest)."""
    directory.mkdir(parents=True, exist_ok=True)
    manifest: dict[str, Any] = {
        "name": name,
        "version": version,
        "description": "A test agent.",
        "runtime": "shell",
        "entry": "run.sh",
    }
    manifest.update(fields)
    (directory / "agent.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
    for rel, text in {"run.sh": "#!/usr/bin/env bash\necho hello\n", **(files or {})}.items():
        (directory / rel).parent.mkdir(parents=True, exist_ok=True)
        (directory / rel).write_text(text)
    return directory


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


def make_repo(path: Path, files: dict[str, str] | None = None) -> Path:
    """A real git repository with one commit on branch main."""
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    for rel, text in (files or {"README.md": "# demo\n"}).items():
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_text(text)
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "initial")
    return path


def tree_listing(root: Path) -> list[str]:
    """Every path under ``root``, for checking that nothing was written."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


needs_bwrap = requires(
    shutil.which("bwrap") is not None, "bubblewrap is not installed (scripts/setup installs it)"
)
needs_tmux = requires(
    shutil.which("tmux") is not None, "tmux is not installed (scripts/setup installs it)"
)


@pytest.fixture
def model_api(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """A scripted model API on loopback (tests/scripted_model.py) with no script: the
    variables that point the claude-code, gemini-cli and codex runtimes at it with the key
    it takes, set in this process too. A CLI agent's preflight asks its API whether its key
    is good; stand-in CLIs need an API that says yes."""
    from scripted_model import KEY, ScriptedModel

    with ScriptedModel() as model:
        env = {
            "ANTHROPIC_API_KEY": KEY,
            "ANTHROPIC_BASE_URL": model.url,
            "GEMINI_API_KEY": KEY,
            "GOOGLE_GEMINI_BASE_URL": model.url,
            "OPENAI_API_KEY": KEY,
            "OPENAI_BASE_URL": f"{model.url}/v1",
        }
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        yield env


@pytest.fixture
def tmux_socket(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A private tmux server for each test (AgentOS uses it through AGENTOS_TMUX_SOCKET),
    killed afterwards."""
    name = f"agentos-test-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("AGENTOS_TMUX_SOCKET", name)
    yield name
    subprocess.run(["tmux", "-L", name, "kill-server"], capture_output=True)


def tmux_sessions(socket: str) -> list[str]:
    """The sessions on a tmux server (none when it is not running)."""
    out = subprocess.run(
        ["tmux", "-L", socket, "list-sessions", "-F", "#{session_name}"],
        capture_output=True,
        text=True,
    )
    return out.stdout.split() if out.returncode == 0 else []


def worktrees(repo: Path) -> list[str]:
    return [
        line.split()[1]
        for line in git(repo, "worktree", "list", "--porcelain").splitlines()
        if line.startswith("worktree ")
    ]


def branches(repo: Path) -> list[str]:
    return git(repo, "branch", "--format=%(refname:short)").split()


def install_variant(
    ws: Workspace, tmp_path: Path, base: str, name: str, *, prompt_prefix: str = "", **fields: Any
) -> str:
    """Install a copy of the installed package ``base`` as ``name``, its manifest's
    ``fields`` changed (and ``prompt_prefix`` put before its prompt file)."""
    info, _ = Hub(ws.hub_dir).get(base)
    src = tmp_path / "variants" / name
    shutil.copytree(info.path, src)
    for path in [src, *src.rglob("*")]:  # installed packages are read-only
        path.chmod(0o755 if path.is_dir() else 0o644)
    manifest = yaml.safe_load((src / "agent.yaml").read_text())
    manifest.update(name=name, **fields)
    (src / "agent.yaml").write_text(yaml.safe_dump(manifest))
    if prompt_prefix:
        prompt = src / manifest["entry"]
        prompt.write_text(prompt_prefix + prompt.read_text())
    Hub(ws.hub_dir).install(str(src))
    return name


def add_agent(
    ws: Workspace,
    tmp_path: Path,
    name: str,
    script: str,
    *,
    card: dict[str, Any] | None = None,
    **fields: Any,
) -> None:
    """Install a shell agent running ``script`` and a card routing ``name-task`` to it."""
    src = write_package(tmp_path / "src" / name, name=name, files={"run.sh": script}, **fields)
    Hub(ws.hub_dir).install(str(src))
    card_data = {
        "id": f"{name}-card",
        "agent": name,
        "description": f"route to {name}",
        "group": name,
        "triggers": {"keywords": [f"{name}-task"]},
    }
    card_data.update(card or {})
    (ws.cards_dir / f"{name}.yaml").write_text(yaml.safe_dump(card_data))


def agent_started(ws: Workspace, agent: str) -> bool:
    """Whether any run of the workspace started ``agent`` (its log exists from its first
    attempt on; an agent in a sandbox cannot leave a marker of its own outside)."""
    return any(ws.logs_dir.glob(f"*/{agent}.log"))


def agent_wrote(ws: Workspace, agent: str, name: str, text: str) -> bool:
    """Whether ``agent`` has written ``text`` to ``name`` in its worktree (in any run):
    what a test waits on before it stops a run whose work must be kept."""
    return any(p.read_text() == text for p in ws.worktrees_dir.glob(f"*/{agent}/{name}"))


def wait_until(predicate: Callable[[], Any], timeout: float = 30, what: str = "condition") -> Any:
    """Poll ``predicate`` every 50 ms until it returns something true, and return that;
    fail the test after ``timeout`` s. Every test that waits for something uses this."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {timeout}s")
        time.sleep(0.05)


class Lines(Generic[AnyStr]):
    """The lines a process writes to a pipe, read by a thread of their own, so that a test
    waits for the next one with a real timeout (``pipe.readline()`` blocks past any timeout:
    a process that says nothing would hang the test)."""

    def __init__(self, pipe: IO[AnyStr] | None) -> None:
        assert pipe is not None, "the process was started without a pipe"
        self._lines: queue.Queue[AnyStr | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, args=(pipe,), daemon=True)
        self._reader.start()

    def _read(self, pipe: IO[AnyStr]) -> None:
        try:
            for line in pipe:
                self._lines.put(line)
        except ValueError:  # the pipe was closed under the reader (the test ended)
            pass
        finally:
            self._lines.put(None)
            pipe.close()  # at its end: nobody reads it after this thread

    def poll(self, timeout: float) -> AnyStr | None:
        """The next line, or None when none comes within ``timeout`` s; fails the test when
        the pipe has ended."""
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            return None
        if line is None:
            self._lines.put(None)  # stays at the end for the next caller
            raise AssertionError("the process closed its output")
        return line

    def next(self, timeout: float = 30, what: str = "a line") -> AnyStr:
        """The next line; fails the test when none comes within ``timeout`` s or the pipe
        ends first."""
        line = self.poll(timeout)
        if line is None:
            raise AssertionError(f"{what}: nothing written within {timeout}s")
        return line

    def rest(self, timeout: float = 60, what: str = "the end of the output") -> list[AnyStr]:
        """Every line left, up to the end of the pipe (the process closed its output);
        fails the test when it has not ended within ``timeout`` s."""
        deadline = time.monotonic() + timeout
        seen: list[AnyStr] = []
        while True:
            try:
                line = self._lines.get(timeout=max(deadline - time.monotonic(), 0))
            except queue.Empty:
                raise AssertionError(f"{what}: not within {timeout}s; got {seen!r}") from None
            if line is None:
                self._lines.put(None)
                return seen
            seen.append(line)

    def until(
        self, predicate: Callable[[AnyStr], object], timeout: float = 30, what: str = "a line"
    ) -> list[AnyStr]:
        """Every line up to and including the first for which ``predicate`` is true; fails
        the test when there is none within ``timeout`` s."""
        deadline = time.monotonic() + timeout
        seen: list[AnyStr] = []
        while not seen or not predicate(seen[-1]):
            line = self.poll(max(deadline - time.monotonic(), 0))
            if line is None:
                raise AssertionError(f"{what}: not written within {timeout}s; got {seen!r}")
            seen.append(line)
        return seen


def processes_named(marker: str) -> list[int]:
    """Processes whose command line starts with ``marker`` (`exec -a MARKER ...`), seen from
    the host whatever sandbox they run in (their pids differ inside one)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "cmdline").read_bytes().split(b"\0")[0] == marker.encode():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


# --- PostgreSQL --------------------------------------------------------------------------


@pytest.fixture(scope="session")
def pg_server() -> Iterator[Any]:
    """A real PostgreSQL server for the session (tests/_postgres.py): started once per
    test process, removed at its end."""
    from _postgres import Server, bindir, remove_orphans

    programs = bindir()
    if programs is None:
        missing("PostgreSQL is not installed (scripts/setup installs Debian's postgresql)")
    remove_orphans(programs)  # of test processes killed before their teardown
    server = Server(programs)
    try:
        yield server
    finally:
        server.remove()


@pytest.fixture
def pg_url(pg_server: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    """The session server's database, AgentOS's schema in it and every table emptied, and
    AGENTOS_STATE_URL naming it: every store of the test's workspaces uses it. (A test that
    needs a database of its own asks ``pg_server.database()``.)"""
    url = str(pg_server.url(pg_server.fresh()))
    monkeypatch.setenv("AGENTOS_STATE_URL", url)
    return url


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest) -> str:
    """Each test that takes it runs twice: on SQLite (state.db, the default) and on a
    PostgreSQL database emptied for it (:func:`pg_url`)."""
    if request.param == "postgresql":
        request.getfixturevalue("pg_url")
    return str(request.param)
