"""Evolve (issue 19): a scripted meta agent improves a toy package generation by
generation; selection, the archive, invalid generations, resume after a torn archive or a
killed process, promote, bad input."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import missing, wait_until, write_package

from agentos.evolve.selection import Candidate, select_parent, weights
from agentos.hub.store import Hub

# --- selection -------------------------------------------------------------------------------

TRIO = [Candidate(0, 0.9, 3), Candidate(1, 0.7, 0), Candidate(2, 0.7, 1)]


def _sig(score: float, mid: float) -> float:
    return 1 / (1 + math.exp(-10 * (score - mid)))


@pytest.mark.parametrize(
    ("method", "expected"),
    [
        ("random", {0: 1.0, 1: 1.0, 2: 1.0}),
        ("latest", {0: 0.0, 1: 0.0, 2: 1.0}),
        ("best", {0: 1.0, 1: 0.0, 2: 0.0}),
        # The seed's example: 0.9 with 3 children -> 0.2275; 0.7 with none -> 0.71.
        ("score_child_prop", {0: 0.91 / 4, 1: 0.71, 2: 0.71 / 2}),
        (
            "score_prop",
            {0: _sig(0.9, 2.3 / 3), 1: _sig(0.7, 2.3 / 3), 2: _sig(0.7, 2.3 / 3)},
        ),
    ],
)
def test_selection_weights_follow_the_formulas(method: Any, expected: dict[int, float]) -> None:
    got = weights(method, TRIO)
    assert got.keys() == expected.keys()
    for gen, weight in expected.items():
        assert got[gen] == pytest.approx(weight)
    if method == "score_child_prop":
        assert round(got[0], 4) == 0.2275 and round(got[1], 2) == 0.71


def test_best_breaks_ties_for_the_newest_and_the_same_seed_draws_the_same_parents() -> None:
    tied = [Candidate(0, 0.5, 0), Candidate(1, 0.8, 0), Candidate(2, 0.8, 0)]
    assert select_parent("best", tied, "s").parent == 2
    draws = [select_parent("score_child_prop", TRIO, f"7:{r}").parent for r in range(40)]
    again = [select_parent("score_child_prop", TRIO, f"7:{r}").parent for r in range(40)]
    assert draws == again and set(draws) == {0, 1, 2}  # seeded, and not always the same one
    choice = select_parent("score_child_prop", TRIO, "7:1")
    chosen = choice.as_dict()
    assert chosen["seed"] == "7:1"
    assert isinstance(chosen["weights"], dict) and chosen["weights"]["1"] == 0.71


# --- the loop ----------------------------------------------------------------------------------

# The toy agent answers from a table in its package; it starts knowing one answer of four.
TOY = (
    'grep -m1 "^$AGENTOS_REQUEST=" "$AGENTOS_PACKAGE_DIR/answers.txt" | cut -d= -f2'
    ' > "$AGENTOS_OUTPUT_FILE"\n'
)
TASKS = [
    {"id": "two", "input": "2+2", "expected": "4"},
    {"id": "three", "input": "3+3", "expected": "6"},
    {"id": "five", "input": "5+5", "expected": "10"},
    {"id": "seven", "input": "7+7", "expected": "14"},
]
# The scripted meta agent: reads its parent's training predictions in $AGENTOS_EVAL_DIR and
# teaches the toy the first answer it got wrong (one per generation).
FIXER = r"""
set -e
predictions="$AGENTOS_EVAL_DIR/gen-$AGENTOS_EVOLVE_PARENT/predictions.json"
task=$(python3 -c 'import json, sys
failed = [p["task"] for p in json.load(open(sys.argv[1])) if p["score"] < 1]
print(failed[0] if failed else "")' "$predictions")
if [ "$AGENTOS_EVOLVE_GENERATION" = "$SLOW_GENERATION" ] && [ ! -e "$AGENTOS_EVAL_DIR/awake" ]
then sleep 30; fi
case "$task" in
  three) echo "3+3=6" >> answers.txt ;;
  five) echo "5+5=10" >> answers.txt ;;
  seven) echo "7+7=14" >> answers.txt ;;
