"""Size limits on what AgentOS reads from people and packages (issue 32, item 7): a 16 MB
card of two million keywords was accepted, and made every route slow. Each limit is refused
with one line naming the file (or the input) and the limit, exit code 2, through the real
CLI on a real workspace; nothing is left half-written.

Files over a limit are mostly sparse (``truncate``): 16 MB that are never written, and never
read, since a file is measured before it is read."""

from __future__ import annotations

import json
import os
import tarfile
from pathlib import Path

import pytest
from conftest import CliRunner, make_repo, tree_listing, write_package

from agentos.cli import _docs
from agentos.errors import BadInput
from agentos.shared import limits
from agentos.shared.limits import KB, MB
from agentos.workspace.layout import Workspace

REPO_ROOT = Path(__file__).resolve().parents[1]


def card_text(card_id: str, keywords: list[str], agent: str = "ruff-fixer", size: int = 0) -> str:
    """A valid card; ``size``: padded (its description) to exactly that many bytes."""
    text = (
        f"id: {card_id}\nagent: {agent}\ngroup: {card_id}\n"
        f"triggers:\n  keywords: [{', '.join(keywords)}]\n"
    )
    if size:
        head = "description: "
        text += head + "x" * (size - len(text) - len(head) - 1) + "\n"
        assert len(text) == size
    return text


