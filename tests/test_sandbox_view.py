"""What an agent sees in its sandbox, tried as a hostile agent would (issue 32): the
orchestrator's environment, the main checkout beside its venv, another checkout named by
``python:``, another workspace's key, eval suites' expected answers; and its disk quota.

Every probe has a positive control: the same probe, where the thing is reachable (no
sandbox, or the path given directly), finds it; so a probe that could not run at all
never counts as contained.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import (
    CliRunner,
    add_agent,
    make_repo,
    needs_bwrap,
    needs_tmux,
    write_package,
)

from agentos.evals.suite import BUNDLED
from agentos.hub.store import Hub
from agentos.sandbox.limits import Resolved
from agentos.sandbox.policy import Policy
from agentos.sandbox.view import Mount, kept_from_others, listing, plan, system_mounts
from agentos.workspace.layout import Workspace, init_workspace

pytestmark = [needs_tmux, needs_bwrap, pytest.mark.usefixtures("tmux_socket")]

# Probes, one per line of the agent's log: "<name>: <what it found>".
PROBES = r"""
probe() { printf '%s: %s\n' "$1" "$(sh -c "$2" 2>/dev/null | tr '\n' ' ' | head -c 300)"; }
probe environ "cat /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n' | grep -c ORCH_CANARY"
probe checkout "ls -A '$AGENTOS_REPO'"
probe dotenv "cat '$AGENTOS_REPO/.env'"
probe ignored "cat '$AGENTOS_REPO/build/secret.txt'"
probe venv "ls '$AGENTOS_REPO/.venv'"
probe other "cat 'OTHER/.env'; ls -A 'OTHER'"
probe key "cat 'WS2/.agentos/receipts.key'"
echo legit > legit.txt
"""


def found(log: str) -> dict[str, str]:
    return {k: v.strip() for k, v in re.findall(r"^(\w+): (.*)$", log, re.MULTILINE)}


@pytest.fixture
def outside() -> Iterator[Path]:
    """A folder outside /tmp, the home and the workspace (each private or hidden anyway)."""
    path = Path(tempfile.mkdtemp(prefix="agentos-suite-", dir="/var/tmp"))
    yield path
    shutil.rmtree(path)


@pytest.fixture
def layout(tmp_path: Path, outside: Path) -> dict[str, Path]:
    """A repository with its venv inside it, an untracked .env and an ignored build
    secret; another checkout with its own venv and secret; another workspace with a key,
    outside /tmp and the home (which every sandbox replaces anyway)."""
    repo = make_repo(
        tmp_path / "repo", {"README.md": "# target\n", ".gitignore": "build/\n.venv/\n"}
    )
    other = make_repo(tmp_path / "other", {"README.md": "# other\n"})
    for root in (repo, other):
        venv = root / ".venv"
        (venv / "bin").mkdir(parents=True)
        (venv / "bin" / "python").symlink_to(Path(sys.executable).resolve())
        home = Path(sys.executable).resolve().parent
        (venv / "pyvenv.cfg").write_text(f"home = {home}\nversion = 3\n")
        (root / ".env").write_text(f"SECRET=dotenv-of-{root.name}\n")
    (repo / "build").mkdir()
    (repo / "build" / "secret.txt").write_text("ignored-build-secret\n")
    ws2, _ = init_workspace(outside / "ws2")
    (ws2.state_dir / "receipts.key").write_text("other-workspace-key 1\n")
    return {"repo": repo, "other": other, "ws2": ws2.root}


def run_probes(
    ws: Workspace, cli: CliRunner, tmp_path: Path, layout: dict[str, Path], settings: str
) -> dict[str, str]:
    script = PROBES.replace("OTHER", str(layout["other"])).replace("WS2", str(layout["ws2"]))
    add_agent(ws, tmp_path, "prober", script, checks=[{"name": "ok", "file_exists": "legit.txt"}])
    ws.settings_file.write_text(settings)
    out = cli(
        "run",
        "prober-task",
        "--repo",
        str(layout["repo"]),
        "--force",
        "--json",
        env={"ORCH_CANARY": "orchestrator-secret-value"},
    )
    report = json.loads(out.stdout)
    assert out.returncode == 0, report["message"]
    return found(Path(report["agents"][0]["log"]).read_text())


def test_an_agent_sees_nothing_of_the_orchestrator_the_checkout_or_other_workspaces(
    ws: Workspace, cli: CliRunner, tmp_path: Path, layout: dict[str, Path]
) -> None:
    seen = run_probes(ws, cli, tmp_path, layout, "run: {guardian: false, retries: 0}\n")

    # No process of the sandbox (bubblewrap is pid 1 there) holds the caller's variables.
    assert seen["environ"] == "0"
    # Of the main checkout: its git directory (the worktree's git needs it) and its venv,
    # nothing else: no .env, no ignored build output, no sources.
    assert sorted(seen["checkout"].split()) == [".git", ".venv"]
    assert seen["dotenv"] == "" and seen["ignored"] == ""
    assert seen["venv"].split() == ["bin", "pyvenv.cfg"]  # the venv is there, as it is
    assert seen["other"] == "" and seen["key"] == ""


def test_without_a_sandbox_the_same_probes_find_everything(
    ws: Workspace, cli: CliRunner, tmp_path: Path, layout: dict[str, Path]
) -> None:
    """The positive control: each probe above works, where nothing confines it."""
    seen = run_probes(
        ws,
        cli,
        tmp_path,
        layout,
        "run: {guardian: false, retries: 0}\nsandbox: {backend: none, required: false}\n",
    )

    assert seen["dotenv"] == "SECRET=dotenv-of-repo"
    assert seen["ignored"] == "ignored-build-secret"
    assert "README.md" in seen["checkout"].split()
    assert seen["other"].startswith("SECRET=dotenv-of-other")
    assert seen["key"] == "other-workspace-key 1"
    # The tmux server that runs the pane was started by the orchestrator: its variables
    # are in the pane's processes (the wrapper itself starts from env -i).
    assert int(seen["environ"]) >= 1


def test_python_naming_another_checkout_shows_its_venv_and_nothing_else_of_it(
    ws: Workspace, cli: CliRunner, tmp_path: Path, layout: dict[str, Path]
) -> None:
    other_python = layout["other"] / ".venv" / "bin" / "python"
    settings = {
        "run": {"guardian": False, "retries": 0},
        "repos": {str(layout["repo"]): {"python": str(other_python)}},
    }
    seen = run_probes(ws, cli, tmp_path, layout, yaml.safe_dump(settings))

    assert seen["other"] == ".venv"  # its venv, not its .env, README or git
    assert seen["dotenv"] == "" and seen["key"] == ""


# --- eval answers --------------------------------------------------------------------------

# Walks everything the agent can read (but the system's directories and the interpreter
# installations, which exist before the suite does) for a string given reversed, so that
# the package holding this script never matches.
SEARCH = r"""
import os, sys
needle = sys.argv[1][::-1].encode()
roots, skip = sys.argv[2].split(":"), set(sys.argv[3].split(":"))
hits = []
for root in roots:
    for parent, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if os.path.join(parent, d) not in skip]
        for name in files:
            path = os.path.join(parent, name)
            try:
                if os.path.isfile(path) and not os.path.islink(path):
                    with open(path, "rb") as fh:
                        if needle in fh.read():
                            hits.append(path)
            except OSError:
                pass