esac
"""


def install(ws: Any, tmp_path: Path, name: str, script: str, **files: str) -> None:
    src = write_package(tmp_path / "src" / name, name=name, files={"run.sh": script, **files})
    Hub(ws.hub_dir).install(str(src))


@pytest.fixture
def toy(ws: Any, tmp_path: Path) -> Path:
    """The toy package, the fixer meta agent, and the suite (its folder)."""
    install(ws, tmp_path, "toy", TOY, **{"answers.txt": "2+2=4\n"})
    install(ws, tmp_path, "fixer", FIXER.replace("$SLOW_GENERATION", "none"))
    suite = tmp_path / "sums"
    suite.mkdir()
    (suite / "suite.yaml").write_text(
        json.dumps({"name": "sums", "evaluator": {"kind": "exact", "normalize": ["strip"]}})
    )
    (suite / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in TASKS))
    return suite


def evolve(cli: Any, *args: str) -> dict[str, Any]:
    out = cli("evolve", *args, "--json")
    assert out.returncode in (0, 1) and out.stdout.strip(), out.stdout + out.stderr
    return dict(json.loads(out.stdout))


def test_a_scripted_meta_agent_evolves_the_toy_to_a_perfect_score_and_stops_early(
    cli: Any, ws: Any, toy: Path
) -> None:
    from agentos.receipts import list_receipts, read_receipt

    done = evolve(
        cli, "start", "toy", "--suite", str(toy), "--meta", "fixer", "--generations", "6",
        "--select", "best", "--seed", "1",
    )  # fmt: skip

    gens = {g["gen"]: g for g in done["archive"]}
    assert [(g, gens[g]["score"]) for g in gens] == [(0, 0.25), (1, 0.5), (2, 0.75), (3, 1.0)]
    assert [gens[g]["verdict"] for g in gens] == ["initial", "accept", "accept", "accept"]
    assert "generation 3 reached a perfect score" in done["status"]
    status = cli("evolve", "status", done["id"])
    assert "finished: generation 3 reached a perfect score (1)" in status.stdout
    assert "3 of 6 generation(s)" in status.stdout and "best: generation 3 (1.000)" in status.stdout
    # The archive, the tree and every generation's metadata agree on every parent.
    root = ws.state_dir / "evolve" / done["id"]
    last = json.loads((root / "archive.jsonl").read_text().splitlines()[-1])
    assert last["archive"] == [0, 1, 2, 3]
    for gen in (1, 2, 3):
        meta = json.loads((root / f"gen-{gen}" / "metadata.json").read_text())
        assert meta["parent"] == last["entries"][str(gen)]["parent"] == gens[gen]["parent"]
        assert meta["parent"] == gen - 1  # best: always the newest best
        assert meta["selection"]["method"] == "best" and meta["selection"]["seed"] == f"1:{gen}"
    tree = cli("evolve", "tree", done["id"]).stdout.splitlines()
    assert tree == [
        "0 [initial] 0.250",
        "└── 1 [accept] 0.500",
        "    └── 2 [accept] 0.750",
        "        └── 3 [accept] 1.000",
    ]
    # Each generation's change is its patch; its branch is in the evolution's repository.
    patch = cli("evolve", "diff", done["id"], "2").stdout
    assert "+5+5=10" in patch and (root / "gen-2" / "patch.diff").read_text() in patch
    show = json.loads(cli("evolve", "show", done["id"], "2", "--json").stdout)
    assert show["scores"]["tasks"]["composite"] == 0.75 and show["lines_changed"] == 1
    # The meta agent saw training evaluations only: one folder per generation before it.
    assert sorted(p.name for p in (root / "evals").iterdir()) == [f"gen-{g}" for g in range(4)]
    receipts = [read_receipt(ws, r.id) for r in list_receipts(ws, run_id=done["id"])]
    assert sum("kind: generation" in r for r in receipts) == 4


def test_invalid_generations_are_rejected_never_selected_and_the_suite_is_untouched(
    cli: Any, ws: Any, toy: Path, tmp_path: Path
) -> None:
    from agentos.receipts import list_receipts, read_receipt

    before = {p.name: p.read_bytes() for p in toy.iterdir()}
    cases = {
        "lazy": ("true\n", "the meta agent changed nothing"),
        "breaker": ("echo 'name: [' > agent.yaml\n", "smoke test: "),
        "widener": (
            "printf 'sandbox:\\n  network: true\\n' >> agent.yaml\n",
            "smoke test: agent.yaml's sandbox changed (a generation may not widen it)",
        ),
        # A repository of its own, with a filter that would run outside the sandbox when
        # AgentOS runs `git add` in the worktree: the .git file is put back first.
        "rewirer": (
            f"git init -q own && git -C own config filter.x.clean 'touch {tmp_path}/filtered'"
            " && echo '* filter=x' > own.attributes && echo 'gitdir: own/.git' > .git"
            ' && git -C own config core.attributesFile "$PWD/own.attributes"'
            " && echo y >> answers.txt\n",
            "the meta agent rewrote the worktree's .git file (put back)",
        ),
        # An empty repository left in the worktree: `git add` fails on it; the generation
        # is rejected, the evolution goes on.
        "nester": (
            "git init -q nested && echo y >> answers.txt\n",
            "its work could not be committed: git add failed",
        ),
        "dotter": (
            "echo '* filter=x' > .gitattributes\n",
            "package files only (no_changes_outside [!.]*): 1 file(s) changed outside [!.]*",
        ),
        # It knows where the suite is and rewrites its expected answers: the sandbox hides
        # the folder, so it changes nothing there.
        "cheater": (
            f"echo '{{}}' > {toy}/tasks.jsonl 2>/dev/null || true; echo x >> answers.txt\n",
            None,
        ),
    }
    for name, (script, _) in cases.items():
        install(ws, tmp_path, name, script)

    for name, (_, reason) in cases.items():
        done = evolve(
            cli, "start", "toy", "--suite", str(toy), "--meta", name, "--generations", "2",
            "--select", "latest",
        )  # fmt: skip
        gens = {g["gen"]: g for g in done["archive"]}
        if reason is None:  # the cheater: its answers.txt change is a valid (useless) one
            assert gens[1]["verdict"] == "refine" and gens[1]["score"] == 0.25
            continue
        assert [gens[g]["verdict"] for g in (1, 2)] == ["reject", "reject"], name
        assert gens[1]["reason"].startswith(reason), gens[1]["reason"]
        assert not gens[1]["valid_parent"]
        # Never selected: with only invalid generations, every child is the initial's.
        assert gens[2]["parent"] == 0 and gens[2]["selection"]["weights"] == {"0": 1.0}
        text = [read_receipt(ws, r.id) for r in list_receipts(ws, run_id=done["id"])]
        assert any("verdict: reject" in t and reason.split(":")[0] in t for t in text)
    assert {p.name: p.read_bytes() for p in toy.iterdir()} == before
    assert not (tmp_path / "filtered").exists()  # no filter of the agent's ran


def test_a_meta_agent_that_rewrites_the_suite_without_a_sandbox_is_caught_and_undone(
    cli: Any, ws: Any, toy: Path, tmp_path: Path
) -> None:
    ws.settings_file.write_text("sandbox: {backend: none, required: false}\n")
    before = (toy / "tasks.jsonl").read_bytes()
    install(ws, tmp_path, "cheater", f"echo '{{}}' > {toy}/tasks.jsonl\necho x >> answers.txt\n")

    done = evolve(
        cli, "start", "toy", "--suite", str(toy), "--meta", "cheater", "--generations", "1"
    )  # fmt: skip

    gen = done["archive"][1]
    assert gen["verdict"] == "reject"
    assert gen["reason"] == "the meta agent changed the suite's files (put back): tasks.jsonl"
    assert (toy / "tasks.jsonl").read_bytes() == before


def _archive_ids(root: Path) -> list[int]:
    return list(json.loads((root / "archive.jsonl").read_text().splitlines()[-1])["archive"])


def test_a_torn_archive_line_is_skipped_and_resume_keeps_every_generation(
    cli: Any, ws: Any, toy: Path
) -> None:
    done = evolve(
        cli, "start", "toy", "--suite", str(toy), "--meta", "fixer", "--generations", "2"
    )  # fmt: skip
    root = ws.state_dir / "evolve" / done["id"]
    archive = root / "archive.jsonl"
    text = archive.read_bytes()
    archive.write_bytes(text[: len(text) - 40])  # killed while writing the last snapshot

    torn = evolve(cli, "status", done["id"])
    resumed = evolve(cli, "resume", done["id"])

    # The torn line is skipped on read; gen 2's metadata still says it was decided.
    assert [g["gen"] for g in torn["archive"]] == [0, 1, 2]
    assert [g["gen"] for g in resumed["archive"]] == [0, 1, 2]
    assert "made 2 generation(s), as asked" in resumed["status"]
    lines = archive.read_text().splitlines()
    assert all(json.loads(line) for line in lines) and _archive_ids(root) == [0, 1, 2]


def test_kill_9_mid_generation_then_resume_makes_it_again_under_the_same_number(
    cli: Any, ws: Any, toy: Path, tmp_path: Path
) -> None:
    from agentos.sandbox import choose

    if not choose(ws.settings.sandbox).confined:
        missing("no sandbox works here: a killed evolve's meta agent dies with it only in one")
    install(ws, tmp_path, "sleepy", FIXER.replace("$SLOW_GENERATION", "2"))
    out = cli(
        "evolve", "start", "toy", "--suite", str(toy), "--meta", "sleepy", "--generations",
        "3", "--select", "latest", "--detach",
    )  # fmt: skip
    evo = out.stdout.strip()
    root = ws.state_dir / "evolve" / evo
    wait_until(lambda: (root / "work" / "gen-2").is_dir(), timeout=60)
    pid = json.loads((root / "state.json").read_text())["pid"]
    second = cli("evolve", "resume", evo)  # one process drives an evolution
    assert second.returncode == 2 and f"already running (pid {pid})" in second.stderr
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not Path(f"/proc/{pid}").exists() or _zombie(pid), timeout=10)
    # A killed process's leader is a zombie before its last thread has let its files go:
    # its lock, held a moment longer (here by another process), is waited for.
    dying = subprocess.Popen(
        [sys.executable, "-c", _HOLD_LOCK, str(root / "lock")], stdout=subprocess.PIPE
    )
    assert dying.stdout is not None and dying.stdout.readline() == b"held\n"
    # Also torn: the last snapshot (generation 1's) cut mid-line.
    archive = root / "archive.jsonl"
    archive.write_bytes(archive.read_bytes()[:-25])

    assert "interrupted" in cli("evolve", "status", evo).stdout
    first = (root / "gen-1" / "metadata.json").read_bytes()
    (root / "evals" / "awake").touch()  # the meta agent no longer sleeps
    resumed = evolve(cli, "resume", evo)

    gens = {g["gen"]: g for g in resumed["archive"]}
    assert list(gens) == [0, 1, 2, 3] == _archive_ids(root)
    assert [gens[g]["parent"] for g in (1, 2, 3)] == [0, 1, 2]
    assert [gens[g]["score"] for g in (1, 2, 3)] == [0.5, 0.75, 1.0]
    assert (root / "gen-1" / "metadata.json").read_bytes() == first  # kept, not made again
    assert not (root / "work").exists() or not any((root / "work").iterdir())
    assert dying.wait(timeout=10) == 0
    dying.stdout.close()


_HOLD_LOCK = """
import fcntl, sys, time
fh = open(sys.argv[1], "a")
fcntl.flock(fh, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(1.5)
"""


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except OSError:
        return True


def test_promote_installs_a_generation_as_a_version_and_hub_use_rolls_back(
    cli: Any, ws: Any, toy: Path, tmp_path: Path
) -> None:
    install(ws, tmp_path, "lazy", "true\n")
    done = evolve(
        cli, "start", "toy", "--suite", str(toy), "--meta", "fixer", "--generations", "3",
        "--select", "latest",
    )  # fmt: skip
    lazy = evolve(cli, "start", "toy", "--suite", str(toy), "--meta", "lazy", "--generations", "1")

    promoted = cli("evolve", "promote", done["id"], "3", "--version", "1.1.0")
    invalid = cli("evolve", "promote", lazy["id"], "1", "--version", "1.2.0")

    assert promoted.returncode == 0, promoted.stderr
    from agentos.receipts import list_receipts, read_receipt

    (receipt,) = [r for r in list_receipts(ws, run_id=done["id"]) if r.kind == "promote"]
    text = read_receipt(ws, receipt.id)
    assert "package: toy@1.1.0" in text and "generation: 3" in text
    info, _ = Hub(ws.hub_dir).get("toy")
    assert info.version == "1.1.0"
    assert (info.path / "answers.txt").read_text().count("\n") == 4
    assert cli("hub", "verify").returncode == 0
    assert cli("eval", "run", str(toy), "--agent", "toy", "--json").returncode == 0
    assert cli("hub", "use", "toy@1.0.0").returncode == 0
    assert Hub(ws.hub_dir).get("toy")[0].version == "1.0.0"
    assert invalid.returncode == 1
    assert "generation 1 is invalid and cannot be promoted" in invalid.stderr
    assert "1.2.0" not in [v.version for v in Hub(ws.hub_dir).versions() if v.name == "toy"]


def test_evolve_refuses_bad_input_in_one_line(cli: Any, ws: Any, toy: Path) -> None:
    start = ["evolve", "start", "toy", "--suite", str(toy), "--meta", "fixer"]
    cases = [
        ([*start, "--select", "fittest"], "Invalid value for '--select'"),
        ([*start, "--generations", "0"], "--generations: must be at least 1, not 0"),
        (["evolve", "start", "toy", "--suite", "nope", "--meta", "fixer"], "no eval suite 'nope'"),
        (["evolve", "start", "ghost", "--suite", str(toy), "--meta", "fixer"], "no package"),
    ]
    for argv, message in cases:
        out = cli(*argv)
        assert out.returncode == 2, out.stdout + out.stderr
        assert len(out.stderr.splitlines()) == 1 and message in out.stderr, out.stderr
    assert not (ws.state_dir / "evolve").exists()  # nothing written


def test_a_meta_agent_whose_runtime_is_not_ready_is_named_with_the_fix(
    cli: Any, ws: Any, toy: Path, tmp_path: Path
) -> None:
    src = write_package(
        tmp_path / "src" / "claude-meta",
        name="claude-meta",
        runtime="claude-code",
        entry="prompt.md",
        files={"prompt.md": "Improve the package.\n"},
    )
    Hub(ws.hub_dir).install(str(src))
    (tmp_path / "bin").mkdir()
    env = {"PATH": f"{Path(sys.executable).parent}:{tmp_path / 'bin'}"}  # no `claude` on it

    out = cli("evolve", "start", "toy", "--suite", str(toy), "--meta", "claude-meta", env=env)

    assert out.returncode == 2 and len(out.stderr.splitlines()) == 1, out.stderr
    assert "claude" in out.stderr and "npm install" in out.stderr
    assert not (ws.state_dir / "evolve").exists()


def test_evolve_runs_detached_and_cancel_stops_it(
    cli: Any, ws: Any, toy: Path, tmp_path: Path
) -> None:
    install(ws, tmp_path, "sleepy", FIXER.replace("$SLOW_GENERATION", "1"))
    evo = cli(
        "evolve", "start", "toy", "--suite", str(toy), "--meta", "sleepy", "--detach"
    ).stdout.strip()  # fmt: skip
    root = ws.state_dir / "evolve" / evo
    wait_until(lambda: (root / "work" / "gen-1").is_dir(), timeout=60)

    out = cli("evolve", "cancel", evo)

    assert out.returncode == 0, out.stderr
    assert "cancelled" in cli("evolve", "status", evo).stdout
    gens = evolve(cli, "status", evo)["archive"]
    assert [g["gen"] for g in gens] == [0]  # the generation under way was dropped
    assert not (root / "gen-1").exists()


# A stand-in for Claude Code (the real one needs an account): checks what it was given and
# teaches the toy one answer, as the bundled meta agent's model would.
FAKE_CLAUDE = """#!PYTHON
import os, sys
prompt = sys.argv[-1]  # (after --)
assert "meta agent of an evolutionary loop" in prompt, prompt[:300]
assert "Improve the agent package `toy`" in prompt and os.environ["AGENTOS_EVAL_DIR"] in prompt
assert os.path.isfile(os.path.join(os.environ["AGENTOS_EVAL_DIR"], "gen-0", "predictions.json"))
with open("answers.txt", "a") as fh:
    fh.write("3+3=6\\n")
print("fake claude: taught the toy 3+3")
"""


def test_the_bundled_meta_agent_drives_claude_code_on_the_package(
    cli: Any, ws: Any, toy: Path, tmp_path: Path, model_api: dict[str, str]
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "claude").write_text(FAKE_CLAUDE.replace("PYTHON", sys.executable))
    (bin_dir / "claude").chmod(0o755)
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}"}

    out = cli(
        "evolve", "start", "toy", "--suite", str(toy), "--generations", "1", "--json", env=env
    )

    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    report = json.loads(out.stdout)
    assert report["meta"] == "evolve-meta@1.1.0"
    gen = report["archive"][1]
    assert (gen["verdict"], gen["score"]) == ("accept", 0.5), gen["reason"]


def test_the_same_seed_gives_the_same_parents_in_two_evolutions(cli: Any, toy: Path) -> None:
    def parents(seed: str) -> list[int | None]:
        done = evolve(
            cli, "start", "toy", "--suite", str(toy), "--meta", "fixer", "--generations", "4",
            "--select", "score_child_prop", "--seed", seed,
        )  # fmt: skip
        return [g["parent"] for g in done["archive"]]

    first, again = parents("5"), parents("5")

    assert first == again and len(first) == 5


def test_children_of_one_parent_are_made_in_parallel_and_staged_scores_are_marked(
    cli: Any, ws: Any, toy: Path
) -> None:
    (toy / "suite.yaml").write_text(
        json.dumps(
            {
                "name": "sums",
                "evaluator": {"kind": "exact", "normalize": ["strip"]},
                "staged": {"samples": 2, "min_score": 0.9},
            }
        )
    )

    done = evolve(
        cli, "start", "toy", "--suite", str(toy), "--meta", "fixer", "--generations", "2",
        "--children", "2", "--jobs", "2", "--staged",
    )  # fmt: skip

    gens = {g["gen"]: g for g in done["archive"]}
    assert [(g, gens[g]["parent"], gens[g]["round"]) for g in (1, 2)] == [(1, 0, 1), (2, 0, 1)]
    # Two of four tasks first; below 0.9 the rest never runs, and the score says so.
    for gen in gens.values():
        (split,) = gen["scores"].values()
        assert split["complete"] is False and not gen["perfect"]


def test_a_python_package_whose_entry_no_longer_imports_is_rejected(
    cli: Any, ws: Any, tmp_path: Path
) -> None:
    install(ws, tmp_path, "syntax", "echo 'def (' >> calc.py\n")
    install(ws, tmp_path, "renamer", "sed -i 's/def solve(/def solved(/' calc.py\n")
    # Importing it writes a file of the host's: confined, the write lands nowhere.
    install(ws, tmp_path, "sly", f"echo \"open('{tmp_path}/imported', 'w')\" >> calc.py\n")

    made = {}
    for meta in ("syntax", "renamer", "sly"):
        done = evolve(
            cli, "start", "calculator", "--suite", "arithmetic", "--meta", meta,
            "--generations", "1",
        )  # fmt: skip
        made[meta] = done["archive"][1]

    assert made["syntax"]["reason"].startswith(
        "smoke test: calc:solve does not import: SyntaxError"
    )
    assert made["renamer"]["reason"] == "smoke test: calc:solve is not a callable"
    assert made["sly"]["valid_parent"] is True
    assert not (tmp_path / "imported").exists()
