"""The tests check: the base's tests judge the agent's code, test by test.

SWE-bench's rule, kept deterministic and local. For a tree to judge (an agent's commit, or a
working tree with ``agentos gate run``) and the commit it started from (the base):

1. **The base's collection** is the list of expected tests: the repository's own test command
   at the base, in a scratch worktree, with the recorder (``agentos/gate/site/_agentos_gate.py``)
   listing what it would run and running nothing. No code of the agent has run in that
   process. It is kept in the workspace's cache by base commit and test command.
2. **Findings**: the diff from base to tree, read for what weakens the tests
   (:mod:`agentos.gate.findings`). Each refuses the check unless allowed.
3. **The judged run**: the tree with the base's test files, conftests, runner configuration
   and import hooks put back (a tree made with git's plumbing, checked out in a scratch
   worktree: nothing is written into the agent's), run with the repository's own command,
   confined, with the recorder writing each test's outcome outside the tree.
4. **The agent's new tests** (ids the base did not collect) run in a scratch worktree of
   the tree as it is; they must pass.
5. **At the base again**, only the expected tests that did not pass in the judged run, to
   learn how they did before (a base skip may stay a skip; a base failure may stay one when
   the request is about other tests: a known failure).

The check passes when no finding stands, every process of the judged run sealed its records
and nothing tampered with the runner, and every expected test ends at least as well as at
the base. When the runner cannot be recorded at all (no Python test runner in reach), the
exit code decides and the receipt says ``evidence: exit code only``.
"""

from __future__ import annotations

import fcntl
import fnmatch
import hashlib
import json
import shlex
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from agentos.gate import findings as fd
from agentos.gate.records import FAILING, PASSING, Records, new_nonce, read_records
from agentos.gate.trees import Entry, Scratch, commit_tree, compose, entries, tree_of
from agentos.shared import process
from agentos.shared.fs import atomic_write
from agentos.worktrees.repo import git_result as git

if TYPE_CHECKING:
    from agentos.gate.repo import RepoProfile

RECORDER = "_agentos_gate"
CACHE_VERSION = 4
EVIDENCE_RECORDS = "per-test records"
EVIDENCE_EXIT = "exit code only"
_SHOWN = 10  # tests listed by name in a message before "and N more"

# (command, tree, env, timeout, writable paths, network) -> what it did, confined.
Shell = Callable[[str, Path, dict[str, str], float, Sequence[Path], bool], process.Outcome]
# The environment the repository's tests get in a tree (agentos.gate.environment.gate_environment).
Environment = Callable[[Path], dict[str, str]]


@dataclass(frozen=True)
class TestChanges:
    """The test changes the user allowed: none, all, or those under some paths."""

    everything: bool = False
    paths: tuple[str, ...] = ()
    why: str = ""  # who allowed them: "--allow-test-changes", "the request: ...", ...

    def allows(self, path: str) -> bool:
        if self.everything:
            return True
        path = path.split("::", 1)[0]
        return any(
            path == p.rstrip("/")
            or path.startswith(p.rstrip("/") + "/")
            or fnmatch.fnmatch(path, p)
            for p in self.paths
        )

    @property
    def any(self) -> bool:
        return self.everything or bool(self.paths)

    def joined(self, other: TestChanges) -> TestChanges:
        if not other.any:
            return self
        if not self.any:
            return other
        return TestChanges(
            self.everything or other.everything,
            tuple(dict.fromkeys((*self.paths, *other.paths))),
            "; ".join(w for w in (self.why, other.why) if w),
        )

    def as_dict(self) -> dict[str, object]:
        return {"everything": self.everything, "paths": list(self.paths), "why": self.why}


@dataclass(frozen=True)
class Judging:
    """What a tests check is judged against, beyond the tree itself."""

    base: str  # the commit the tree started from
    scratch: Path  # AgentOS's own directory for scratch trees and records (never the tree)
    cache: Path | None = None  # where base collections are kept between checks
    named: tuple[str, ...] = ()  # the tests, files and symbols the request names
    allow: TestChanges = field(default_factory=TestChanges)


