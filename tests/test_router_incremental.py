"""When a few cards change, the router compiles only those: the updated index decides
exactly as a whole compile of the same cards would, through every kind of change (edited in
place, renamed, added, removed, an id changed), and a change it cannot take (an invalid
card, a duplicate id) is refused with the whole compile's own error."""

from __future__ import annotations

import marshal
import os
import random
import shutil
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentos.errors import AgentOSError, ValidationFailed
from agentos.routing import router
from agentos.routing.cards import Card, load_cards
from agentos.routing.index import Hit, Index
from agentos.routing.router import decide, decide_with
from agentos.shared import limits
from agentos.workspace.layout import Workspace, init_workspace

VOCAB = [
    "lint",
    "tests",
    "fix",
    "bug",
    "docs",
    "ruff",
    "format",
    "parser",
    "crash",
    "deploy",
    "config",
    "cache",
    "build",
    "release",
    "typo",
    "login",
    "schema",
    "index",
]


def _card(rng: random.Random, card_id: str) -> dict[str, Any]:
    def pick(k: int) -> list[str]:
        return rng.sample(VOCAB, k)

    triggers: dict[str, Any] = {
        "keywords": pick(rng.randint(1, 3)),
        "phrases": [" ".join(pick(2)) for _ in range(rng.randint(0, 2))],
        "regex": rng.choice([[], [r"\bE\d{3}\b"], [rf"\b{rng.choice(VOCAB)}-\d+"], ["zz+q"]]),
        "require": pick(1) if rng.random() < 0.2 else [],
        "exclude": pick(1) if rng.random() < 0.2 else [],
    }
    return {
        "id": card_id,
        "agent": "ruff-fixer",
        "priority": rng.randint(0, 2),
        "group": f"g{rng.randint(0, 3)}",
        "min_score": rng.randint(1, 3),
        "triggers": triggers,
    }


def _requests(rng: random.Random) -> list[str]:
    out = []
    for _ in range(40):
        words = rng.sample(VOCAB, rng.randint(1, 6))
        if rng.random() < 0.3:
            words.append(rng.choice(["E501", f"{rng.choice(VOCAB)}-42", "zzzq"]))
        out.append(" ".join(words))
    return out


def _hits(index: Index, request: str) -> list[tuple[str, int, list[str], str | None]]:
    return [(index.card(h.card)[0], h.score, h.fired, h.reason) for h in index.match(request)]


def _built(files: dict[str, dict[str, Any]]) -> Index:
    cards = [Card.model_validate(data) for _, data in sorted(files.items())]
    return Index.build(cards, "rev", [(name, name) for name in sorted(files)])


def test_an_updated_index_matches_as_a_whole_build_through_every_kind_of_change() -> None:
    rng = random.Random(38)
    files = {f"c{i:03d}.yaml": _card(rng, f"c{i:03d}") for i in range(120)}
    digests = {name: f"d{name}" for name in files}  # stands for each file's content
    cards = [Card.model_validate(data) for _, data in sorted(files.items())]
    index = Index.build(cards, "rev", [(name, digests[name]) for name in sorted(files)])
    requests = _requests(rng)
    next_id = 1000
    kinds = ["edited in place", "renamed", "added", "removed", "id changed"]
    for step in range(80):
        kind = kinds[step % len(kinds)]
        name = rng.choice(sorted(files))
        removed: list[str] = []
        added: list[tuple[str, str, Card]] = []
        if kind == "edited in place":
            files[name] = _card(rng, files[name]["id"])
            removed, added = [name], [(name, f"d{step}", Card.model_validate(files[name]))]
        elif kind == "renamed":
            new = f"r{step:03d}.yaml"
            files[new] = files.pop(name)
            removed, added = [name], [(new, f"d{step}", Card.model_validate(files[new]))]
        elif kind == "added":
            next_id += 1
            new = f"n{next_id}.yaml"
            files[new] = _card(rng, f"n{next_id}")
            added = [(new, f"d{step}", Card.model_validate(files[new]))]
        elif kind == "removed":
            del files[name]
            removed = [name]
        else:
            next_id += 1
            files[name] = {**files[name], "id": f"n{next_id}"}
            removed, added = [name], [(name, f"d{step}", Card.model_validate(files[name]))]
        index = index.updated(f"rev{step}", removed, added)
        whole = _built(files)
        for request in requests:
            assert _hits(index, request) == _hits(whole, request), (kind, request)
            assert decide_with(index, request, "hub", _fixed).as_dict() == (
                decide_with(whole, request, "hub", _fixed).as_dict()
                | {"cards_revision": f"rev{step}"}
            ), (kind, request)
        # The index a new process would load from the cache is the same index.
        assert Index.loads(index.dumps()).files == index.files
    assert index.dead_rows() > 0  # updates left rows behind, and still decided alike


