"""Commits between the driver and a node, as git bundles: no shared file system, no git server.

Out: the commit an attempt starts from (the run's base, or the agent's last attempt), as a
bundle of the agent's branch that leaves out what the nodes are known to hold (so that,
once a node has a repository, a run sends only the commits it lacks). A node that lacks a
prerequisite says so, and gets the whole history once.

On the node: one cache clone per repository (``git init``, never ``--shared``: no
alternates, nothing read from the driver's disk), which keeps every commit it received
under ``refs/agentos/have/`` so that later bundles stay small. Worktrees are made from it.

Back: the attempt's commits, from the commit it started at to the one its gate judged: a
bundle of a few KB for a small change, whatever the size of the repository. The driver
takes it into the user's repository and checks that its tip is the commit the gate judged
and descends from the commit the attempt started at, before anything points to it.
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from agentos.errors import OperationFailed, VerifyFailed
from agentos.shared.fs import atomic_write
from agentos.worktrees import repo as wt

HAVE_PREFIX = "refs/agentos/have/"  # on a node: every commit it received, kept reachable
KNOWN_KEPT = 16  # commits the driver remembers the nodes hold, per repository
_SHA = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")


class NeedHistory(Exception):
    """The node lacks a prerequisite of the bundle it was sent: send it the whole history."""


@dataclass(frozen=True)
class Outgoing:
    """A bundle of ``ref`` at ``tip``, without what ``left_out`` reaches (empty: whole)."""

    data: bytes
    ref: str
    tip: str
    left_out: tuple[str, ...]


def _sha(text: str) -> str:
    sha = text.strip()
    if not _SHA.match(sha):
        raise OperationFailed(f"not a commit id: {sha[:80]!r}")
    return sha


def create(repo: Path, ref: str, left_out: Iterable[str] = ()) -> Outgoing:
    """A bundle of ``ref`` (a full ref name) without the history of ``left_out``; the
    whole history when that fails (a commit left out is not in ``repo``, or nothing would
    be left in the bundle)."""
    tip = _sha(wt.run_git(repo, "rev-parse", "--verify", f"{ref}^{{commit}}"))
    left = tuple(c for c in left_out if c != tip)
    with tempfile.TemporaryDirectory(prefix="agentos-bundle-") as tmp:
        out = Path(tmp) / "out.bundle"
        result = wt.git_result(
            repo, "bundle", "create", "-q", str(out), ref, *(f"^{c}" for c in left), check=False
        )
        if result.returncode != 0 and left:
            left = ()
            result = wt.git_result(repo, "bundle", "create", "-q", str(out), ref, check=False)
        if result.returncode != 0:
            said = (result.stderr or result.stdout).strip() or "(nothing on stderr or stdout)"
            raise OperationFailed(
                f"git bundle create {ref} failed in {repo} (exit {result.returncode}): {said}"
            )
        return Outgoing(out.read_bytes(), ref, tip, left)


def take(repo: Path, data: bytes, ref: str, into: str) -> str:
    """Fetch ``ref`` of the bundle ``data`` into ``repo`` as ``into``; the commit it is.
    :class:`VerifyFailed` when git does not take it here (a prerequisite this repository
    lacks among the reasons: :func:`receive` tells that case apart). Git checks the
    bundle's prerequisites and every object as it fetches."""
    with tempfile.TemporaryDirectory(prefix="agentos-bundle-") as tmp:
        path = Path(tmp) / "in.bundle"
        path.write_bytes(data)
        with wt.repo_lock(repo):
            fetched = wt.git_result(
                repo,
                # The node's cache clone is AgentOS's alone: no one else's git keeps it
                # packed, so its fetches keep git's own maintenance (AgentOS's git commands
                # turn it off in the user's repositories).
                "-c",
                "maintenance.auto=true",
                "fetch",
                "-q",
                "--no-tags",
                "--no-write-fetch-head",
                str(path),
                f"+{ref}:{into}",
                check=False,
            )
        if fetched.returncode != 0:
            why = fetched.stderr.strip().splitlines()
            raise VerifyFailed(f"git does not take the bundle: {why[-1] if why else '?'}")
    return _sha(wt.run_git(repo, "rev-parse", "--verify", f"{into}^{{commit}}"))