@dataclass
class Verdict:
    """How one tests check judged a tree: everything the receipt and the agent are told."""

    passed: bool
    evidence: str
    outcome: process.Outcome  # the judged run's command
    summary: list[str] = field(default_factory=list)  # lines for the agent and the person
    findings: list[fd.Finding] = field(default_factory=list)
    base_tests: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    regressions: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    still_failing: list[str] = field(default_factory=list)
    known_failures: list[str] = field(default_factory=list)
    new_tests: dict[str, str] = field(default_factory=dict)
    tampered: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    allowed: TestChanges = field(default_factory=TestChanges)
    exit_only_reason: str = ""

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "evidence": self.evidence,
            "base_tests": self.base_tests,
            "counts": dict(sorted(self.counts.items())),
            "findings": [f.as_dict() for f in self.findings],
        }
        for name in (
            "regressions",
            "missing",
            "still_failing",
            "known_failures",
            "tampered",
            "problems",
        ):
            value = getattr(self, name)
            if value:
                out[name] = _capped(value)
        if self.new_tests:
            out["new_tests"] = dict(sorted(self.new_tests.items())[:50])
        if self.allowed.any:
            out["test_changes_allowed"] = self.allowed.as_dict()
        if self.exit_only_reason:
            out["why_exit_code_only"] = self.exit_only_reason
        return out


def _capped(items: list[str], limit: int = 50) -> list[str]:
    return items if len(items) <= limit else [*items[:limit], f"... and {len(items) - limit} more"]


def _listing(items: list[str]) -> str:
    shown = ", ".join(items[:_SHOWN])
    return shown + (f" and {len(items) - _SHOWN} more" if len(items) > _SHOWN else "")


# --- the base's collection -----------------------------------------------------------------