def _fixed(agent: str, constraint: str | None) -> str:
    return "1.0.0"


def test_an_update_that_would_clash_is_refused_so_the_whole_set_is_compiled() -> None:
    rng = random.Random(7)
    files = {f"c{i}.yaml": _card(rng, f"c{i}") for i in range(3)}
    index = _built(files)
    clash = Card.model_validate({**_card(rng, "c1"), "id": "c1"})
    with pytest.raises(ValueError, match="c1"):
        index.updated("rev2", [], [("other.yaml", "x", clash)])
    with pytest.raises(ValueError, match="files"):
        Index.build([clash], "rev").updated("rev2", [], [("a.yaml", "x", clash)])


# --- a workspace of 10,000 cards -----------------------------------------------------------


def _write(ws: Workspace, name: str, data: dict[str, Any]) -> Path:
    path = ws.cards_dir / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    """10,000 cards, each with keywords of its own (``kw<i>``) and a shared word."""
    ws, _ = init_workspace(tmp_path_factory.mktemp("big") / "ws")
    for old in ws.cards_dir.glob("*.yaml"):
        old.unlink()
    for i in range(10_000):
        (ws.cards_dir / f"card-{i:05d}.yaml").write_text(
            f"id: card-{i:05d}\nagent: ruff-fixer\ngroup: g{i:05d}\n"
            f"triggers:\n  keywords: [kw{i}, shared]\n"
        )
    return ws


def _selected(ws: Workspace, request: str) -> list[str]:
    return [s.card for s in decide(ws, request).selected]