def take_back(repo: Path, data: bytes, ref: str, head: str, start: str) -> list[str]:
    """An attempt's commits, sent back from a node as the bundle ``data``, into ``repo``
    once checked: the bundle's ``ref`` is ``head``, which descends from ``start`` through
    the commits returned (oldest first) alone. No ref moves: what points to them is the
    caller's to decide. :class:`VerifyFailed` when any of it does not hold.

    A small bundle (:func:`_small_bundle`: an attempt's few commits) is unpacked into a
    quarantine first, an object folder of its own whose alternate is ``repo``'s objects,
    and checked there (git's strict unpacking: every object well formed, every object it
    links to there; then the walk); only then is it unpacked into ``repo``. A refused one
    leaves nothing behind. Three short git processes, against ``git bundle unbundle``'s two
    (it starts ``index-pack``), which takes anything else."""
    small = _small_bundle(data)
    if small is None:
        # Git reads every ref while it checks a bundle, the HEAD of every worktree too: a
        # worktree another run of this repository is adding (its merge's) has a HEAD that
        # is not yet a commit ("bad object worktrees/_merge/HEAD"), so a bundle is taken
        # while the repository is held, as worktrees are added.
        with wt.repo_lock(repo):
            refs = _unbundle(repo, data)
        return _walked(repo, refs, ref, head, start)
    refs, pack = small
    with tempfile.TemporaryDirectory(prefix="agentos-quarantine-") as quarantine:
        objects = wt.git_dir(repo) / "objects"
        env = {"GIT_OBJECT_DIRECTORY": quarantine, "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(objects)}
        _unpack(repo, pack, "--strict", env=env)
        listed = _walked(repo, refs, ref, head, start, env)
    _unpack(repo, pack)
    return listed


def _walked(
    repo: Path,
    refs: dict[str, str],
    ref: str,
    head: str,
    start: str,
    env: dict[str, str] | None = None,
) -> list[str]:
    fetched = refs.get(ref)
    if fetched != head:
        raise VerifyFailed(f"the bundle holds {fetched} as {ref}, not {head}")
    return descendants(repo, start, head, env)


def _unpack(repo: Path, pack: bytes, *options: str, env: dict[str, str] | None = None) -> None:
    out = wt.git_bytes(repo, "unpack-objects", "-q", *options, data=pack, env=env)
    if out.returncode != 0:
        why = out.stderr.decode("utf-8", "replace").strip().splitlines()
        raise VerifyFailed(f"git does not take the bundle's pack: {why[-1] if why else '?'}")
    if out.stdout:  # git passes on what follows the pack's checksum
        raise VerifyFailed(f"the bundle holds {len(out.stdout)} bytes after its pack")


def _unbundle(repo: Path, data: bytes) -> dict[str, str]:
    """The objects of the bundle ``data`` into ``repo`` by ``git bundle unbundle``; the refs
    it carries, name -> commit."""
    with tempfile.TemporaryDirectory(prefix="agentos-bundle-") as tmp:
        path = Path(tmp) / "in.bundle"
        path.write_bytes(data)
        out = wt.git_result(repo, "bundle", "unbundle", str(path), check=False)
    if out.returncode != 0:
        why = out.stderr.strip().splitlines()
        raise VerifyFailed(f"git does not take the bundle: {why[-1] if why else '?'}")
    refs = {}
    for line in out.stdout.splitlines():
        sha, _, name = line.strip().partition(" ")
        if name:
            refs[name] = _sha(sha)
    return refs


_UNPACK_LIMIT = 100  # git's transfer.unpackLimit: fewer objects are unpacked, not kept
# At most this many bytes: what the quarantine's unpacking holds in memory (deltas waiting
# for their base) stays within ~1,000 times it (zlib's best ratio); a larger bundle (an
# agent that adds a large file) goes to git bundle unbundle, which streams.
_SMALL_BYTES = 64 * 1024
_BUNDLE_V2 = b"# v2 git bundle\n"
_PREREQUISITE = re.compile(r"-[0-9a-f]{40}(?: .*)?")
_REF_NAME = re.compile(r"refs/[^\x00-\x20\x7f]+")


def _small_bundle(data: bytes) -> tuple[dict[str, str], bytes] | None:
    """A v2 bundle's refs and pack, when it is small (fewer than :data:`_UNPACK_LIMIT`
    objects, at most :data:`_SMALL_BYTES`) and its header reads as git writes it; None for
    anything else (git reads it then, and says what it refuses)."""
    if len(data) > _SMALL_BYTES or not data.startswith(_BUNDLE_V2):
        return None
    header, blank, pack = data[len(_BUNDLE_V2) :].partition(b"\n\n")
    if not blank or pack[:4] != b"PACK" or len(pack) < 12:
        return None
    if int.from_bytes(pack[8:12], "big") >= _UNPACK_LIMIT:
        return None
    refs = {}
    for line in header.decode("utf-8", "surrogateescape").split("\n"):
        if _PREREQUISITE.fullmatch(line):  # one the walk finds in repo, or fails on
            continue
        sha, _, name = line.partition(" ")
        if not _SHA.match(sha) or len(sha) != 40 or not _REF_NAME.fullmatch(name):
            return None
        refs[name] = sha
    return refs, pack


def descendants(repo: Path, start: str, tip: str, env: dict[str, str] | None = None) -> list[str]:
    """The commits ``start..tip``, oldest first, when ``tip`` descends from ``start`` through
    them alone (each one's parents are ``start`` or listed before it); else
    :class:`VerifyFailed` (a commit ``repo`` lacks among the reasons). One git process
    (``env``: a quarantine's object folder)."""
    walked = wt.git_result(
        repo, "rev-list", "--reverse", "--parents", f"{start}..{tip}", check=False, env=env
    )
    if walked.returncode != 0:
        why = walked.stderr.strip().splitlines()
        raise VerifyFailed(f"git cannot walk {start[:12]}..{tip[:12]}: {why[-1] if why else '?'}")
    out = walked.stdout
    seen = {start}
    listed = []
    for line in out.splitlines():
        commit, *parents = (_sha(word) for word in line.split())
        if not parents or any(p not in seen for p in parents):
            raise VerifyFailed(f"{commit[:12]} does not descend from {start[:12]} alone")
        seen.add(commit)
        listed.append(commit)
    if not listed or listed[-1] != tip:
        raise VerifyFailed(f"{tip[:12]} does not descend from {start[:12]}")
    return listed


def has_commit(repo: Path, commit: str) -> bool:
    result = wt.git_result(repo, "cat-file", "-e", f"{commit}^{{commit}}", check=False)
    return result.returncode == 0


def commits_between(repo: Path, start: str, tip: str) -> list[str]:
    """The commits ``start..tip``, oldest first."""
    out = wt.run_git(repo, "rev-list", "--reverse", f"{start}..{tip}")
    return [_sha(line) for line in out.splitlines() if line.strip()]


# --- the node's cache clone ---------------------------------------------------------------


def cache_clone(path: Path) -> Path:
    """The node's clone of one repository (made empty the first time): a plain ``git
    init``, whose objects are its own (no alternates)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):  # the node's attempts of one repository at once
        if not (path / ".git" / "HEAD").is_file():
            path.mkdir(exist_ok=True)
            subprocess.run(
                ["git", "init", "-q", "-b", "agentos-cache", str(path)],
                check=True,
                capture_output=True,
                env=wt.git_env(),
            )
            # Agents' worktrees are made from it; nothing is ever checked out in it.
            wt.run_git(path, "config", "gc.auto", "0")
    exclude = path / ".git" / "info" / "exclude"
    if wt.AGENT_FILES_GLOB not in _lines(exclude):  # as in the user's repository
        exclude.parent.mkdir(parents=True, exist_ok=True)
        with exclude.open("a") as fh:
            fh.write(
                f"# AgentOS: context and feedback files in agent worktrees\n{wt.AGENT_FILES_GLOB}\n"
            )
    return path


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text().splitlines()
    except OSError:
        return []


def receive(cache: Path, data: bytes, ref: str, tip: str) -> str:
    """A bundle of ``ref`` at ``tip`` from the driver into the cache clone, kept under
    ``refs/agentos/have/``."""
    try:
        got = take(cache, data, ref, HAVE_PREFIX + tip)
        if got != tip:
            raise VerifyFailed(f"the bundle holds {got}, not {tip}")
        return got
    except VerifyFailed as exc:
        # Most often a commit the bundle leaves out that this clone lacks (it is new to
        # the repository, or its cache was removed): the whole history, then.
        raise NeedHistory(str(exc)) from None


# --- what the driver knows the nodes hold ------------------------------------------------


class Known:
    """Commits of one repository each node has reported holding (by Ray node id): a bundle
    to the nodes leaves out what every node seen so far holds
    (``.agentos/cluster/known/<repository>.json`` of the driver). A node never seen, or one
    whose cache was removed, asks for the whole history once."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def nodes(self) -> dict[str, list[str]]:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict):
            return {}
        return {
            str(node): [c for c in commits if isinstance(c, str) and _SHA.match(c)][:KNOWN_KEPT]
            for node, commits in data.items()
            if isinstance(commits, list)
        }

    def common(self) -> list[str]:
        """What every node seen holds, newest first."""
        nodes = list(self.nodes().values())
        if not nodes:
            return []
        return [c for c in nodes[0] if all(c in other for other in nodes[1:])]

    def add(self, node: str, commit: str) -> None:
        with self._lock:
            nodes = self.nodes()
            held = nodes.get(node, [])
            if held and held[0] == commit:
                return
            nodes[node] = [commit, *(c for c in held if c != commit)][:KNOWN_KEPT]
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(self.path, json.dumps(nodes))
