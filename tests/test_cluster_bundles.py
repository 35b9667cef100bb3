"""An attempt's commits back from a node as a git bundle, taken into the user's repository
and checked before anything points to them (agentos.cluster.bundles): real repositories,
no Ray. The driver trusts nothing a node sends but what git and these checks prove."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import git, make_repo

from agentos.cluster import bundles
from agentos.errors import VerifyFailed

BRANCH = "refs/heads/agentos/run-1/coder"


def commit(repo: Path, files: dict[str, str], message: str) -> str:
    for rel, text in files.items():
        (repo / rel).write_text(text)
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=n", "-c", "user.email=n@n", "commit", "-qm", message)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture
def repos(tmp_path: Path) -> tuple[Path, Path, str]:
    """The user's repository and a node's clone of it, both at the attempt's start."""
    driver = make_repo(tmp_path / "driver", {"app.py": "print(1)\n", "README.md": "# r\n"})
    node = tmp_path / "node"
    git(tmp_path, "clone", "-q", str(driver), str(node))
    start = git(driver, "rev-parse", "HEAD")
    git(node, "checkout", "-q", "-b", BRANCH.removeprefix("refs/heads/"))
    return driver, node, start


def refs_of(repo: Path) -> str:
    return git(repo, "for-each-ref", "--format=%(refname) %(objectname)")


@pytest.mark.parametrize("files", [1, 150], ids=["a one-line change", "150 new files"])
def test_an_attempts_commits_are_taken_and_listed_and_no_ref_moves(
    repos: tuple[Path, Path, str], files: int
) -> None:
    driver, node, start = repos
    first = commit(node, {"app.py": "print(2)\n"}, "fix")
    tip = commit(node, {f"new{i}.txt": f"{i}\n" for i in range(files)}, "more")
    out = bundles.create(node, BRANCH, left_out=[start])
    # A small attempt is unpacked by one git process; a large one goes through git bundle.
    assert (bundles._small_bundle(out.data) is None) == (files > 100)
    before = refs_of(driver)

    assert bundles.unbundle(driver, out.data) == {BRANCH: tip}
    assert bundles.descendants(driver, start, tip) == [first, tip]
    assert refs_of(driver) == before  # what points to the commits is the driver's to decide
    assert git(driver, "show", f"{tip}:app.py") == "print(2)"


def test_a_pack_changed_on_its_way_is_refused(repos: tuple[Path, Path, str]) -> None:
    driver, node, start = repos
    commit(node, {"app.py": "print(2)\n"}, "fix")
    data = bytearray(bundles.create(node, BRANCH, left_out=[start]).data)
    data[-30] ^= 0xFF  # a byte of the pack (its checksum no longer matches)

    with pytest.raises(VerifyFailed, match="does not take the bundle"):
        bundles.unbundle(driver, bytes(data))


def test_commits_on_a_history_the_driver_never_had_are_refused(
    repos: tuple[Path, Path, str],
) -> None:
    driver, node, start = repos
    hidden = commit(node, {"app.py": "print('never sent')\n"}, "not in the bundle")
    tip = commit(node, {"README.md": "# on top\n"}, "on top")
    data = bundles.create(node, BRANCH, left_out=[hidden]).data  # needs what the driver lacks

    with pytest.raises(VerifyFailed):
        bundles.unbundle(driver, data)
        bundles.descendants(driver, start, tip)


def test_a_ref_the_bundle_names_but_does_not_carry_is_refused(
    repos: tuple[Path, Path, str],
) -> None:
    driver, node, start = repos
    commit(node, {"app.py": "print(2)\n"}, "fix")
    data = bundles.create(node, BRANCH, left_out=[start]).data
    other = "1" * 40  # a commit no repository has
    forged = data.replace(git(node, "rev-parse", "HEAD").encode(), other.encode(), 1)

    assert bundles.unbundle(driver, forged) == {BRANCH: other}  # the header says so...
    with pytest.raises(VerifyFailed, match="cannot walk"):
        bundles.descendants(driver, start, other)  # ...and git has no such commit


def test_a_commit_that_does_not_descend_from_the_start_is_refused(
    repos: tuple[Path, Path, str],
) -> None:
    driver, node, start = repos
    git(node, "checkout", "-q", "--orphan", "elsewhere")
    unrelated = commit(node, {"app.py": "print('unrelated')\n"}, "no parent")
    git(node, "branch", "-f", BRANCH.removeprefix("refs/heads/"), unrelated)

    data = bundles.create(node, BRANCH).data
    assert bundles.unbundle(driver, data) == {BRANCH: unrelated}
    with pytest.raises(VerifyFailed, match="does not descend"):
        bundles.descendants(driver, start, unrelated)