print("FOUND " + " ".join(hits) if hits else "NOT FOUND")
"""


def search_agent(ws: Workspace, tmp_path: Path, name: str, needle: str, roots: list[str]) -> None:
    """An agent that searches ``roots`` and AgentOS's own package for ``needle`` (given
    reversed) and answers where it found it."""
    import agentos

    package_dir = Path(agentos.__file__).resolve().parent
    skip = ["/proc", "/sys", "/dev", "/usr", "/etc", sys.prefix, sys.base_prefix]
    script = (
        'python3 "$AGENTOS_PACKAGE_DIR/search.py" "$(cat "$AGENTOS_PACKAGE_DIR/needle")" '
        f'{":".join([*roots, str(package_dir)])} {":".join(skip)} > "$AGENTOS_OUTPUT_FILE"\n'
    )
    files = {"run.sh": script, "search.py": SEARCH, "needle": needle[::-1]}
    Hub(ws.hub_dir).install(str(write_package(tmp_path / "src" / name, name=name, files=files)))


def canary_suite(root: Path, canary: str) -> Path:
    root.mkdir(parents=True)
    (root / "suite.yaml").write_text(
        json.dumps({"name": "canary", "evaluator": {"kind": "contains"}})
    )
    task = {"id": "peek", "input": "what is the answer?", "expected": canary}
    (root / "tasks.jsonl").write_text(json.dumps(task) + "\n")
    return root


def test_no_expected_answer_is_anywhere_an_eval_agent_can_read(
    ws: Workspace, cli: CliRunner, tmp_path: Path, outside: Path
) -> None:
    import subprocess

    canary = f"canary-{uuid.uuid4().hex}"
    suite = canary_suite(outside / "suite", canary)
    search_agent(ws, tmp_path, "seeker", canary, ["/"])

    out = cli("eval", "run", str(suite), "--agent", "seeker", "--json")

    (prediction,) = json.loads(out.stdout)["predictions"]
    assert prediction["answer"].strip() == "NOT FOUND", prediction["answer"]
    assert prediction["score"] == 0.0
    # The positive control: the same search, unconfined and given the suite's folder,
    # finds the answer there.
    package = tmp_path / "src" / "seeker"
    control = subprocess.run(
        [sys.executable, str(package / "search.py"), canary[::-1], str(suite), "/proc"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert control.stdout.split() == ["FOUND", str(suite / "tasks.jsonl")]


CHEAT = r"""
tasks="TASKS"
if [ -r "$tasks" ]; then
  python3 - "$tasks" > "$AGENTOS_OUTPUT_FILE" <<'PY'