def sparse(path: Path, head: str, size: int) -> Path:
    """``path``: ``head``, then a hole up to ``size`` bytes (nothing written)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as fh:
        fh.write(head)
        fh.truncate(size)
    return path


def routed(cli: CliRunner, request: str) -> list[str]:
    out = cli("route", request, "--json")
    assert out.returncode in (0, 1), out.stderr
    return [s["agent"] for s in json.loads(out.stdout)["selected"]]


def hub_files(ws: Workspace) -> list[str]:  # the hub's file lock is made by the first change
    return [p for p in tree_listing(ws.hub_dir) if p != ".lock"]


# --- cards ----------------------------------------------------------------------------------


def test_cards_add_refuses_a_card_over_the_limit_and_takes_one_just_at_it(
    cli: CliRunner, ws: Workspace, tmp_path: Path
) -> None:
    big = sparse(tmp_path / "big.yaml", card_text("big", ["zebrafy"]), 16 * MB)
    over = tmp_path / "over.yaml"
    over.write_text(card_text("over", ["zebrafy"], size=limits.CARD.most + 1))
    before = tree_listing(ws.cards_dir)

    refused = cli("cards", "add", str(big))
    just_over = cli("cards", "add", str(over))

    assert (refused.returncode, refused.stderr) == (
        2,
        f"error: {big}: 16.0 MB is over the 256 KB limit of a card\n",
    )
    assert (just_over.returncode, just_over.stderr) == (
        2,
        f"error: {over}: 262,145 bytes is over the 256 KB limit of a card\n",
    )
    assert tree_listing(ws.cards_dir) == before

    at = tmp_path / "at.yaml"
    at.write_text(card_text("at-limit", ["zebrafy"], size=limits.CARD.most))
    added = cli("cards", "add", str(at))
    assert added.returncode == 0, added.stderr
    assert (ws.cards_dir / "at-limit.yaml").read_bytes() == at.read_bytes()
    assert routed(cli, "please zebrafy the code") == ["ruff-fixer"]


def test_cards_lint_names_each_card_over_a_limit_and_passes_those_at_them(
    cli: CliRunner, tmp_path: Path
) -> None:
    folder = tmp_path / "cards"
    folder.mkdir()
    words = [f"k{i:04}" for i in range(1001)]
    (folder / "many.yaml").write_text(card_text("many", words[:1000]))  # at the limit
    (folder / "too-many.yaml").write_text(
        card_text("too-many", words[:600]) + f"  phrases: [{', '.join(words[600:])}]\n"
    )
    (folder / "long.yaml").write_text(
        card_text("long", ["a" * 200, "b" * 201]) + f"  regex: ['{'c' * 201}']\n"
    )
    sparse(folder / "big.yaml", card_text("big", ["zebrafy"]), 16 * MB)

    out = cli("cards", "lint", str(folder))

    assert out.returncode == 2
    assert out.stdout == (
        f"{folder / 'big.yaml'}: (root): 16.0 MB is over the 256 KB limit of a card\n"
        f"{folder / 'long.yaml'}: triggers.keywords[1]: a trigger may have at most 200 "
        "characters; this one has 201\n"
        f"{folder / 'long.yaml'}: triggers.regex[0]: a trigger may have at most 200 "
        "characters; this one has 201\n"
        f"{folder / 'too-many.yaml'}: triggers: a card may have at most 1,000 triggers; "
        "this one has 1,001\n"
        "4 card files checked: 4 errors, 0 warnings\n"
    )


def test_a_card_over_a_limit_in_the_cards_folder_stops_routing_naming_it(
    cli: CliRunner, ws: Workspace
) -> None:
    assert routed(cli, "fix the lint errors") == ["ruff-fixer"]  # the index is cached now
    big = sparse(ws.cards_dir / "big.yaml", card_text("big", ["zebrafy"]), 16 * MB)

    for args in (("route", "fix the lint errors"), ("cards", "list")):
        out = cli(*args)
        assert (out.returncode, out.stdout, out.stderr) == (
            2,
            "",
            f"error: {big}: 16.0 MB is over the 256 KB limit of a card\n",
        ), args

    big.unlink()
    many = ws.cards_dir / "many.yaml"
    many.write_text(card_text("many", [f"k{i:04}" for i in range(1001)]))
    out = cli("route", "fix the lint errors")
    assert (out.returncode, out.stderr) == (
        2,
        f"error: {many}: triggers: a card may have at most 1,000 triggers; this one has "
        "1,001 (run `agentos cards lint`)\n",
    )

    many.unlink()
    os.mkfifo(ws.cards_dir / "fifo.yaml")  # read, it would block the router for ever
    out = cli("route", "fix the lint errors", timeout=30)
    assert (out.returncode, out.stderr) == (
        2,
        f"error: {ws.cards_dir / 'fifo.yaml'}: not a regular file\n",
    )

    (ws.cards_dir / "fifo.yaml").unlink()
    assert routed(cli, "fix the lint errors") == ["ruff-fixer"]


@pytest.mark.parametrize("source", ["directory", "archive"])
def test_hub_install_of_a_package_shipping_a_card_over_the_limit_installs_nothing(
    cli: CliRunner, ws: Workspace, tmp_path: Path, source: str
) -> None:
    src = write_package(
        tmp_path / "tidy",
        name="tidy",
        files={"cards/tidy.yaml": card_text("tidy-card", ["zebrafy"], "tidy", 300 * KB)},
    )
    if source == "archive":
        packed = cli("hub", "pack", str(src), "-o", str(tmp_path / "tidy.tar.gz"))
        assert packed.returncode == 0, packed.stderr
        src = tmp_path / "tidy.tar.gz"
    before_cards, before_hub = tree_listing(ws.cards_dir), hub_files(ws)

    out = cli("hub", "install", str(src))

    assert (out.returncode, out.stderr) == (
        2,
        "error: tidy@1.0.0/cards/tidy.yaml: 300.0 KB is over the 256 KB limit of a card\n",
    )
    assert tree_listing(ws.cards_dir) == before_cards
    assert hub_files(ws) == before_hub
    listed = json.loads(cli("hub", "list", "--json").stdout)["packages"]
    assert "tidy" not in {p["name"] for p in listed}


def test_a_package_shipping_more_cards_than_the_limit_is_not_installed(
    cli: CliRunner, ws: Workspace, tmp_path: Path
) -> None:
    cards = {f"cards/c{i:03}.yaml": card_text(f"c{i:03}", ["zebrafy"], "tidy") for i in range(101)}
    src = write_package(tmp_path / "tidy", name="tidy", files=cards)
    before_cards, before_hub = tree_listing(ws.cards_dir), hub_files(ws)

    out = cli("hub", "install", str(src))

    assert (out.returncode, out.stderr) == (
        2,
        "error: tidy@1.0.0/cards: a package may have at most 100 cards; this one has 101\n",
    )
    assert (tree_listing(ws.cards_dir), hub_files(ws)) == (before_cards, before_hub)


# --- manifests, suites, workflows, settings ----------------------------------------------------


def test_a_manifest_over_the_limit_is_refused_from_a_directory_and_from_an_archive(
    cli: CliRunner, ws: Workspace, tmp_path: Path
) -> None:
    src = write_package(tmp_path / "pkg", name="bloated")
    manifest = src / "agent.yaml"
    text = manifest.read_text()
    manifest.write_text(text + "#" * (70 * KB - len(text) - 1) + "\n")  # a comment: valid
    packed = tmp_path / "pkg.tar.gz"
    with tarfile.open(packed, "w:gz") as tar:
        tar.add(src, arcname="pkg")
    before = hub_files(ws)

    from_dir = cli("hub", "install", str(src))
    from_archive = cli("hub", "install", str(packed))

    limit = "70.0 KB is over the 64 KB limit of a manifest (agent.yaml)"
    assert (from_dir.returncode, from_dir.stderr) == (2, f"error: {manifest}: {limit}\n")
    assert (from_archive.returncode, from_archive.stderr) == (
        2,
        f"error: {packed}: pkg/agent.yaml: {limit}\n",
    )
    assert hub_files(ws) == before


def test_a_suite_and_a_split_over_their_limits_are_refused_before_anything_runs(
    cli: CliRunner, ws: Workspace
) -> None:
    head = "name: big\nevaluator: {kind: exact}\n"
    big = sparse(ws.root / "evals" / "big" / "suite.yaml", head, 2 * MB)
    (big.parent / "tasks.jsonl").write_text('{"id": "t1", "input": "2+2", "expected": "4"}\n')
    wide = ws.root / "evals" / "wide"
    (wide / "suite.yaml").parent.mkdir(parents=True)
    (wide / "suite.yaml").write_text(head.replace("big", "wide"))
    split = sparse(wide / "tasks.jsonl", '{"id": "t1", "input": "2+2"}\n', 65 * MB)
    line = sparse(wide / "line.jsonl", '{"id": "t1", "input": "', 5 * MB)  # one 5 MB line

    suite = cli("eval", "run", "big", "--agent", "ruff-fixer")
    tasks = cli("eval", "run", "wide", "--agent", "ruff-fixer")
    lines = cli("eval", "run", "wide", "--split", "line", "--agent", "ruff-fixer")

    assert (suite.returncode, suite.stderr) == (
        2,
        f"error: {big}: 2.0 MB is over the 1 MB limit of an eval suite's suite.yaml\n",
    )
    assert (tasks.returncode, tasks.stderr) == (
        2,
        f"error: {split}: 65.0 MB is over the 64 MB limit of an eval suite's split (tasks.jsonl)\n",
    )
    assert (lines.returncode, lines.stderr) == (
        2,
        f"error: {line}: line 1: longer than 1048576 bytes\n",
    )
    assert not (ws.state_dir / "evals").exists() or not list((ws.state_dir / "evals").iterdir())


def test_a_workflow_over_the_limit_is_refused_naming_it(
    cli: CliRunner, ws: Workspace, tmp_path: Path
) -> None:
    big = sparse(ws.root / "workflows" / "big.yaml", "id: big\nname: big\n", 2 * MB)
    repo = make_repo(tmp_path / "repo")

    lint = cli("workflows", "lint", str(big))
    launch = cli("workflows", "launch", "big", "--repo", str(repo), "--detach")

    message = f"{big}: 2.0 MB is over the 1 MB limit of a workflow"
    assert (lint.returncode, lint.stdout) == (2, message + "\n")
    assert (launch.returncode, launch.stderr) == (2, f"error: {message}\n")


def test_settings_over_the_limit_fail_every_command_naming_the_file(
    cli: CliRunner, ws: Workspace
) -> None:
    sparse(ws.settings_file, "run: {guardian: false}\n", 2 * MB)

    out = cli("route", "fix the lint errors")

    assert (out.returncode, out.stderr) == (
        2,
        f"error: {ws.settings_file}: 2.0 MB is over the 1 MB limit of the workspace's settings "
        "(agentos.yaml)\n",
    )


# --- requests ---------------------------------------------------------------------------------

TOO_LONG = "fix the lint errors " * 3500  # 70,000 bytes
REFUSAL = "the request is too long (70,000 bytes; the limit is 65,536)"


@pytest.mark.parametrize(
    "args",
    [("route",), ("interview", "--no-input"), ("run", "--no-input", "--force")],
    ids=["route", "interview", "run"],
)
def test_a_request_over_the_limit_is_one_line_naming_it(
    cli: CliRunner, args: tuple[str, ...]
) -> None:
    out = cli(args[0], TOO_LONG, *args[1:])

    assert (out.returncode, out.stderr) == (2, f"error: REQUEST: {REFUSAL}\n")


def test_a_task_over_the_request_limit_is_refused_by_the_cli_and_the_sdk(
    cli: CliRunner, ws: Workspace, tmp_path: Path
) -> None:
    from agentos.sdk import AgentOS, Phase

    out = cli("tasks", "create", TOO_LONG, "--phase", "1", "--execution", "e1")
    assert (out.returncode, out.stderr) == (2, f"error: description: {REFUSAL}\n")

    phases = [Phase(id=1, name="one", description="do it")]
    with AgentOS(workspace=ws.root, repo=make_repo(tmp_path / "repo"), phases=phases) as aos:
        with pytest.raises(BadInput) as refused:
            aos.create_task(TOO_LONG)
        assert str(refused.value) == f"description: {REFUSAL}"
        assert aos.tasks() == []


# --- the docs ---------------------------------------------------------------------------------


def test_every_limit_is_in_the_docs_table() -> None:
    formats = (REPO_ROOT / "docs" / "formats.md").read_text()
    assert _docs.LIMITS.search(formats)
    assert f"<!-- limits -->\n{_docs.limits_table()}\n<!-- /limits -->" in formats
    for limit in limits.ALL:
        assert f"| {limit.shown} |" in formats, limit
