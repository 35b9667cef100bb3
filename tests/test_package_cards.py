"""Cards that come with a package (its cards/ folder), and hand-written cards added with
`agentos cards add`: through the real CLI, on a real workspace."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from conftest import CliRunner, tree_listing, write_package

from agentos.workspace.layout import Workspace


def card(card_id: str, agent: str, *keywords: str) -> str:
    return yaml.safe_dump(
        {
            "id": card_id,
            "agent": agent,
            "description": f"route to {agent}",
            "group": agent,
            "triggers": {"keywords": list(keywords)},
        }
    )


def package(tmp_path: Path, version: str, cards: dict[str, str], name: str = "tidy") -> Path:
    return write_package(
        tmp_path / "src" / f"{name}-{version}",
        name=name,
        version=version,
        files={f"cards/{file}": text for file, text in cards.items()},
    )


def routed(cli: CliRunner, request: str) -> list[str]:
    out = cli("route", request, "--json")
    assert out.returncode in (0, 1), out.stderr
    return [s["agent"] for s in json.loads(out.stdout)["selected"]]


def test_a_packages_cards_come_and_go_with_it(
    cli: CliRunner, ws: Workspace, tmp_path: Path
) -> None:
    v1 = package(tmp_path, "1.0.0", {"tidy.yaml": card("tidy-card", "tidy", "zebrafy")})
    v2 = package(tmp_path, "2.0.0", {"tidy.yaml": card("tidy-card", "tidy", "quokkafy")})

    installed = cli("hub", "install", str(v1), "--json")
    assert installed.returncode == 0, installed.stderr
    assert json.loads(installed.stdout)["cards_written"] == ["tidy--tidy.yaml"]
    assert (ws.cards_dir / "tidy--tidy.yaml").read_text() == (v1 / "cards/tidy.yaml").read_text()
    assert routed(cli, "please zebrafy the code") == ["tidy"]

    assert cli("hub", "install", str(v2)).returncode == 0  # the new version's cards
    assert routed(cli, "please zebrafy the code") == []
    assert routed(cli, "please quokkafy the code") == ["tidy"]

    back = cli("hub", "use", "tidy@1.0.0", "--json")
    assert json.loads(back.stdout)["cards_written"] == ["tidy--tidy.yaml"]
    assert routed(cli, "please zebrafy the code") == ["tidy"]

    assert cli("hub", "remove", "tidy@1.0.0").returncode == 0  # 2.0.0 active again
    assert routed(cli, "please quokkafy the code") == ["tidy"]
    gone = cli("hub", "remove", "tidy@2.0.0", "--json")
    assert json.loads(gone.stdout)["cards_removed"] == ["tidy--tidy.yaml"]
    assert not [p for p in ws.cards_dir.iterdir() if p.name.startswith("tidy--")]
    assert routed(cli, "please quokkafy the code") == []


def test_a_package_whose_cards_are_wrong_is_not_installed(
    cli: CliRunner, ws: Workspace, tmp_path: Path
) -> None:
    cases = {
        "routes elsewhere": (
            {"x.yaml": card("x-card", "ruff-fixer", "zebrafy")},
            "error: tidy@1.0.0/cards/x.yaml: agent: routes to 'ruff-fixer': a package's "
            "cards route to the package itself ('tidy')",
        ),
        "invalid": (
            {"x.yaml": "id: x-card\nagent: tidy\nsize: 3\ntriggers: {keywords: [x]}\n"},
            "error: tidy@1.0.0/cards/x.yaml: size: unknown field",
        ),
        "taken id": (
            {"x.yaml": card("fix-lint", "tidy", "zebrafy")},
            "error: tidy@1.0.0/cards/x.yaml: id: card id 'fix-lint' is already the id of "
            f"{ws.cards_dir}/fix-lint.yaml",
        ),
    }

    def hub_files() -> list[str]:  # the hub's file lock (.lock) is made by the first change
        return [p for p in tree_listing(ws.hub_dir) if p != ".lock"]

    before_cards, before_hub = tree_listing(ws.cards_dir), hub_files()
    for label, (cards, message) in cases.items():
        src = package(tmp_path / label.replace(" ", "-"), "1.0.0", cards)
        out = cli("hub", "install", str(src))

        assert out.returncode == 2, (label, out.stderr)
        assert len(out.stderr.splitlines()) == 1 and message in out.stderr, (label, out.stderr)
        assert "Traceback" not in out.stderr
        assert tree_listing(ws.cards_dir) == before_cards, label
        assert hub_files() == before_hub, label


def test_a_failed_upgrade_leaves_the_version_that_was_active(
    cli: CliRunner, ws: Workspace, tmp_path: Path
) -> None:
    good = package(tmp_path, "1.0.0", {"tidy.yaml": card("tidy-card", "tidy", "zebrafy")})
    bad = package(tmp_path, "2.0.0", {"tidy.yaml": card("fix-lint", "tidy", "zebrafy")})
    assert cli("hub", "install", str(good)).returncode == 0

    assert cli("hub", "install", str(bad)).returncode == 2

    listed = json.loads(cli("hub", "list", "--json").stdout)["packages"]
    assert [(p["version"], p["active"]) for p in listed if p["name"] == "tidy"] == [("1.0.0", True)]
    assert routed(cli, "please zebrafy the code") == ["tidy"]


def test_cards_add_checks_a_hand_written_card_and_refuses_a_taken_id(
    cli: CliRunner, ws: Workspace, tmp_path: Path
) -> None:
    mine = tmp_path / "mine.yaml"
    mine.write_text(card("my-card", "ruff-fixer", "wombatize"))

    added = cli("cards", "add", str(mine), "--json")

    assert added.returncode == 0, added.stderr
    assert json.loads(added.stdout) == {
        "id": "my-card",
        "agent": "ruff-fixer",
        "file": str(ws.cards_dir / "my-card.yaml"),
        "replaced": False,
    }
    assert routed(cli, "wombatize it") == ["ruff-fixer"]

    again = cli("cards", "add", str(mine))
    assert again.returncode == 2
    assert again.stderr == (
        f"error: {mine}: id: card id 'my-card' is already the id of "
        f"{ws.cards_dir / 'my-card.yaml'}; --force replaces it\n"
    )
    mine.write_text(card("my-card", "test-runner", "wombatize"))
    forced = cli("cards", "add", str(mine), "--force")
    assert forced.returncode == 0 and "replaced" in forced.stdout
    assert routed(cli, "wombatize it") == ["test-runner"]

    before = tree_listing(ws.cards_dir)
    broken = tmp_path / "broken.yaml"
    for text, message in (
        ("id: [\n", "broken.yaml: "),
        ("id: b\nagent: ruff-fixer\ncolour: red\ntriggers: {keywords: [x]}\n", "colour"),
    ):
        broken.write_text(text)
        out = cli("cards", "add", str(broken))
        assert out.returncode == 2 and len(out.stderr.splitlines()) == 1, out.stderr
        assert message in out.stderr and "Traceback" not in out.stderr
    missing = cli("cards", "add", str(tmp_path / "nope.yaml"))
    assert (missing.returncode, missing.stderr) == (
        2,
        f"error: {tmp_path / 'nope.yaml'}: no such card file\n",
    )
    assert tree_listing(ws.cards_dir) == before


def test_cards_add_never_replaces_a_packages_card(
    cli: CliRunner, ws: Workspace, tmp_path: Path
) -> None:
    src = package(tmp_path, "1.0.0", {"tidy.yaml": card("tidy-card", "tidy", "zebrafy")})
    assert cli("hub", "install", str(src)).returncode == 0
    mine = tmp_path / "mine.yaml"
    mine.write_text(card("tidy-card", "ruff-fixer", "zebrafy"))

    out = cli("cards", "add", str(mine), "--force")

    assert out.returncode == 2
    assert "card id 'tidy-card' belongs to package 'tidy'" in out.stderr
    assert routed(cli, "zebrafy") == ["tidy"]
