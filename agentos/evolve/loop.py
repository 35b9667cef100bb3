"""The evolve loop: select a parent, let the meta agent change it, check it, score it,
archive it; until the generations are spent or the best is perfect.

An evolution lives in ``.agentos/evolve/<evo>/`` (see :mod:`agentos.evolve.archive`): a git
repository of the package's source (``repo/``: branch ``gen-0`` is the installed package,
every generation ``gen-<n>`` a branch from its parent's commit), the records, and
``evals/gen-<n>/`` with each generation's **training** eval (its report and predictions):
the folder the meta agent is shown as ``$AGENTOS_EVAL_DIR``. Validation scores, when the
suite has a ``val`` split, choose parents and are never shown to it.

One generation:

1. a worktree of the evolution's repository at the parent's commit;
2. the meta agent (a hub package) runs there, confined as any agent (the suite's folder
   hidden, the training evals readable), with the rendered prompt as its request; what it
   leaves is committed;
3. it is **rejected** (invalid, never a parent) when it changed nothing, changed the
   suite's files (they are put back), changed anything but the package's own files (a
   gate check), or fails the smoke test: the manifest loads, names the same
   package, keeps the runtime, ``env`` and ``sandbox`` of the package it started from
   (a generation may not widen what it is allowed), and its entry imports;
4. else the eval harness scores it on the training split (staged with ``--staged``), then on
   the validation split if there is one; it is **accepted** when it beats its parent and
   passes the suite's threshold, else **refined** (valid, still a candidate parent).

Each generation gets ``metadata.json``, ``patch.diff`` and a ``generation`` receipt; then a
snapshot is appended to ``archive.jsonl``. A process killed at any point loses only the
generations it had not finished: ``resume`` removes what they left and makes them again,
under the same numbers.

Starting an evolution is :mod:`agentos.evolve.start`; judging a generation (the checks that
reject it, the evals that score it) :mod:`agentos.evolve.judge`; the meta agent's request and
the suite's files it may not keep :mod:`agentos.evolve.meta`; the records
:mod:`agentos.evolve.archive`.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from agentos.errors import AgentOSError, Conflict, OperationFailed
from agentos.evals.harness import EvalCancelled
from agentos.evals.suite import BUNDLED, Suite, load_suite
from agentos.evolve import judge
from agentos.evolve.archive import (
    Evolution,
    Generation,
    Verdict,
    gen_number,
    write_json_model,
)
from agentos.evolve.meta import render_prompt, restore, snapshot
from agentos.evolve.selection import Candidate, select_parent
from agentos.evolve.start import commit
from agentos.hub.manifest import load_manifest
from agentos.hub.store import Hub
from agentos.receipts import write_receipt
from agentos.run.oneshot import run_once
from agentos.run.store import pid_alive, process_start
from agentos.runtimes import ready_package
from agentos.sandbox import choose
from agentos.sandbox.confine import Scene
from agentos.shared.fs import atomic_write, sha256_bytes
from agentos.workspace.files import AgentFiles
from agentos.worktrees import repo as wt

DYING_WAIT = 10.0  # seconds a resume waits for a killed driver's lock to be let go


class Evolver:
    """Drives one evolution in this process until it is done or cancelled."""

    def __init__(
        self,
        evo: Evolution,
        *,
        cancel: threading.Event | None = None,
        say: Callable[[str], None] | None = None,
    ) -> None:
        self.evo, self.ws = evo, evo.ws
        self.spec = evo.spec()
        self.cancel = cancel or threading.Event()
        self.say = say or (lambda _line: None)
        self.suite: Suite = load_suite(Path(self.spec.suite))
        hub = Hub(self.ws.hub_dir)
        self.initial_info, self.initial = ready_package(
            hub, f"{self.spec.package}@{self.spec.version}", "PACKAGE"
        )
        meta_info, self.meta = ready_package(hub, self.spec.meta, "--meta")
        self.meta_dir = meta_info.path
        self.sandbox = choose(self.ws.settings.sandbox)
        self.lock = threading.Lock()  # the archive is appended by one thread at a time

    def run(self) -> str:
        """Drive the evolution until it stops; why it stopped (one line)."""
        with self._exclusive():
            self.evo.set_state("running", pid=os.getpid(), pid_start=process_start(os.getpid()))
            try:
                reason = self._loop()
            except BaseException as exc:
                self.evo.set_state("failed", reason=str(exc) or type(exc).__name__)
                raise
            finally:
                with suppress(AgentOSError):
                    wt.run_git(self.evo.repo, "worktree", "prune")
            status = "cancelled" if self.cancel.is_set() else "finished"
            self.evo.set_state(status, reason=reason)
            return reason

    @contextmanager
    def _exclusive(self) -> Iterator[None]:
        """One process drives an evolution; the lock dies with it (kill -9 included)."""
        with (self.evo.root / "lock").open("a") as fh:
            deadline = time.monotonic() + DYING_WAIT
            while True:
                try:
                    fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    state = self.evo.state()
                    pid = state.get("pid")
                    # A process killed while its threads were in the kernel shows as a
                    # zombie before its last thread has closed its files (the lock among
                    # them): that lock is going, wait for it.
                    if pid_alive(pid, state.get("pid_start")) or time.monotonic() > deadline:
                        raise Conflict(
                            f"evolution {self.evo.id} is already running (pid {pid})",
                            field="EVO",
                        ) from None
                    time.sleep(0.05)
            yield

    def _loop(self) -> str:
        gens = self._reconcile()
        if 0 not in gens:
            initial = self._initial()
            if initial is None:
                return "cancelled before the initial generation was scored"
            gens = self._archive(gens, initial)
        while True:
            if self.cancel.is_set():
                return "cancelled"
            made = len(gens) - 1
            best = max(gens.values(), key=lambda g: (g.score or 0.0, g.gen))
            if best.perfect:
                return f"generation {best.gen} reached a perfect score ({best.score:g})"
            if made >= self.spec.generations:
                return f"made {made} generation(s), as asked"
            round_no = max(g.round for g in gens.values()) + 1
            choice = select_parent(
                self.spec.select, _candidates(gens), f"{self.spec.seed}:{round_no}"
            )
            parent = gens[choice.parent]
            count = min(self.spec.children, self.spec.generations - made)
            first = max(gens) + 1
            self.say(
                f"round {round_no}: parent {parent.gen} (score {parent.score:g}); "
                f"making generation(s) {first}..{first + count - 1}"
            )
            with ThreadPoolExecutor(max_workers=min(self.spec.jobs, count)) as pool:
                futures = [
                    pool.submit(self._child, gen, parent, round_no, choice.as_dict())
                    for gen in range(first, first + count)
                ]
                for fut in as_completed(futures):
                    child = fut.result()
                    if child is not None:
                        gens = self._archive(gens, child)
                        self.say(
                            f"generation {child.gen} (parent {child.parent}): {child.verdict}"
                            f" - {child.reason}"
                        )

    def _archive(self, gens: dict[int, Generation], gen: Generation) -> dict[int, Generation]:
        with self.lock:
            gens = {**gens, gen.gen: gen}
            self.evo.archive.append(gens)
            return dict(sorted(gens.items()))

    def _reconcile(self) -> dict[int, Generation]:
        """What a killed process left: decided generations the archive lost are appended
        again; unfinished ones (no metadata) leave nothing behind, their numbers free."""
        gens = self.evo.generations()
        if gens != self.evo.archive.read():
            self.evo.archive.append(gens)
        for folder in self.evo.root.glob("gen-*"):
            gen = gen_number(folder.name)
            if gen is not None and gen not in gens:
                shutil.rmtree(folder, ignore_errors=True)
        for folder in self.evo.evals.glob("gen-*"):
            gen = gen_number(folder.name)
            if gen is not None and gen not in gens:
                shutil.rmtree(folder, ignore_errors=True)
        shutil.rmtree(self.evo.root / "work", ignore_errors=True)
        wt.run_git(self.evo.repo, "worktree", "prune")
        branches = wt.run_git(self.evo.repo, "branch", "--format=%(refname:short)").split()
        for branch in branches:
            gen = gen_number(branch)
            if gen is not None and gen not in gens and gen != 0:
                wt.run_git(self.evo.repo, "branch", "-q", "-D", branch)
        return gens

    # -- one generation ---------------------------------------------------------------------

    def _initial(self) -> Generation | None:
        started = time.time()
        folder = self.evo.gen_dir(0)
        folder.mkdir(parents=True, exist_ok=True)
        package = (self.initial, Path(self.initial_info.path))
        try:
            scores = judge.score(self, 0, package)
        except EvalCancelled:
            return None
        commit = wt.rev(self.evo.repo, "gen-0") or ""
        return self._decide(
            Generation(
                gen=0,
                parent=None,
                round=0,
                verdict="initial",
                reason="the package as installed",
                valid_parent=True,
                commit=commit,
                started_at=started,
                ended_at=time.time(),
                **scores,
            )
        )

    def _child(
        self, gen: int, parent: Generation, round_no: int, selection: dict[str, Any]
    ) -> Generation | None:
        """Generation ``gen`` from ``parent``; None when cancelled (nothing of it is kept)."""
        started = time.time()
        folder, tree = self.evo.gen_dir(gen), self.evo.worktree(gen)
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        tree.parent.mkdir(parents=True, exist_ok=True)
        wt.run_git(
            self.evo.repo, "worktree", "add", "-q", "-b", f"gen-{gen}", str(tree), parent.commit
        )
        base: dict[str, Any] = {
            "gen": gen,
            "parent": parent.gen,
            "round": round_no,
            "selection": selection,
            "started_at": started,
        }
        try:
            suite_before = snapshot(self.suite.root)
            meta = self._run_meta(gen, parent, tree, max(0, self.spec.generations - gen))
            if meta.get("limit") == "cancelled":
                self._forget(gen)
                return None
            tampered = restore(self.suite.root, suite_before)
            # Before any git command there: the meta agent may have pointed the worktree's
            # .git file at a repository of its own (its config, its filters).
            if wt.restore_gitfile(self.evo.repo, tree):
                tampered_git = "the meta agent rewrote the worktree's .git file (put back)"
            else:
                tampered_git = None
            message = f"generation {gen} (parent {parent.gen})"
            unsaved = None
            try:
                commit = _commit_work(tree, parent.commit, message)
            except OperationFailed as exc:  # e.g. an empty repository left in the worktree
                commit, unsaved = None, f"its work could not be committed: {exc}"
            base |= {"meta": meta, "commit": commit or parent.commit}
            problem = tampered_git or unsaved or judge.invalid(self, tree, parent, commit, tampered)
            if commit:
                base |= self._patch(gen, parent.commit, commit)
            if problem is not None:
                return self._decide(
                    Generation(
                        verdict="reject",
                        reason=problem,
                        valid_parent=False,
                        ended_at=time.time(),
                        **base,
                    )
                )
            wt.run_git(tree, "clean", "-ffdqx")  # what is scored is the commit, no more
            manifest = load_manifest(tree)
            try:
                scores = judge.score(self, gen, (manifest, tree))
            except EvalCancelled:
                self._forget(gen)
                return None
        finally:
            # The worktree's administration is pruned when the run ends (one git call, not
            # one per generation); its branch keeps the commit.
            shutil.rmtree(tree, ignore_errors=True)
            shutil.rmtree(folder / "run", ignore_errors=True)  # the meta agent's env file
        better = parent.score is None or (scores["score"] or 0.0) > parent.score
        passed = all(s.get("passed") for s in scores["scores"].values())
        verdict: Verdict = "accept" if better and passed else "refine"
        reason = (
            f"scores {scores['score']:g}, {'above' if better else 'not above'} its parent's "
            f"{parent.score:g}" + ("" if passed else ", below the suite's threshold")
        )
        return self._decide(
            Generation(
                verdict=verdict,
                reason=reason,
                valid_parent=True,
                ended_at=time.time(),
                **base,
                **scores,
            )
        )

    def _run_meta(self, gen: int, parent: Generation, tree: Path, left: int) -> dict[str, Any]:
        folder = self.evo.gen_dir(gen)
        self.evo.evals.mkdir(exist_ok=True)
        scene = Scene(
            self.ws.settings.sandbox,
            self.ws.root,
            self.evo.repo,
            Path(os.environ.get("HOME", "/")),
            extra_reads=(self.evo.evals,),
            also_hidden=(self.suite.root.resolve(), BUNDLED.resolve()),
        )
        started = time.monotonic()
        done = run_once(
            self.ws,
            self.sandbox,
            scene,
            self.meta,
            self.meta_dir,
            run_id=f"{self.evo.id}-gen-{gen}",
            workdir=tree,
            request=render_prompt(self.spec, self.suite, parent, left, self.evo.evals),
            files=AgentFiles(folder / "run", folder / "meta.log"),
            timeout=float(self.meta.timeout),
            env={
                "AGENTOS_EVAL_DIR": str(self.evo.evals),
                "AGENTOS_EVOLVE_ID": self.evo.id,
                "AGENTOS_EVOLVE_GENERATION": str(gen),
                "AGENTOS_EVOLVE_PARENT": str(parent.gen),
                "AGENTOS_EVOLVE_PARENT_SCORE": f"{parent.score or 0.0:g}",
            },
            cancel=self.cancel,
        )
        # seconds: the whole run (its sandbox made and removed), not only its process's
        return {
            "exit_code": done.exit_code,
            "seconds": round(time.monotonic() - started, 3),
            "limit": done.limit,
        }

    def _patch(self, gen: int, parent_commit: str, commit: str) -> dict[str, Any]:
        """The change as a patch, and the lines it changes (one git call gives both)."""
        out = wt.run_git(
            self.evo.repo, "diff", "--binary", "--numstat", "-p", parent_commit, commit
        )
        start = out.find("diff --git ")
        numstat, patch = (out, "") if start < 0 else (out[:start], out[start:])
        atomic_write(self.evo.gen_dir(gen) / "patch.diff", patch)
        lines = sum(
            int(n) for row in numstat.splitlines() for n in row.split("\t")[:2] if n.isdigit()
        )
        return {"patch_sha256": sha256_bytes(patch.encode()), "lines_changed": lines}

    def _decide(self, gen: Generation) -> Generation:
        """The generation's metadata and receipt: from here on it is decided."""
        from agentos.run.events import record

        folder = self.evo.gen_dir(gen.gen)
        folder.mkdir(parents=True, exist_ok=True)
        write_json_model(folder / "metadata.json", gen)
        record(
            self.ws,
            "evolve",
            "generation",
            f"evolution {self.evo.id} generation {gen.gen}: {gen.verdict} - {gen.reason}",
            run=self.evo.id,
            status=gen.verdict,
        )
        write_receipt(
            self.ws,
            "generation",
            {
                "evolution": self.evo.id,
                "package": self.spec.package,
                "generation": gen.gen,
                "parent": gen.parent,
                "verdict": gen.verdict,
                "reason": gen.reason,
                "score": gen.score,
                "commit": gen.commit,
                "patch_sha256": gen.patch_sha256,
                "selection": gen.selection,
            },
            run_id=self.evo.id,
        )
        return gen

    def _forget(self, gen: int) -> None:
        """A cancelled generation leaves nothing (its number is free again)."""
        with suppress(AgentOSError):
            wt.run_git(self.evo.repo, "worktree", "remove", "--force", str(self.evo.worktree(gen)))
        with suppress(AgentOSError):
            wt.run_git(self.evo.repo, "branch", "-q", "-D", f"gen-{gen}")
        shutil.rmtree(self.evo.gen_dir(gen), ignore_errors=True)
        shutil.rmtree(self.evo.evals / f"gen-{gen}", ignore_errors=True)


def _commit_work(tree: Path, parent_commit: str, message: str) -> str | None:
    """Commit what the meta agent left; the commit, or None when it changed nothing (its
    tree is its parent's)."""
    wt.run_git(tree, "add", "-A")
    commit(tree, message)
    head, tree_id, parent_tree = wt.run_git(
        tree, "rev-parse", "HEAD", "HEAD^{tree}", f"{parent_commit}^{{tree}}"
    ).split()
    return None if tree_id == parent_tree else head


def _candidates(gens: dict[int, Generation]) -> list[Candidate]:
    """Valid generations with their scores and children; with none, the initial one."""
    children = {g: 0 for g in gens}
    for g in gens.values():
        if g.parent is not None:
            children[g.parent] = children.get(g.parent, 0) + 1
    valid = [
        Candidate(g.gen, g.score or 0.0, children[g.gen])
        for g in gens.values()
        if g.valid_parent and g.score is not None
    ]
    return valid or [Candidate(0, gens[0].score or 0.0, children[0])]


def install_signal_handlers(cancel: threading.Event) -> None:
    """SIGTERM and SIGINT stop the evolution cleanly (the generation under way is
    dropped, its number free again)."""

    def stop(_signum: int, _frame: object) -> None:
        cancel.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