def test_at_10000_cards_each_kind_of_change_is_seen_by_the_next_decision_compiling_only_it(
    big: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = big
    assert _selected(ws, "kw7 please") == ["card-00007"]  # compiles the whole set once
    assert _selected(ws, "kw7 please") == ["card-00007"]  # the folder is watched from here

    def no_whole_compile(_ws: Workspace) -> Index:
        raise AssertionError("the whole card set was compiled again")

    monkeypatch.setattr(router, "compile_cards", no_whole_compile)
    cards = ws.cards_dir

    # edited in place: kw7 becomes kw7b (same file)
    text = (cards / "card-00007.yaml").read_text()
    (cards / "card-00007.yaml").write_text(text.replace("kw7,", "kw7b,"))
    assert _selected(ws, "kw7 please") == []
    assert _selected(ws, "kw7b please") == ["card-00007"]

    # replaced by a rename: a new file takes card-00008's place under another name
    _write(ws, ".tmp", {"id": "card-00008", "agent": "ruff-fixer", "group": "g00008",
                        "triggers": {"keywords": ["renamedkw", "shared"]}})  # fmt: skip
    (cards / ".tmp").rename(cards / "card-08-renamed.yaml")
    (cards / "card-00008.yaml").unlink()
    assert _selected(ws, "kw8 please") == []
    assert _selected(ws, "renamedkw please") == ["card-00008"]

    # added
    _write(ws, "zz-new.yaml", {"id": "zz-new", "agent": "ruff-fixer", "group": "new",
                               "triggers": {"keywords": ["brandnew"]}})  # fmt: skip
    assert _selected(ws, "brandnew kw9") == ["card-00009", "zz-new"]

    # removed
    (cards / "card-00009.yaml").unlink()
    assert _selected(ws, "brandnew kw9") == ["zz-new"]

    # a new process (nothing in memory) updates the index the last one kept on disk
    router._INDEXES.clear()
    for state in (router._STATS, router._SCANNED, router._DELTAS, router._REVISIONS):
        state.clear()
    router._LOOKED.clear()
    text = (cards / "card-00010.yaml").read_text()
    (cards / "card-00010.yaml").write_text(text.replace("kw10,", "kw10b,"))
    assert _selected(ws, "kw10b please") == ["card-00010"]

    # every decision so far, and the final set's, equal a whole compile of the same cards
    final = decide(ws, "shared kw7b renamedkw brandnew kw9 kw10b")
    monkeypatch.undo()
    whole = load_cards(cards)
    assert len(whole.cards) == 10_000
    reference = Index.build(whole.cards, whole.revision)
    for request in ["shared kw7b renamedkw brandnew kw9 kw10b", "kw7b", "renamedkw", "kw10"]:
        got = decide(ws, request)
        want = decide_with(reference, request, got.hub_revision, lambda a, c: "1.0.0")
        assert [(s.card, s.score, s.fired) for s in got.selected] == [
            (s.card, s.score, s.fired) for s in want.selected
        ]
        assert got.cards_revision == want.cards_revision == whole.revision
    assert final.cards_revision == whole.revision


def test_an_invalid_edited_card_is_refused_as_a_whole_compile_refuses_it(
    tmp_path: Path,
) -> None:
    ws, _ = init_workspace(tmp_path / "ws")
    decide(ws, "fix the lint errors")
    decide(ws, "fix the lint errors")
    (ws.cards_dir / "fix-lint.yaml").write_text("id: fix-lint\nagent: ruff-fixer\npriority: x\n")
    with pytest.raises(ValidationFailed) as incremental:
        decide(ws, "fix the lint errors")
    with pytest.raises(ValidationFailed) as whole:
        load_cards(ws.cards_dir)
    assert str(incremental.value) == str(whole.value)
    assert "fix-lint.yaml" in str(incremental.value)


def test_a_duplicate_id_from_an_added_card_is_refused_as_a_whole_compile_refuses_it(
    tmp_path: Path,
) -> None:
    ws, _ = init_workspace(tmp_path / "ws")
    decide(ws, "fix the lint errors")
    decide(ws, "fix the lint errors")
    original = (ws.cards_dir / "fix-lint.yaml").read_text()
    (ws.cards_dir / "zz-copy.yaml").write_text(original)
    with pytest.raises(ValidationFailed) as incremental:
        decide(ws, "fix the lint errors")
    with pytest.raises(ValidationFailed) as whole:
        load_cards(ws.cards_dir)
    assert str(incremental.value) == str(whole.value)
    assert "duplicate card id 'fix-lint'" in str(incremental.value)
    (ws.cards_dir / "zz-copy.yaml").unlink()
    assert decide(ws, "fix the lint errors").decision == "route"  # and it recovers


def test_a_card_rewritten_within_the_same_second_is_still_seen(tmp_path: Path) -> None:
    """Same size, same timestamp granularity: the content tells the versions apart."""
    ws, _ = init_workspace(tmp_path / "ws")
    for old in ws.cards_dir.glob("*.yaml"):
        old.unlink()
    path = _write(ws, "a.yaml", {"id": "a", "agent": "ruff-fixer",
                                 "triggers": {"keywords": ["lint"]}})  # fmt: skip
    for _ in range(2):
        assert _selected(ws, "lint") == ["a"]
    stamp = path.stat().st_mtime_ns
    path.write_text(path.read_text().replace("lint", "ruff"))
    os.utime(path, ns=(stamp, stamp))
    assert _selected(ws, "ruff") == ["a"]
    assert _selected(ws, "lint") == []


@pytest.mark.parametrize("process", ["the same process", "a new process"])
def test_a_hidden_yaml_in_the_cards_folder_is_no_card_to_the_scan_either(
    tmp_path: Path, process: str
) -> None:
    """An editor's hidden file (`.fix.yaml`) is no card to a whole compile: the revision the
    scan computes leaves it out too, so it equals the compile's and the decision stands."""
    from agentos.routing.cards import cards_revision

    ws, _ = init_workspace(tmp_path / "ws")
    before = _selected(ws, "fix the lint errors")
    hidden = {"id": "hidden", "agent": "ruff-fixer", "triggers": {"keywords": ["lint"]}}
    _write(ws, ".draft.yaml", hidden)
    if process == "a new process":
        _as_a_new_process()

    assert router.current_revision(ws) == cards_revision(ws.cards_dir)
    assert _selected(ws, "fix the lint errors") == before


def test_hits_keep_card_id_order_after_updates() -> None:
    rng = random.Random(3)
    files = {f"c{i}.yaml": _card(rng, f"c{i}") for i in range(5)}
    index = _built(files)
    extra = Card.model_validate({**_card(rng, "c00"), "triggers": {"keywords": ["lint"]}})
    index = index.updated("r", [], [("y.yaml", "e", extra)])
    late = Card.model_validate({**_card(rng, "a-first"), "triggers": {"keywords": ["lint"]}})
    index = index.updated("r2", [], [("z.yaml", "d", late)])  # a later row, an earlier id
    hits: list[Hit] = index.match("lint")
    ids = [index.card(h.card)[0] for h in hits]
    assert ids == sorted(ids) and ids[0] == "a-first"


@pytest.mark.parametrize("kind", ["too large", "a FIFO", "a folder"])
def test_a_card_file_the_scan_refuses_is_refused_at_every_decision_not_only_the_first(
    tmp_path: Path, kind: str
) -> None:
    """A process that watches the folder refuses it as a whole compile does, every time:
    the old card is not served once the change has been seen."""
    ws, _ = init_workspace(tmp_path / "ws")
    for _ in range(2):  # the folder is watched from the second decision
        assert decide(ws, "fix the lint errors").decision == "route"
    path = ws.cards_dir / "fix-lint.yaml"
    if kind == "too large":
        path.write_bytes(path.read_bytes() + b"#" * limits.CARD.most)
    else:
        path.unlink()
        os.mkfifo(path) if kind == "a FIFO" else path.mkdir()
    with pytest.raises(AgentOSError) as whole:
        load_cards(ws.cards_dir)
    for _ in range(3):
        with pytest.raises(type(whole.value)) as seen:
            decide(ws, "fix the lint errors")
        assert str(seen.value).startswith(f"{path}: ")


def test_decisions_in_threads_of_one_process_lose_no_card_edit(tmp_path: Path) -> None:
    """The MCP server's tools and a workflow's tasks decide in threads of one process: an
    edit one thread's look at the folder took in is in every later decision."""
    ws, _ = init_workspace(tmp_path / "ws")

    padding = "#" * 64_000 + "\n"  # each card takes a while to hash: looks overlap more

    def write(i: int, word: str) -> None:
        (ws.cards_dir / f"c{i:03d}.yaml").write_text(
            f"id: c{i:03d}\nagent: ruff-fixer\ntriggers:\n  keywords: [k{i}, {word}]\n{padding}"
        )

    for i in range(400):
        write(i, "before")
    for _ in range(2):  # the folder is watched from the second look
        router.current_revision(ws)
    stop = threading.Event()
    errors: list[BaseException] = []

    def look() -> None:
        try:
            while not stop.is_set():
                router.current_revision(ws)
        except BaseException as exc:  # the test says what a thread raised
            errors.append(exc)

    threads = [threading.Thread(target=look) for _ in range(8)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch often: their looks overlap
    try:
        for t in threads:
            t.start()
        for i in range(400):  # each card edited once: an edit lost is lost for good
            write(i, "after")
    finally:
        stop.set()
        for t in threads:
            t.join()
        sys.setswitchinterval(interval)
    assert errors == []
    whole = load_cards(ws.cards_dir)
    assert router.current_revision(ws) == whole.revision
    decision = decide(ws, "k7 after")
    assert (decision.cards_revision, [s.card for s in decision.selected]) == (
        whole.revision,
        ["c007"],
    )


def _route_twice(ws: Workspace, request: str) -> list[str]:
    """What ``request`` selects, decided twice: the folder is watched from the second."""
    first = _selected(ws, request)
    assert _selected(ws, request) == first
    return first


@pytest.mark.parametrize("link", ["symlink", "hard link"])
def test_a_card_edited_through_another_name_is_seen_by_the_next_decision(
    tmp_path: Path, link: str
) -> None:
    """A watch on the cards folder hears of writes made through its own entries only: a
    card that is a link to a file elsewhere (cards kept in another folder or repository) is
    looked at again at each decision, and its edits seen as a whole compile sees them."""
    ws, _ = init_workspace(tmp_path / "ws")
    for old in ws.cards_dir.glob("*.yaml"):
        old.unlink()
    elsewhere = tmp_path / "team-cards"
    elsewhere.mkdir()
    target = elsewhere / "a.yaml"
    target.write_text("id: a\nagent: ruff-fixer\ntriggers:\n  keywords: [lint]\n")
    card = ws.cards_dir / "a.yaml"
    card.symlink_to(target) if link == "symlink" else os.link(target, card)
    assert _route_twice(ws, "lint") == ["a"]

    target.write_text("id: a\nagent: ruff-fixer\ntriggers:\n  keywords: [ruff]\n")
    assert _selected(ws, "ruff") == ["a"]
    assert _selected(ws, "lint") == []
    assert decide(ws, "ruff").cards_revision == load_cards(ws.cards_dir).revision


def test_a_cards_folder_that_is_a_link_pointed_at_another_folder_is_read_there(
    tmp_path: Path,
) -> None:
    """``routing_cards`` a link to a checkout of cards, pointed at another one (``ln -sfn
    cards-v2 routing_cards``): the next decision uses the cards it points at now."""
    ws, _ = init_workspace(tmp_path / "ws")
    versions = {}
    for version, word in (("v1", "lint"), ("v2", "ruff")):
        folder = versions[version] = tmp_path / f"cards-{version}"
        folder.mkdir()
        (folder / "a.yaml").write_text(
            f"id: a\nagent: ruff-fixer\ntriggers:\n  keywords: [{word}]\n"
        )
    shutil.rmtree(ws.cards_dir)
    ws.cards_dir.symlink_to(versions["v1"])
    assert _route_twice(ws, "lint") == ["a"]

    swap = tmp_path / "ws" / "swap"
    swap.symlink_to(versions["v2"])
    swap.rename(ws.cards_dir)  # the link replaced at once, as ln -sfn does
    assert _selected(ws, "ruff") == ["a"]
    assert _selected(ws, "lint") == []


@pytest.mark.parametrize("trigger", ["keywords", "regex"])
def test_a_trigger_holding_a_NUL_is_refused_as_the_index_cannot_keep_it(
    tmp_path: Path, trigger: str
) -> None:
    """The index keeps a card's trigger texts joined by NUL: one holding a NUL was read back
    as two (the fired trigger misnamed), and when its card was edited or removed in a process
    that routes again, the update left that text's postings to a row of no card, which then
    fired (a rejection naming no card, or an IndexError) where a whole compile has nothing."""
    ws, _ = init_workspace(tmp_path / "ws")
    (ws.cards_dir / "nul.yaml").write_text(
        f'id: nul\nagent: ruff-fixer\ntriggers:\n  {trigger}: ["fix\\0lint", "other"]\n'
    )
    with pytest.raises(ValidationFailed, match="NUL") as whole:
        load_cards(ws.cards_dir)
    with pytest.raises(ValidationFailed) as routed:
        decide(ws, "fix lint other")
    assert str(routed.value) == str(whole.value)
    assert "nul.yaml" in str(whole.value)


def _as_a_new_process() -> None:
    """Forget what this process knows of card folders, as a new process starts."""
    router._INDEXES.clear()
    for state in (router._STATS, router._SCANNED, router._DELTAS, router._REVISIONS):
        state.clear()
    router._LOOKED.clear()


@pytest.mark.parametrize("process", ["the same process", "a new process"])
def test_a_card_link_whose_file_is_gone_is_refused_as_a_whole_compile_refuses_it(
    tmp_path: Path, process: str
) -> None:
    """A card that is a link to a file that is gone cannot be read: a whole compile says so.
    The scan took it for a card removed, and the index kept on disk from before, updated
    without it, decided as if it had never been there."""
    ws, _ = init_workspace(tmp_path / "ws")
    target = tmp_path / "team-cards" / "b.yaml"
    target.parent.mkdir()
    target.write_text("id: b\nagent: ruff-fixer\ntriggers:\n  keywords: [ruff]\n")
    (ws.cards_dir / "b.yaml").symlink_to(target)
    assert _route_twice(ws, "ruff lint errors") == ["fix-lint", "b"]

    target.unlink()
    if process == "a new process":
        _as_a_new_process()
    with pytest.raises(ValidationFailed) as whole:
        load_cards(ws.cards_dir)
    for _ in range(2):
        with pytest.raises(ValidationFailed) as seen:
            decide(ws, "ruff lint errors")
        assert str(seen.value) == str(whole.value)
    assert str(whole.value).startswith(f"{ws.cards_dir / 'b.yaml'}: cannot read: No such file")


def test_a_card_edited_while_another_was_broken_is_seen_once_that_one_is_fixed(
    tmp_path: Path,
) -> None:
    """Two cards changed in one look, one of them broken: the decision fails, and once the
    broken card is put back the other card's edit is in the next decision (the look that
    saw the fix named only the fixed card; the index in memory is from before both)."""
    ws, _ = init_workspace(tmp_path / "ws")
    for old in ws.cards_dir.glob("*.yaml"):
        old.unlink()
    a = _write(ws, "a.yaml", {"id": "a", "agent": "ruff-fixer", "group": "a",
                              "triggers": {"keywords": ["lint"]}})  # fmt: skip
    b = _write(ws, "b.yaml", {"id": "b", "agent": "ruff-fixer", "group": "b",
                              "triggers": {"keywords": ["docs"]}})  # fmt: skip
    assert _route_twice(ws, "lint docs") == ["a", "b"]

    a.write_text(a.read_text().replace("lint", "ruff"))
    good = b.read_text()
    b.write_text("id: b\nagent: ruff-fixer\npriority: x\n")
    with pytest.raises(ValidationFailed, match=r"b\.yaml"):
        decide(ws, "ruff docs")
    b.write_text(good)
    assert _selected(ws, "ruff docs") == ["a", "b"]
    assert _selected(ws, "lint docs") == ["b"]
    assert decide(ws, "ruff").cards_revision == load_cards(ws.cards_dir).revision


def _kept_revisions(ws: Workspace) -> list[str]:
    """The card-set revisions of the compiled indexes kept in the workspace's cache."""
    return sorted(p.name.split("-")[1] for p in router.cache_dir(ws).glob("router-*.idx"))


@pytest.mark.parametrize(
    ("start", "steps"),
    [
        # Cards added: at most 16 are compiled alone.
        (5, [("add", 16, False), ("add", 17, True)]),
        # Cards edited: each is taken out and put in again (two changes), and leaves a row.
        (20, [("edit", 8, False), ("edit", 9, True)]),
        # Cards removed: their rows stay, empty, up to 2.5 times the limit (40).
        (
            60,
            [
                ("remove", 16, False),
                ("remove", 16, False),
                ("remove", 8, False),
                ("remove", 1, True),
            ],
        ),
        # Over 160 cards the limit is a tenth of them: 20 for 209 cards, and 50 empty rows.
        (260, [("remove", 20, False), ("remove", 20, False), ("remove", 11, True)]),
    ],
    ids=["added", "edited", "removed", "removed-of-many"],
)
def test_a_process_that_routes_again_compiles_a_few_changed_cards_alone_and_many_whole(
    tmp_path: Path, start: int, steps: list[tuple[str, int, bool]]
) -> None:
    """A process that routes again compiles only the cards that changed, in memory (it does
    not write the index of the whole set at each edit), while they are at most 16 or a tenth
    of the set and the rows removed cards left are at most 2.5 times that; past either, it
    compiles the whole set and keeps it in the cache for the next process."""
    ws, _ = init_workspace(tmp_path / "ws")
    for old in ws.cards_dir.glob("*.yaml"):
        old.unlink()

    def write(name: str, word: str) -> None:
        (ws.cards_dir / f"{name}.yaml").write_text(
            f"id: {name}\nagent: ruff-fixer\ngroup: {name}\ntriggers:\n  keywords: [{word}]\n"
        )

    live = [f"c{i:03d}" for i in range(start)]
    for name in live:
        write(name, "lint")
    assert len(_route_twice(ws, "lint")) == start
    first = load_cards(ws.cards_dir).revision
    assert _kept_revisions(ws) == [first]
    added = 0
    for step, (kind, count, whole) in enumerate(steps):
        if kind == "add":
            for _ in range(count):
                live.append(f"n{added:03d}")
                write(live[-1], "lint")
                added += 1
        elif kind == "edit":
            for name in live[:count]:
                write(name, f"lint, edit{step}")
        else:
            for name in live[:count]:
                (ws.cards_dir / f"{name}.yaml").unlink()
            live = live[count:]
        decision = decide(ws, "lint")
        revision = load_cards(ws.cards_dir).revision
        assert (decision.cards_revision, sorted(s.card for s in decision.selected)) == (
            revision,
            sorted(live),
        )
        assert _kept_revisions(ws) == ([revision] if whole else [first]), (kind, count)


def test_a_new_process_hashes_again_no_card_the_last_one_hashed(tmp_path: Path) -> None:
    """The stats and sha256 of each card are kept in the cache (``cards.stat``): a new
    process whose cards did not change takes them from there, hashes none and leaves the
    file as it is; a card changed since is hashed again, and the file rewritten."""
    ws, _ = init_workspace(tmp_path / "ws")
    # A card changed less than 2 s before it was hashed is hashed again ("racy clean").
    time.sleep(2.1)
    first = decide(ws, "fix the lint errors")
    stat_file = router.cache_dir(ws) / "cards.stat"
    kept = os.stat(stat_file)
    _as_a_new_process()
    assert decide(ws, "fix the lint errors").as_dict() == first.as_dict()
    assert os.stat(stat_file).st_ino == kept.st_ino  # not written again

    path = ws.cards_dir / "fix-lint.yaml"
    path.write_text(path.read_text().replace("lint", "ruff"))
    _as_a_new_process()
    assert decide(ws, "fix the ruff errors").cards_revision == load_cards(ws.cards_dir).revision
    assert os.stat(stat_file).st_ino != kept.st_ino

    # Entries of another shape (here one field short) are not taken: the cards are hashed
    # again.
    folder, entries = marshal.loads(stat_file.read_bytes())
    for spoilt in (
        (folder, {n: e[:5] for n, e in entries.items()}),
        (folder,),
        (folder, 5),
        (folder, "not pairs"),
    ):
        stat_file.write_bytes(marshal.dumps(spoilt))
        _as_a_new_process()
        revision = decide(ws, "fix the ruff errors").cards_revision
        assert revision == load_cards(ws.cards_dir).revision


def _own_group(ws: Workspace, card_id: str, **triggers: list[str]) -> Path:
    """Card ``card_id``, in a group of its own, written to ``<card_id>.yaml``."""
    data = {"id": card_id, "agent": "ruff-fixer", "group": card_id, "triggers": triggers}
    return _write(ws, f"{card_id}.yaml", data)


def test_cards_changed_between_new_processes_are_seen_through_the_index_each_one_kept(
    tmp_path: Path,
) -> None:
    """A new process updates the newest index kept on disk with the cards changed since and
    keeps it for the next one: a card removed (with its phrase), then another edited (to
    take that phrase), then one added, each is seen by the next new process as a whole
    compile of the same cards sees it."""
    ws, _ = init_workspace(tmp_path / "ws")
    for old in ws.cards_dir.glob("*.yaml"):
        old.unlink()
    _own_group(ws, "a", keywords=["lint"], phrases=["lint errors"])
    _own_group(ws, "b", keywords=["docs"])
    _own_group(ws, "c", keywords=["tests", "errors"])  # "lint errors" is filed under "lint"
    request = "the lint errors of the docs and tests, a typo"
    assert _selected(ws, request) == ["a", "c", "b"]
    steps: list[tuple[Callable[[], object], list[str]]] = [
        ((ws.cards_dir / "a.yaml").unlink, ["c", "b"]),
        (lambda: _own_group(ws, "b", keywords=["typo"], phrases=["lint errors"]), ["b", "c"]),
        (lambda: _own_group(ws, "d", keywords=["docs"]), ["b", "c", "d"]),
    ]
    for change, selected in steps:
        change()
        _as_a_new_process()
        decision = decide(ws, request)
        whole = load_cards(ws.cards_dir)
        reference = Index.build(whole.cards, whole.revision)
        want = decide_with(reference, request, decision.hub_revision, _fixed)
        assert decision.as_dict() == want.as_dict()
        assert [s.card for s in decision.selected] == selected
        assert _kept_revisions(ws) == [whole.revision]  # kept for the next process


def test_regexes_new_to_the_card_set_are_matched_after_an_update_as_after_a_whole_compile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A card edited in a process that routes again, and one added, bring regexes no card
    had: one with a literal every match holds (run only on requests holding it) and one
    without (run on every request). The next decisions, compiling only those cards, match
    them as a whole compile of the same cards does."""
    ws, _ = init_workspace(tmp_path / "ws")
    for old in ws.cards_dir.glob("*.yaml"):
        old.unlink()
    _own_group(ws, "a", keywords=["lint"])
    _own_group(ws, "b", keywords=["docs"], regex=[r"\bE\d{3}\b"])
    assert _route_twice(ws, "lint docs") == ["a", "b"]

    def no_whole_compile(_ws: Workspace) -> Index:
        raise AssertionError("the whole card set was compiled again")

    monkeypatch.setattr(router, "compile_cards", no_whole_compile)
    _own_group(ws, "a", keywords=["lint"], regex=[r"\bTICKET-\d+", r"\d{5}"])
    _own_group(ws, "c", regex=[r"\d{5}", r"\bE\d{3}\b"])
    requests = {
        "see TICKET-12": ["a"],
        "port 12345": ["a", "c"],
        "TICKET-7 and 99999 and E501": ["a", "c", "b"],
        "lint the docs": ["a", "b"],
        "nothing here": [],
    }
    got = {request: decide(ws, request) for request in requests}
    monkeypatch.undo()
    whole = load_cards(ws.cards_dir)
    reference = Index.build(whole.cards, whole.revision)
    for request, selected in requests.items():
        want = decide_with(reference, request, got[request].hub_revision, _fixed)
        assert got[request].as_dict() == want.as_dict(), request
        assert [s.card for s in got[request].selected] == selected, request