@dataclass
class BaseInfo:
    """The base's tests as its own command collects them (None: the runner left no records:
    the exit code is all there is), and what is known of their outcomes there."""

    collected: list[dict[str, str | None]] | None
    plugins: list[str]
    collect_errors: list[str]
    outcomes: dict[str, str]
    exit_code: int | None
    tail: str
    hooks: list[str] = field(default_factory=list)  # the tree's import hooks and tracers
    changed: list[str] = field(default_factory=list)  # what changed in the runner there

    @property
    def ids(self) -> list[str]:
        return [str(t["id"]) for t in self.collected or []]

    def file_of(self) -> dict[str, str | None]:
        return {str(t["id"]): t.get("file") for t in self.collected or []}

    def test_files(self) -> frozenset[str]:
        """The files that define the base's tests (not doctests in source modules)."""
        return frozenset(
            str(t["file"])
            for t in self.collected or []
            if t.get("file") and t.get("kind") not in ("DoctestItem", "DoctestTextfile")
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "version": CACHE_VERSION,
            "collected": self.collected,
            "plugins": self.plugins,
            "collect_errors": self.collect_errors,
            "outcomes": self.outcomes,
            "exit_code": self.exit_code,
            "tail": self.tail,
            "hooks": self.hooks,
            "changed": self.changed,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BaseInfo | None:
        if data.get("version") != CACHE_VERSION:
            return None
        return cls(
            data.get("collected"),
            list(data.get("plugins") or []),
            list(data.get("collect_errors") or []),
            dict(data.get("outcomes") or {}),
            data.get("exit_code"),
            str(data.get("tail") or ""),
            list(data.get("hooks") or []),
            list(data.get("changed") or []),
        )


def recorder_env(
    env: dict[str, str],
    records: Path,
    nonce: str,
    tree: Path,
    *,
    mode: str = "run",
    only: Path | None = None,
    skip: Path | None = None,
) -> dict[str, str]:
    """``env`` with the recorder on: its directory, its key, the tree under test, pytest's
    plugin, no bytecode or cache written; a PYTEST_ADDOPTS or PYTEST_PLUGINS of anyone
    else's gone."""
    out = {k: v for k, v in env.items() if k not in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS")}
    out.update(
        {
            "AGENTOS_GATE_DIR": str(records),
            "AGENTOS_GATE_NONCE": nonce,
            "AGENTOS_GATE_TREE": str(tree),
            "AGENTOS_GATE_MODE": mode,
            "PYTEST_PLUGINS": RECORDER,
            # pytest's cache outside the tree (a sandbox moves it to its own /tmp).
            "PYTEST_ADDOPTS": f"-o cache_dir={records / 'pytest-cache'}",
            # (Bytecode an agent committed is a finding and is not in the judged tree.)
            "PYTHONDONTWRITEBYTECODE": "1",
        }
    )
    for name in ("AGENTOS_GATE_ONLY", "AGENTOS_GATE_EXCEPT"):
        out.pop(name, None)
    if only is not None:
        out["AGENTOS_GATE_ONLY"] = str(only)
    if skip is not None:
        out["AGENTOS_GATE_EXCEPT"] = str(skip)
    return out


def test_command(profile: RepoProfile, args: Sequence[str], workdir: Path | None) -> str:
    """The repository's test command for a recorded run: tox is told to pass the recorder's
    variables into its environments and to keep them in ``workdir`` (outside the tree)."""
    if profile.runner != "tox" or "{args}" in profile.test:
        return profile.test_command(args)
    extra = [
        *(
            f"-x testenv.pass_env+={name}"
            for name in ("AGENTOS_GATE_*", "PYTHONPATH", "PYTEST_PLUGINS", "PYTEST_ADDOPTS")
        ),
        *(["--workdir", shlex.quote(str(workdir))] if workdir else []),
    ]
    command = f"{profile.test} {' '.join(extra)}"
    return f"{command} -- {shlex.join(args)}" if args else command


def cache_key(profile: RepoProfile, base: str) -> str:
    data = json.dumps(
        [
            CACHE_VERSION,
            base,
            profile.test,
            profile.runner,
            str(profile.python),
            sorted(profile.env.items()),
        ]
    )
    return hashlib.sha256(data.encode()).hexdigest()[:32]


# --- judging -------------------------------------------------------------------------------


class TestsJudge:
    """Judges trees of one repository against one base; one per gate, so that the base's
    collection and the scratch base tree serve every tests check of it."""

    def __init__(
        self,
        profile: RepoProfile,
        judging: Judging,
        shell: Shell,
        environment: Environment,
    ) -> None:
        self.profile = profile
        self.judging = judging
        self.shell = shell
        self.environment = environment
        self.repo = profile.repo
        self.allow = judging.allow
        self.nonce = new_nonce()
        self._runs = 0
        self._base: BaseInfo | None = None
        self._base_tree: Scratch | None = None
        self._scratches: list[Scratch] = []
        judging.scratch.mkdir(parents=True, exist_ok=True)
        # This judge's own directory: its trees and records, removed by close().
        self.dir = Path(tempfile.mkdtemp(prefix="judge-", dir=judging.scratch))

    # -- scratch trees and recorded runs

    def _scratch(self, name: str, commit: str) -> Scratch:
        self._runs += 1
        scratch = Scratch(self.repo, self.dir / f"{name}-{self._runs}", commit)
        self._scratches.append(scratch)
        from agentos.gate.repo import prepare_worktree

        prepare_worktree(self.profile, scratch.path)
        return scratch

    def close(self) -> None:
        for scratch in self._scratches:
            scratch.remove()
        self._scratches.clear()
        self._base_tree = None
        shutil.rmtree(self.dir, ignore_errors=True)

    def _recorded(
        self,
        tree: Path,
        args: Sequence[str],
        timeout: float,
        *,
        mode: str = "run",
        only: Sequence[str] | None = None,
        skip: Sequence[str] | None = None,
    ) -> tuple[process.Outcome, Records]:
        self._runs += 1
        records = self.dir / f"records-{self._runs}"
        records.mkdir(parents=True, exist_ok=True)
        only_file = skip_file = None  # inside the records directory: the check can read it
        if only is not None:
            only_file = records / "only.txt"
            atomic_write(only_file, "".join(f"{t}\n" for t in only), durable=False)
        if skip is not None:
            skip_file = records / "except.txt"
            atomic_write(skip_file, "".join(f"{t}\n" for t in skip), durable=False)
        env = recorder_env(
            self.environment(tree),
            records,
            self.nonce,
            tree,
            mode=mode,
            only=only_file,
            skip=skip_file,
        )
        workdir = None
        writable: list[Path] = [records]
        network = False
        if self.profile.runner in ("tox", "nox"):
            workdir = self.dir / f"{self.profile.runner}-envs"
            if self.judging.cache is not None:
                workdir = (
                    self.judging.cache / f"{self.profile.runner}-{cache_key(self.profile, '')}"
                )
            workdir.mkdir(parents=True, exist_ok=True)
            # They build the package from the tree (in a scratch tree of AgentOS's: it may),
            # and their environments, outside it, from an index.
            writable += [workdir, tree]
            network = True
        command = test_command(self.profile, args, workdir)
        with _environments_lock(workdir):
            outcome = self.shell(command, tree, env, timeout, writable, network)
        return outcome, read_records(records, self.nonce)

    # -- the base

    def base(self, timeout: float) -> BaseInfo:
        """The base's collection: from the cache, or collected now in a scratch tree."""
        if self._base is not None:
            return self._base
        cache_file = self._cache_file()
        if cache_file is not None and cache_file.is_file():
            try:
                cached = BaseInfo.from_json(json.loads(cache_file.read_text()))
            except (OSError, ValueError):
                cached = None
            if cached is not None:
                self._base = cached
                return cached
        tree = self._base_scratch()
        outcome, records = self._recorded(tree, (), timeout, mode="collect")
        collected = None
        if records.any:
            collected = [
                {"id": c.id, "file": c.file, "kind": c.kind, "code": c.code}
                for c in records.collected
            ]
        info = BaseInfo(
            collected,
            records.plugins,
            [
                f"{p} - {m.strip().splitlines()[-1] if m.strip() else 'error'}"
                for p, m in records.collect_errors
            ],
            {},
            outcome.exit_code,
            outcome.tail[-2000:],
            records.hooks,
            records.changed,
        )
        self._base = info
        if collected is not None or outcome.exit_code == 0:
            self._save()  # not a command that failed: it would fail the same way again
        return info

    def _cache_file(self) -> Path | None:
        if self.judging.cache is None:
            return None
        return self.judging.cache / f"base-{cache_key(self.profile, self.judging.base)}.json"

    def _save(self) -> None:
        path = self._cache_file()
        if path is None or self._base is None:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, json.dumps(self._base.as_json()))

    def _base_scratch(self) -> Path:
        if self._base_tree is None:
            self._base_tree = self._scratch("base", self.judging.base)
        return self._base_tree.path

    def base_outcomes(self, ids: list[str], timeout: float) -> dict[str, str]:
        """How ``ids`` ended at the base: known ones from the cache, the rest run now (one
        judge at a time per base: the agents of a run gate in parallel)."""
        info = self._base
        assert info is not None
        with _base_lock(self._cache_file()):
            return self._base_outcomes(info, ids, timeout)

    def _base_outcomes(self, info: BaseInfo, ids: list[str], timeout: float) -> dict[str, str]:
        cache_file = self._cache_file()
        if cache_file is not None and cache_file.is_file():  # another judge may have run them
            try:
                cached = BaseInfo.from_json(json.loads(cache_file.read_text()))
            except (OSError, ValueError):
                cached = None
            if cached is not None:
                info.outcomes.update(cached.outcomes)
        todo = [t for t in ids if t not in info.outcomes]
        if todo:
            tree = self._base_scratch()
            args = self._args_for(todo)
            _, records = self._recorded(tree, args, timeout, only=todo)
            ran = records.outcomes
            for test in todo:
                info.outcomes[test] = ran.get(test, "not run")
            self._save()
        return {t: info.outcomes[t] for t in ids}

    def _args_for(self, ids: list[str]) -> list[str]:
        """Arguments that make the runner collect no more than the files of ``ids`` (the
        recorder still runs only the ids themselves)."""
        if self.profile.runner != "pytest":
            return []
        files = sorted({i.split("::", 1)[0] for i in ids if "::" in i})
        return files if len(files) == len({i.split("::", 1)[0] for i in ids}) else []

    # -- one check

    def judge(
        self,
        tree: Path,
        scope: Sequence[str],
        timeout: float,
        *,
        allow: TestChanges | None = None,
    ) -> Verdict:
        """Judge ``tree`` (its tests in ``scope``: all when empty), allowing the test
        changes the judging allows and ``allow`` (a check's own setting)."""
        allow = self.allow.joined(allow or TestChanges())
        base = self.base(timeout)
        repo = self.repo
        agent_tree = tree_of(tree)
        base_tree = git(repo, "rev-parse", f"{self.judging.base}^{{tree}}").stdout.strip()
        base_entries = entries(repo, base_tree)
        agent_entries = entries(repo, agent_tree)
        changes = _changes(repo, base_tree, agent_tree)
        test_files = base.test_files()
        file_of = base.file_of()
        by_file: dict[str, list[str]] = {}
        for test_id, where in file_of.items():
            if where:
                by_file.setdefault(where, []).append(fd.qualname_in_file(test_id, where))

        def blob(sha: str) -> bytes:
            return git(repo, "cat-file", "blob", sha).stdout.encode("utf-8", "surrogateescape")

        found = fd.read_findings(
            changes,
            base_entries,
            agent_entries,
            blob,
            test_files=test_files,
            test_ids=by_file,
            plugins=frozenset(base.plugins),
            runner=self.profile.runner,
        )
        found = [
            fd.Finding(f.kind, f.path, f.detail, True)
            if allow.allows(f.path) and not f.kind.startswith("import hook")
            else f
            for f in found
        ]
        revert = {
            p
            for c in changes
            for p in (c.path, c.old)
            if p
            and (fd.is_test_path(p, test_files) or fd.is_runner_file(p) or p in base.plugins)
            and (not allow.allows(p) or fd.is_import_hook(p))
        }
        judged_tree = compose(repo, agent_tree, base_entries, revert)
        expected = [t for t in base.ids if _in_scope(t, file_of.get(t), scope)]
        args = list(scope) if self.profile.takes_args else []

        judged = self._scratch("judged", commit_tree(repo, judged_tree))
        outcome, records = self._recorded(judged.path, args, timeout)
        verdict = Verdict(False, EVIDENCE_RECORDS, outcome, findings=found, allowed=allow)
        verdict.base_tests = len(expected)
        if base.collected is None:
            return self._exit_code_only(verdict, base)
        if not records.any:
            verdict.problems.append(
                "the test process left no records: it ended before its test runner started "
                f"(exit {outcome.exit_code}), or the runner was kept from loading AgentOS's "
                "recorder"
            )
            return self._decide(verdict, base)
        verdict.tampered = records.tampered + _unlike_the_base(records, base)
        for proc in records.unsealed:
            verdict.problems.append(
                f"a test process ({proc.runner or 'unknown'} {proc.path.stem}) "
                f"{proc.seal_problem}: it did not end as a test run ends (exit "
                f"{outcome.exit_code})"
            )
        outcomes = records.outcomes
        added_tests = any(
            fd.may_add_tests(c, base_entries, agent_entries, blob, test_files) for c in changes
        )
        if judged_tree != agent_tree and added_tests:
            # Only a test file the agent added or changed can hold a test the base has not.
            verdict.new_tests = self._new_tests(tree, agent_tree, base, args, timeout)
        elif expected or base.ids:
            known = set(base.ids)
            verdict.new_tests = {t: o for t, o in outcomes.items() if t not in known}
        self._compare(verdict, base, expected, outcomes, timeout, allow)
        self._exit_status(verdict, outcome, records)
        return self._decide(verdict, base)

    def _new_tests(
        self, tree: Path, agent_tree: str, base: BaseInfo, args: list[str], timeout: float
    ) -> dict[str, str]:
        """The tests the agent added, run in a scratch tree of its work as it is."""
        scratch = self._scratch("agent", commit_tree(self.repo, agent_tree))
        _outcome, records = self._recorded(scratch.path, args, timeout, skip=base.ids)
        known = set(base.ids)
        new = {t: o for t, o in records.outcomes.items() if t not in known}
        for proc in records.unsealed:
            new[f"(its tests' process {proc.path.stem})"] = f"error: {proc.seal_problem}"
        return new

    def _compare(
        self,
        verdict: Verdict,
        base: BaseInfo,
        expected: list[str],
        outcomes: dict[str, str],
        timeout: float,
        allow: TestChanges,
    ) -> None:
        counts: dict[str, int] = {}
        for test in expected:
            outcome = outcomes.get(test, "not run")
            counts[outcome] = counts.get(outcome, 0) + 1
        verdict.counts = counts
        file_of = base.file_of()
        pending = [t for t in expected if outcomes.get(t) not in PASSING]
        at_base = self.base_outcomes(pending, timeout) if pending else {}
        for test in pending:
            now = outcomes.get(test, "not run")
            then = at_base.get(test, "not run")
            where = file_of.get(test) or test
            allowed = allow.allows(where)
            if now == "not run":
                if allowed:
                    verdict.findings.append(fd.Finding("test no longer runs", test, "", True))
                else:
                    verdict.missing.append(test)
            elif then in PASSING:
                if allowed and now not in FAILING:
                    verdict.findings.append(fd.Finding(f"test now {now}", test, "", True))
                else:
                    verdict.regressions.append(f"{test}: passed at the base, {now} now")
            elif then == now and now in ("skipped", "xfailed"):
                continue
            elif then in FAILING and now in FAILING:
                if self._may_keep_failing(test, where):
                    verdict.known_failures.append(test)
                else:
                    verdict.still_failing.append(test)
            elif then == "not run":
                verdict.regressions.append(f"{test}: {now} now (it did not run at the base)")
            else:
                verdict.regressions.append(f"{test}: {then} at the base, {now} now")

    def _may_keep_failing(self, test: str, where: str) -> bool:
        """A test failing at the base may keep failing only when the request names other
        tests or files, and none of them is this test, its file or what it tests."""
        named = self.judging.named
        if not named:
            return False
        stem = PurePosixPath(where).stem.removeprefix("test_").removesuffix("_test")
        for name in named:
            clean = name.rstrip("/")
            if test == clean or test.startswith(clean + "::") or where == clean:
                return False
            if where.startswith(clean + "/") or clean.split("::")[0] == where:
                return False
            if PurePosixPath(clean).stem in (stem, f"test_{stem}") and stem:
                return False
            if "/" not in clean and "." not in clean and clean in test:  # a symbol
                return False
        return True

    def _exit_status(self, verdict: Verdict, outcome: process.Outcome, records: Records) -> None:
        """The judged command's exit status, held against what the records say."""
        failing = any(o in FAILING for o in records.outcomes.values())
        code = outcome.exit_code
        if outcome.timed_out:
            verdict.problems.append("the test command timed out")
            return
        if code is None:
            verdict.problems.append("the test command did not run to its end")
            return
        if code == 0 and failing:
            verdict.tampered.append(
                "the test command exited 0 while the records hold failing tests"
            )
        elif code != 0 and not failing and not verdict.known_failures:
            pytest_exit = self.profile.runner == "pytest"
            if not (pytest_exit and code == 5 and not verdict.base_tests):
                verdict.problems.append(
                    f"the test command exited {code} although no test failed: its output says why"
                )
        for proc in records.processes:
            for key, value in proc.runner_counts.items():
                if key == "run":  # unittest: the tests it started
                    mine, key = len(proc.outcomes), "tests run"
                else:
                    mine = sum(1 for o in proc.outcomes.values() if o == key)
                if value != mine:
                    verdict.tampered.append(
                        f"the runner counted {value} {key} where AgentOS recorded {mine}"
                    )

    def _exit_code_only(self, verdict: Verdict, base: BaseInfo) -> Verdict:
        verdict.evidence = EVIDENCE_EXIT
        verdict.exit_only_reason = (
            "the test command ran no test under pytest or unittest that AgentOS could record "
            f"(`{self.profile.test}`); per-test records need the tests to run with pytest or "
            "unittest in a Python process started from the test command (for tox, an "
            "environment that passes AGENTOS_GATE_* and PYTHONPATH)"
        )
        code = verdict.outcome.exit_code
        if code != 0:
            verdict.problems.append(
                "the test command timed out"
                if verdict.outcome.timed_out
                else f"the test command exited {code}"
            )
        return self._decide(verdict, base)

    def _decide(self, verdict: Verdict, base: BaseInfo) -> Verdict:
        refused = [f for f in verdict.findings if not f.allowed]
        new_failing = sorted(
            t for t, o in verdict.new_tests.items() if o not in PASSING | {"skipped", "xfailed"}
        )
        verdict.passed = not (
            refused
            or verdict.regressions
            or verdict.missing
            or verdict.still_failing
            or verdict.tampered
            or verdict.problems
            or new_failing
        )
        lines: list[str] = []
        if verdict.evidence == EVIDENCE_RECORDS:
            counted = ", ".join(f"{n} {k}" for k, n in sorted(verdict.counts.items()))
            lines.append(
                f"AgentOS ran the base's {verdict.base_tests} test(s) against this tree, "
                f"with the base's test files and configuration: {counted or 'none ran'}."
            )
        else:
            lines.append(f"evidence: exit code only ({verdict.exit_only_reason}).")
        if refused:
            lines.append("Refused: what was done to the tests (put it back, fix the code instead):")
            lines += [f"  - {f.line()}" for f in refused]
        for title, items in (
            ("The test run was tampered with", verdict.tampered),
            ("The test run did not end as it should", verdict.problems),
            ("Tests that passed at the base and do not now", verdict.regressions),
            ("Tests failing at the base that must pass now", verdict.still_failing),
            ("Tests of the base that did not run", verdict.missing),
        ):
            if items:
                lines.append(f"{title}:")
                lines += [f"  - {item}" for item in items[:_SHOWN]]
                if len(items) > _SHOWN:
                    lines.append(f"  - ... and {len(items) - _SHOWN} more")
        if new_failing:
            lines.append(f"Tests you added that fail: {_listing(new_failing)}")
        if verdict.known_failures:
            lines.append(
                "Known failures (failing at the base, not what the request is about): "
                + _listing(verdict.known_failures)
            )
        allowed = [f for f in verdict.findings if f.allowed]
        if allowed:
            lines.append(f"Allowed test changes ({verdict.allowed.why or 'allowed'}):")
            lines += [f"  - {f.line()}" for f in allowed[:_SHOWN]]
        verdict.summary = lines
        return verdict


def _unlike_the_base(records: Records, base: BaseInfo) -> list[str]:
    """What the judged run's process holds that the base's did not: an import hook or a
    tracer of the tree's code, a pytest plugin from the tree, a test whose function comes
    from another file than at the base."""
    found = [c for c in records.changed if c not in base.changed]
    found += [
        f"an {hook} (not at the base)" if hook.startswith("import") else f"a {hook}"
        for hook in records.hooks
        if hook not in base.hooks
    ]
    found += [
        f"a pytest plugin from {plugin} (not at the base)"
        for plugin in records.plugins
        if plugin not in base.plugins
    ]
    code_at_base = {str(t["id"]): t.get("code") for t in base.collected or []}
    for item in records.collected:
        then = code_at_base.get(item.id)
        if then and item.code != then:
            now = item.code or "no file of the tree (code made at run time)"
            found.append(f"{item.id}: its function comes from {now}, not {then}")
    return found


_LOCKS: dict[str, threading.Lock] = {}
_LOCKS_GUARD = threading.Lock()


def _base_lock(path: Path | None) -> threading.Lock:
    """The lock of one base's cached outcomes in this process."""
    with _LOCKS_GUARD:
        return _LOCKS.setdefault(str(path), threading.Lock())


@contextmanager
def _environments_lock(workdir: Path | None) -> Iterator[None]:
    """One tox or nox at a time in a shared environments directory (the agents of a run
    gate in parallel; two runs may share the workspace's cache)."""
    if workdir is None:
        yield
        return
    with _base_lock(workdir), (workdir / ".agentos-lock").open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _in_scope(test: str, where: str | None, scope: Sequence[str]) -> bool:
    if not scope:
        return True
    for name in scope:
        clean = name.rstrip("/")
        if test == clean or test.startswith(clean + "::") or test.startswith(clean + "["):
            return True
        if where and (where == clean or where.startswith(clean + "/")):
            return True
    return False


def _changes(repo: Path, base_tree: str, agent_tree: str) -> list[fd.Change]:
    out = git(
        repo,
        "-c",
        "core.quotepath=off",
        "diff-tree",
        "-r",
        "-z",
        "-M",
        "--name-status",
        "--no-ext-diff",
        base_tree,
        agent_tree,
    ).stdout
    parts = out.split("\0")
    found: list[fd.Change] = []
    i = 0
    while i < len(parts) and parts[i]:
        status = parts[i][0]
        if status in ("R", "C"):
            found.append(fd.Change("R" if status == "R" else "A", parts[i + 2], parts[i + 1]))
            i += 3
        else:
            found.append(fd.Change(status, parts[i + 1]))
            i += 2
    return found


def reported_outcome(info: BaseInfo) -> process.Outcome:
    """The base collection's command as an outcome: how it exited, what it printed (the
    collection errors first), for :func:`agentos.gate.repo.collection_problems`."""
    errors = "".join(f"ERROR collecting {e}\n" for e in info.collect_errors)
    return process.Outcome(
        info.exit_code == 0 and not info.collect_errors,
        errors + info.tail,
        "",
        len(errors) + len(info.tail),
        info.exit_code if info.exit_code not in (0, None) else 2,
    )


def verdict_outcome(verdict: Verdict) -> process.Outcome:
    """The check's outcome: AgentOS's verdict first, then the tail of what the judged test
    command printed (its digest and size are those of its whole output)."""
    runner = verdict.outcome
    head = "\n".join(verdict.summary) + "\n"
    text = head + "\n[the test command, on the judged tree]\n" + runner.tail
    limit = process.TAIL_BYTES
    encoded = text.encode("utf-8")
    if len(encoded) > limit:
        keep = max(limit - len(head.encode("utf-8")), 200)
        tail = runner.tail.encode("utf-8")[-keep:].decode("utf-8", "replace")
        text = head + "\n[the test command, on the judged tree: its last lines]\n" + tail
    return process.Outcome(
        verdict.passed,
        text,
        runner.digest,
        runner.size,
        runner.exit_code,
        runner.timed_out,
        runner.limit,
    )


__all__ = [
    "EVIDENCE_EXIT",
    "EVIDENCE_RECORDS",
    "Entry",
    "Judging",
    "TestChanges",
    "TestsJudge",
    "Verdict",
    "recorder_env",
    "verdict_outcome",
]
