"""Running the gate: every check of a piece of work on its tree, in order, with a scrubbed
environment and a timeout; the gate passes only when every check passes. An agent's exit code
or claim of success never counts.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentos.errors import BadInput, NotFound
from agentos.gate import builtin
from agentos.gate.judge import BaseInfo, Judging, TestChanges, TestsJudge, verdict_outcome
from agentos.shared import process
from agentos.shared.checks import CheckSpec
from agentos.workspace.layout import Workspace

if TYPE_CHECKING:
    from agentos.gate.repo import RepoProfile
    from agentos.sandbox.confine import CheckConfiner
from agentos.gate.environment import check_env, gate_environment, tests_timeout
from agentos.gate.results import CheckResult, GateResult, with_failure
from agentos.gate.selection import describe


class _Runner:
    """Runs checks one by one; the diff against the base is computed once and reused
    until a shell check (which may change files) has run."""

    def __init__(
        self,
        worktree: Path,
        base: tuple[Path, str] | None,
        env: dict[str, str],
        profile: RepoProfile | None,
        confiner: CheckConfiner | None,
        stop: threading.Event | None = None,
        started: Callable[[int], None] | None = None,
        judging: Judging | None = None,
    ) -> None:
        self.worktree, self.base, self.env, self.profile = worktree, base, env, profile
        self.confiner = confiner
        self.stop, self.started = stop, started
        self.judging = judging
        self._changes: list[builtin.Change] | None = None
        self._judge: TestsJudge | None = None
        self._own_scratch: Path | None = None  # a temporary scratch made for want of one
        self.evidence: dict[str, Any] | None = None  # the last tests check's

    def judge(self) -> TestsJudge:
        """The tests judge of this gate (one base collection for all its tests checks)."""
        if self._judge is None:
            assert self.profile is not None
            judging = self.judging
            if judging is None:
                import tempfile

                judging = Judging(
                    base=builtin.resolve_base(self.worktree, "HEAD")[1],
                    scratch=Path(tempfile.mkdtemp(prefix="agentos-gate-")),
                )
                self.judging, self._own_scratch = judging, judging.scratch
            profile, extra = self.profile, {k: v for k, v in self.env.items()}
            self._judge = TestsJudge(
                profile,
                judging,
                self._shell_in,
                lambda tree: gate_environment(profile, tree, extra),
            )
        return self._judge

    def close(self) -> None:
        if self._judge is not None:
            self._judge.close()
        if self._own_scratch is not None:
            shutil.rmtree(self._own_scratch, ignore_errors=True)

    def _shell_in(
        self,
        command: str,
        tree: Path,
        env: dict[str, str],
        timeout: float,
        writable: Sequence[Path],
        network: bool,
    ) -> process.Outcome:
        """A command of the tests judge in one of its scratch trees, confined as checks are,
        with its records directory (and tox's environments) writable."""
        confiner = self.confiner.for_tree(tree) if self.confiner is not None else None
        return self._shell(
            command,
            tree,
            timeout,
            writes=False,
            network=network,
            confiner=confiner,
            env=env,
            also_writable=writable,
        )

    def changes(self) -> tuple[list[builtin.Change], str]:
        assert self.base is not None  # run_gate resolves it whenever a diff check is present
        top, commit = self.base
        if self._changes is None:
            self._changes = builtin.changes(top, commit)
        return self._changes, commit

    def run(self, check: CheckSpec) -> process.Outcome:
        if check.tests is not None:
            self._changes = None
            self.evidence = None
            if self.profile is None:
                return process.reported(
                    False, "no repository profile: the test command is unknown\n"
                )
            allow = (
                TestChanges(True, (), f"check {check.name!r}: allow_test_changes")
                if check.allow_test_changes
                else None
            )
            verdict = self.judge().judge(
                self.worktree, check.tests, tests_timeout(check, self.profile), allow=allow
            )
            self.evidence = verdict.as_dict()
            return verdict_outcome(verdict)
        if check.run is not None:
            self._changes = None
            cwd = builtin.inside(self.worktree, check.cwd or ".")
            if cwd is None:
                return process.reported(
                    False, f"cwd {check.cwd} leads outside the worktree (symlink)\n"
                )
            if not cwd.is_dir():
                return process.reported(
                    False, f"cwd {check.cwd} is not a directory in the worktree\n"
                )
            return self._shell(check.run, cwd, check.timeout, writes=bool(check.writes))
        if check.file_exists is not None:
            return builtin.file_exists(self.worktree, check.file_exists)
        if check.file_contains is not None:
            return builtin.file_contains(
                self.worktree, check.file_contains.path, check.file_contains.pattern
            )
        if check.no_changes_outside is not None:
            return builtin.no_changes_outside(*self.changes(), check.no_changes_outside)
        assert check.max_diff_lines is not None
        return builtin.max_diff_lines(*self.changes(), check.max_diff_lines)

    def _shell(
        self,
        command: str,
        cwd: Path,
        timeout: float,
        *,
        writes: bool,
        network: bool = False,
        confiner: CheckConfiner | None = None,
        env: dict[str, str] | None = None,
        also_writable: Sequence[Path] = (),
    ) -> process.Outcome:
        """A shell check, confined when the gate has a sandbox: the limit that ended it,
        or the read-only tree it tried to write, is said at the end of its output."""
        confiner = confiner or self.confiner
        env = self.env if env is None else env
        if confiner is None:
            return process.run_shell(
                command, cwd, env, timeout, stop=self.stop, started=self.started
            )
        from agentos.sandbox import limits_hit

        wrap, group = confiner.prepare(
            cwd, writes=writes, network=network, also_writable=also_writable
        )
        try:
            outcome = process.run_shell(
                command, cwd, env, timeout, wrap, stop=self.stop, started=self.started
            )
        finally:
            hit = limits_hit(group, None)
            group.close()
        hit = hit or limits_hit(None, outcome.exit_code)
        notes = []
        if hit is not None:
            notes.append(f"[agentos] limit: {hit}: the check's sandbox stopped it")
        if not writes and not outcome.passed and "Read-only file system" in outcome.tail:
            notes.append(
                "[agentos] the tree is read-only for checks, so that a check cannot change "
                "what it judges; a check that must write (a formatter) says `writes: true`"
            )
        if not notes:
            return outcome
        tail = outcome.tail + ("" if outcome.tail.endswith("\n") else "\n") + "\n".join(notes)
        return replace(outcome, passed=False, tail=tail + "\n", limit=hit)


def run_gate(
    checks: Sequence[CheckSpec],
    worktree: Path,
    *,
    base: str | None = None,
    env: Mapping[str, str] | None = None,
    profile: RepoProfile | None = None,
    confiner: CheckConfiner | None = None,
    stop: threading.Event | None = None,
    started: Callable[[int], None] | None = None,
    judging: Judging | None = None,
) -> GateResult:
    """Run every check, in order, in ``worktree``; the gate passes when all of them pass.
    ``stop`` set (the run was cancelled) kills the running check and skips the rest;
    ``started`` is told each shell check's process group id.

    ``base`` is the revision the diff checks compare against (the run's base commit);
    ``None`` means ``HEAD``, i.e. only uncommitted and untracked changes count. Shell checks
    get ``env`` plus PATH/HOME/LANG defaults (see :func:`check_env`) and run as
    ``bash -c`` in their own process group, killed whole at the check's timeout.
    ``profile`` is the repository's (:mod:`agentos.gate.repo`): ``tests`` checks run its test
    command; pass ``env`` from :func:`gate_environment` so that commands use its
    interpreter. ``judging`` is what a ``tests`` check is judged against (the base commit,
    AgentOS's scratch directory, what the request names and allows: see
    :mod:`agentos.gate.judge`); without it the base is ``HEAD`` and the scratch a temporary
    directory.

    A missing worktree, or a base that is not a commit when a diff check needs one, is
    :class:`BadInput`; everything the checks find is a result.
    """
    worktree = Path(worktree)
    if not worktree.is_dir():
        raise NotFound(f"worktree {worktree} does not exist", field="worktree")
    resolved: tuple[Path, str] | None = None
    if any(c.kind in ("no_changes_outside", "max_diff_lines") for c in checks):
        resolved = builtin.resolve_base(worktree, base or "HEAD")
    runner = _Runner(worktree, resolved, check_env(env), profile, confiner, stop, started, judging)
    results: list[CheckResult] = []
    try:
        for check in checks:
            if stop is not None and stop.is_set():
                break
            began = time.monotonic()
            outcome = runner.run(check)
            results.append(
                CheckResult(
                    name=check.name,
                    kind=check.kind,
                    passed=outcome.passed,
                    duration=time.monotonic() - began,
                    exit_code=outcome.exit_code,
                    output_tail=outcome.tail,
                    digest=outcome.digest,
                    timed_out=outcome.timed_out,
                    definition=describe(check, profile),
                    output_bytes=outcome.size,
                    limit=outcome.limit,
                    evidence=runner.evidence if check.kind == "tests" else None,
                )
            )
    finally:
        runner.close()
    gate = GateResult(results, resolved[1] if resolved else None)
    if stop is not None and stop.is_set():
        return with_failure(gate, "not cancelled", "the run was cancelled during its gate\n")
    return gate


def base_collection(
    profile: RepoProfile,
    judging: Judging,
    env: Mapping[str, str],
    confiner: CheckConfiner | None,
    timeout: float,
    stop: threading.Event | None = None,
) -> BaseInfo:
    """The base's tests as the repository's command collects them, confined as checks are,
    and kept in ``judging.cache`` for the gates that follow (a run's preflight)."""
    runner = _Runner(profile.repo, None, check_env(env), profile, confiner, stop, None, judging)
    try:
        return runner.judge().base(timeout)
    finally:
        runner.close()


def run_judging(
    ws: Workspace,
    run_id: str,
    name: str,
    base: str,
    named: Sequence[str] = (),
    allow: TestChanges | None = None,
) -> Judging:
    """What a run's tests checks judge against (an agent's gates, the run's preflight and
    its integration gate, as ``name``): ``base``, the request's ``named`` things and the
    test changes it ``allow``s; scratch trees under ``.agentos/gate/<run>/<name>`` (the
    workspace, hidden from agents), base collections in ``.agentos/cache/gate``."""
    return Judging(
        base=base,
        scratch=ws.state_dir / "gate" / run_id / name,
        cache=ws.state_dir / "cache" / "gate",
        named=tuple(named),
        allow=allow or TestChanges(),
    )


def gate_judging(
    ws: Workspace, tree: Path, base: str | None, allow_test_changes: bool = False
) -> Judging:
    """What ``agentos gate run`` and the Stop hook judge a tree's tests against: ``base``
    (default HEAD), scratch trees in the workspace, base collections in its cache."""
    import tempfile

    if builtin.toplevel(tree) is None:
        raise BadInput(
            f"{tree} is not a git repository; a tests check judges a tree against the commit "
            "it started from",
            field="--repo",
        )
    scratch = ws.state_dir / "gate"
    scratch.mkdir(parents=True, exist_ok=True)
    allow = TestChanges(True, (), "--allow-test-changes") if allow_test_changes else TestChanges()
    return Judging(
        base=builtin.resolve_base(tree, base or "HEAD")[1],
        scratch=Path(tempfile.mkdtemp(prefix="check-", dir=scratch)),
        cache=ws.state_dir / "cache" / "gate",
        allow=allow,
    )