import json, os, sys
for line in open(sys.argv[1]):
    task = json.loads(line)
    if task["input"] == os.environ["AGENTOS_REQUEST"]:
        print(task["expected"])
PY
  exit 0
fi
exec python3 "$AGENTOS_PACKAGE_DIR/honest.py"
"""
HONEST = """import os, sys
sys.path.insert(0, os.environ["AGENTOS_PACKAGE_DIR"])
import calc
sys.exit(calc.solve(os.environ["AGENTOS_REQUEST"], ".", ""))
"""


def test_a_cheating_eval_agent_cannot_read_the_bundled_answers_and_scores_as_the_honest_one(
    ws: Workspace, cli: CliRunner, tmp_path: Path
) -> None:
    honest = Path(__file__).resolve().parents[1] / "hub" / "calculator" / "1.0.0" / "calc.py"
    script = CHEAT.replace("TASKS", str(BUNDLED / "arithmetic" / "tasks.jsonl"))
    files = {"run.sh": script, "calc.py": honest.read_text(), "honest.py": HONEST}
    Hub(ws.hub_dir).install(str(write_package(tmp_path / "cheat", name="cheater", files=files)))

    def scores(agent: str) -> dict[str, float]:
        out = cli("eval", "run", "arithmetic", "--agent", agent, "--json")
        assert out.returncode in (0, 1), out.stderr
        return {p["task"]: p["score"] for p in json.loads(out.stdout)["predictions"]}

    cheater, calculator = scores("cheater"), scores("calculator")
    assert cheater == calculator and cheater["words"] == 0.0
    # The positive control: unconfined, the same agent reads the answers (and the one
    # written in words is right).
    ws.settings_file.write_text("sandbox: {backend: none, required: false}\n")
    assert scores("cheater")["words"] == 1.0


# --- the disk quota --------------------------------------------------------------------------


def test_an_agent_writing_past_its_disk_quota_is_stopped_there(
    ws: Workspace, cli: CliRunner, tmp_path: Path
) -> None:
    """Five 15 MB files under a 20 MB quota: the agent stops at the quota, counted across
    its private /tmp (a sized tmpfs) and its worktree on disk."""
    script = (
        "head -c 15M /dev/zero > /tmp/scratch.bin && echo 'tmp written'\n"
        "sleep 0.5\n"  # what /tmp holds is looked at every 0.1 s
        "for i in 1 2 3 4 5; do head -c 15M /dev/zero > big$i.bin && echo wrote $i; done\n"
        "echo 'never stopped'\n"
    )
    add_agent(ws, tmp_path, "filler", script)
    ws.settings_file.write_text(
        "run: {guardian: false, retries: 0}\nsandbox: {disk: 20M, file_size: 20M}\n"
    )
    repo = make_repo(tmp_path / "repo", {"README.md": "# target\n"})

    out = cli("run", "filler-task", "--repo", str(repo), "--force", "--json")

    report = json.loads(out.stdout)
    (agent,) = report["agents"]
    log = Path(agent["log"]).read_text()
    assert agent["limit"] == "disk", log
    assert "tmp written" in log and "never stopped" not in log
    # Stopped within the first file on disk: /tmp's 15 MB counted (the overshoot is at
    # most one file_size: no second file was begun).
    assert "wrote 1" not in log, log
    assert report["status"] == "failed"


def test_a_file_grown_through_a_memory_map_held_open_still_counts(tmp_path: Path) -> None:
    """Pages written through a shared memory map make no inotify event until the file is
    closed: the watch measures every file it saw again each second."""
    import mmap
    import threading

    from agentos.sandbox.disk import RESTAT, DiskWatch

    over = threading.Event()
    watch = DiskWatch([tmp_path], 20 << 20, over.set)
    try:
        with open(tmp_path / "mapped", "wb+") as fh:
            fh.truncate(50 << 20)  # sparse: nothing on disk yet
            mapped = mmap.mmap(fh.fileno(), 50 << 20)
            for offset in range(0, 50 << 20, mmap.PAGESIZE):
                mapped[offset] = 1
            assert over.wait(RESTAT * 3), f"not stopped: {watch.used} bytes counted"
            mapped.close()
    finally:
        watch.close()
    assert watch.hit and watch.used > 20 << 20


# --- the plan of mounts --------------------------------------------------------------------


def _policy(tmp_path: Path, **fields: object) -> Policy:
    values: dict[str, Any] = {
        "network": False,
        "hidden": (),
        "readable": (),
        "writable": (),
        "home": tmp_path / "home",
        "home_dir": None,
        "home_reads": (),
        "limits": Resolved(None, None, None, None, 123),
        "cwd": tmp_path,
    }
    return Policy(**{**values, **fields})


def test_a_view_binds_each_path_once_shallowest_first_and_hides_only_inside_what_it_binds(
    outside: Path,
) -> None:
    """A path read-only inside another is there already unless a hidden one lies between;
    a system path and the home are there already; a hidden path is covered only where
    something bound holds it (``outside`` is not in /tmp), after the binds of its depth."""
    t, home = outside, outside / "home"
    pol = _policy(
        outside,
        readable=(t / "shown", t / "shown/inner", t / "shown/h/deep", Path("/usr/lib"), home),
        home_reads=(home / ".claude",),
        writable=(t / "work", t / "shown/w", t / "work"),
        hidden=(
            *(t / "shown/h", t / "elsewhere", home / ".ssh", t / "work", t / "shown/h"),
            Path("/tmp/secret"),
        ),
    )
    system = [*system_mounts()] + [
        Mount("hide" if is_dir else "null", path) for path, is_dir in kept_from_others()
    ]
    assert plan(pol) == [
        *system,
        Mount("tmpfs", Path("/tmp"), size=123),
        Mount("tmpfs", home, size=123),
        Mount("hide", Path("/tmp/secret")),
        Mount("ro", t / "shown"),
        Mount("rw", t / "work"),
        Mount("ro", home / ".claude"),
        Mount("rw", t / "shown/w"),
        Mount("hide", t / "shown/h"),
        Mount("hide", home / ".ssh"),
        Mount("ro", t / "shown/h/deep"),
    ]


def test_sandbox_doctor_lists_each_mount_of_the_view_in_words(tmp_path: Path) -> None:
    home = tmp_path / "home"
    pol = _policy(
        tmp_path,
        home_dir=tmp_path / "kept",
        readable=(tmp_path / "shown",),
        writable=(tmp_path / "work",),
        hidden=(home / ".ssh",),
    )
    words = {
        "ro": "read-only",
        "rw": "read-write",
        "link": "symlink",
        "tmpfs": "empty, private",
        "hide": "hidden (empty)",
        "null": "hidden (unreadable)",
    }
    system = [
        {"path": str(m.path), "seen": words[m.kind], **({"from": m.source} if m.source else {})}
        for m in system_mounts()
    ] + [
        {"path": str(path), "seen": words["hide" if is_dir else "null"]}
        for path, is_dir in kept_from_others()
    ]
    assert {m["seen"] for m in system} >= {"read-only"}
    assert listing(pol) == [
        *system,
        {"path": "/tmp", "seen": "empty, private"},
        {"path": str(home), "seen": "read-write", "from": str(tmp_path / "kept")},
        {"path": str(tmp_path / "shown"), "seen": "read-only"},
        {"path": str(tmp_path / "work"), "seen": "read-write"},
        {"path": str(home / ".ssh"), "seen": "hidden (empty)"},
    ]
