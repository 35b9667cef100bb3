"""An attempt's commits back from a node as a git bundle, taken into the user's repository
and checked before anything points to them (agentos.cluster.bundles.take_back): real
repositories, no Ray. A node is not trusted: every bundle below that it could forge is
refused, and a refused bundle leaves no object behind."""

from __future__ import annotations

import hashlib
import struct
import zlib
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


def objects_of(repo: Path) -> set[str]:
    listed = git(repo, "cat-file", "--batch-all-objects", "--batch-check=%(objectname)")
    return set(listed.split())


def refused(driver: Path, data: bytes, head: str, start: str, match: str | None = None) -> None:
    """``data`` is refused, and the driver's repository holds no object more than before."""
    before = objects_of(driver)
    with pytest.raises(VerifyFailed, match=match):
        bundles.take_back(driver, data, BRANCH, head, start)
    assert objects_of(driver) == before


def pack_of(*entries: tuple[int, int, bytes, bytes]) -> bytes:
    """A pack as a node could forge it: (type, size, what follows the entry's header before
    its data (a delta's base), its zlib data) for each entry, and the pack's checksum."""
    body = b"PACK" + struct.pack(">II", 2, len(entries))
    for kind, size, before, data in entries:
        header, byte, size = [], (kind << 4) | (size & 15), size >> 4
        while size:
            header.append(byte | 0x80)
            byte, size = size & 0x7F, size >> 7
        body += bytes([*header, byte]) + before + data
    return body + hashlib.sha1(body).digest()


@pytest.mark.parametrize("files", [1, 150], ids=["a one-line change", "150 new files"])
def test_an_attempts_commits_are_taken_and_listed_and_no_ref_moves(
    repos: tuple[Path, Path, str], files: int
) -> None:
    driver, node, start = repos
    first = commit(node, {"app.py": "print(2)\n"}, "fix")
    tip = commit(node, {f"new{i}.txt": f"{i}\n" for i in range(files)}, "more")
    data = bundles.create(node, BRANCH, left_out=[start]).data
    # A small attempt is checked in a quarantine by git's own unpacking; a large one goes
    # through git bundle unbundle.
    assert (bundles._small_bundle(data) is None) == (files > 100)
    refs = git(driver, "for-each-ref")

    assert bundles.take_back(driver, data, BRANCH, tip, start) == [first, tip]
    assert git(driver, "for-each-ref") == refs  # what points to the commits is the caller's
    assert git(driver, "show", f"{tip}:app.py") == "print(2)"
    assert git(driver, "fsck", "--connectivity-only", tip) == ""


def test_a_pack_changed_or_cut_on_its_way_is_refused(repos: tuple[Path, Path, str]) -> None:
    driver, node, start = repos
    tip = commit(node, {"app.py": "print(2)\n"}, "fix")
    data = bundles.create(node, BRANCH, left_out=[start]).data
    flipped = bytearray(data)
    flipped[-30] ^= 0xFF  # a byte of the pack: its checksum no longer matches

    refused(driver, bytes(flipped), tip, start, "does not take")
    refused(driver, data[:-30], tip, start, "does not take")
    refused(driver, data + b"more", tip, start, "after its pack")


def test_commits_on_a_history_the_driver_never_had_are_refused(
    repos: tuple[Path, Path, str],
) -> None:
    driver, node, start = repos
    hidden = commit(node, {"app.py": "print('never sent')\n"}, "not in the bundle")
    tip = commit(node, {"README.md": "# on top\n"}, "on top")
    data = bundles.create(node, BRANCH, left_out=[hidden]).data  # needs what the driver lacks

    refused(driver, data, tip, start)


def test_a_ref_the_bundle_names_but_does_not_carry_is_refused(
    repos: tuple[Path, Path, str],
) -> None:
    driver, node, start = repos
    tip = commit(node, {"app.py": "print(2)\n"}, "fix")
    data = bundles.create(node, BRANCH, left_out=[start]).data
    other = "1" * 40  # a commit no repository has
    forged = data.replace(tip.encode(), other.encode(), 1)

    refused(driver, forged, other, start, "cannot walk")
    refused(driver, data, other, start, "not 1111")  # the node says another head


def test_a_commit_that_does_not_descend_from_the_start_is_refused(
    repos: tuple[Path, Path, str],
) -> None:
    driver, node, start = repos
    git(node, "checkout", "-q", "--orphan", "elsewhere")
    unrelated = commit(node, {"app.py": "print('unrelated')\n"}, "no parent")
    git(node, "branch", "-f", BRANCH.removeprefix("refs/heads/"), unrelated)

    refused(driver, bundles.create(node, BRANCH).data, unrelated, start, "does not descend")


def test_a_commit_whose_tree_nobody_has_is_refused(repos: tuple[Path, Path, str]) -> None:
    driver, _, start = repos
    body = (
        f"tree {'2' * 40}\nparent {start}\nauthor a <a@a> 1 +0000\n"
        "committer a <a@a> 1 +0000\n\nbroken\n"
    ).encode()
    head = hashlib.sha1(b"commit %d\0" % len(body) + body).hexdigest()
    pack = pack_of((1, len(body), b"", zlib.compress(body)))
    data = f"# v2 git bundle\n-{start} x\n{head} {BRANCH}\n\n".encode() + pack

    refused(driver, data, head, start)


def test_deltas_that_inflate_to_far_more_than_the_bundle_are_refused(
    repos: tuple[Path, Path, str],
) -> None:
    # Each delta names a base nobody sends and inflates to 8 MB: a small bundle (held by
    # git's unpacking in memory until its base comes) stays under 64 KiB, so its deltas
    # stay under ~64 MB; a larger one is streamed by git bundle unbundle.
    driver, _, start = repos
    bomb = zlib.compress(b"\0" * (8 << 20), 9)
    for count in (4, 12):
        deltas = [(7, 8 << 20, bytes.fromhex(f"{i + 1:040x}"), bomb) for i in range(count)]
        head = "3" * 40
        data = f"# v2 git bundle\n-{start} x\n{head} {BRANCH}\n\n".encode() + pack_of(*deltas)
        assert (bundles._small_bundle(data) is None) == (len(data) > 64 * 1024)
        refused(driver, data, head, start, "does not take")
