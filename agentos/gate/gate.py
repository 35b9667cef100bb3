"""The Stormbreaker gate: deterministic checks that decide whether work is done.

Checks come from the agent's package (in the hub), the routing card and the workspace's
``agentos.yaml`` -- never from the agent's worktree, so an agent cannot edit its own checks.
They run in the worktree with a scrubbed environment and a timeout; the gate passes only
when every check passes. An agent's exit code or claim of success never counts.

Library API (the orchestrator, the CLI and the MCP server call these):

- :func:`collect_checks` -- package, then card, then workspace checks;
  :func:`gate_checks` does the same from a package ref and a card id.
- :func:`select_checks` -- keep only the checks named.
- :func:`run_gate` -- run checks in a worktree, return a :class:`GateResult`.
- :meth:`GateResult.feedback` / :func:`write_feedback` -- the failures, for the agent.
- :func:`gate_receipt_fields` / :func:`write_gate_receipt` -- what a "gate" receipt records.
- :func:`stop_hook`, :func:`hook_command`, :func:`install_stop_hook` -- the Claude Code
  ``Stop`` hook.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentos.errors import BadInput, NotFound, ValidationFailed
from agentos.gate import runner as cr
from agentos.gate.claude_settings import HOOK_TIMEOUT, merge_stop_hook
from agentos.gate.judge import BaseInfo, Judging, TestChanges, TestsJudge, verdict_outcome
from agentos.hub.manifest import Manifest
from agentos.hub.store import Hub
from agentos.receipts import Receipt, write_receipt
from agentos.routing.cards import load_cards
from agentos.shared.checks import CheckSpec
from agentos.shared.fs import atomic_write
from agentos.workspace.layout import Workspace

if TYPE_CHECKING:
    from agentos.gate.repo import RepoProfile
    from agentos.sandbox.confine import CheckConfiner

FEEDBACK_FILE = "AGENTOS_FEEDBACK.md"
DEFAULT_LANG = "C.UTF-8"


# --- results -------------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckResult:
    name: str
    kind: str
    passed: bool
    duration: float  # seconds
    exit_code: int | None  # shell checks that ran to the end; None for built-ins and timeouts
    output_tail: str  # the last ~4 KB of the output
    digest: str  # sha256 of the whole output
    timed_out: bool = False
    definition: str = ""  # what the check does: its command, or the built-in and argument
    output_bytes: int = 0  # size of the whole output
    limit: str | None = None  # the sandbox limit that stopped it (memory, processes, cpu...)
    # A `tests` check's judgment (agentos.gate.judge.Verdict.as_dict): evidence, counts,
    # findings, regressions...
    evidence: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "kind": self.kind,
            "passed": self.passed,
            "duration": round(self.duration, 3),
            "exit_code": self.exit_code,
            "timed_out": self.timed_out,
            "definition": self.definition,
            "digest": self.digest,
            "output_bytes": self.output_bytes,
            "limit": self.limit,
        }
        if self.evidence is not None:  # a tests check's judgment
            out["evidence"] = self.evidence
        out["output_tail"] = self.output_tail
        return out


@dataclass(frozen=True)
class GateResult:
    results: list[CheckResult] = field(default_factory=list)
    base: str | None = None  # the commit the diff checks compared against, if any ran

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results)

    @property
    def failures(self) -> list[CheckResult]:
        return [r for r in self.results if not r.passed]

    def summary(self) -> str:
        """One line: ``gate passed: 3 of 3 checks passed``, or which failed."""
        total = len(self.results)
        if total == 0:
            return "gate passed: no checks configured (nothing was verified)"
        if self.passed:
            return f"gate passed: {total} of {total} checks passed"
        names = ", ".join(r.name for r in self.failures)
        return f"gate failed: {len(self.failures)} of {total} checks failed ({names})"

    def as_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "summary": self.summary(),
            "base": self.base,
            "checks": [r.as_dict() for r in self.results],
        }

    def feedback(self) -> str:
        """Markdown for the agent: each failing check, what it does, and its output tail."""
        if self.passed:
            return f"# Stormbreaker gate\n\n{self.summary()}.\n"
        lines = [
            "# Stormbreaker gate: your work is not done yet",
            "",
            f"{self.summary()}.",
            "",
            "These checks are run by AgentOS, not by you: editing their definitions changes",
            "nothing. Fix the work so that every failing check below passes, then finish.",
        ]
        for r in self.failures:
            status = (
                "timed out"
                if r.timed_out
                else f"exit {r.exit_code}"
                if r.exit_code is not None
                else "failed"
            )
            lines += [
                "",
                f"## FAILED: {r.name} ({r.kind}, {status})",
                "",
                f"Check: {r.definition}",
                "",
            ]
            shown = len(r.output_tail.encode("utf-8"))
            if r.output_bytes > shown:
                lines += [f"Last {shown} of {r.output_bytes} bytes of output:", ""]
            fence = "`" * max(3, _longest_backtick_run(r.output_tail) + 1)
            tail = r.output_tail if r.output_tail.endswith("\n") else r.output_tail + "\n"
            lines += [f"{fence}text", tail.rstrip("\n") if r.output_tail else "(no output)", fence]
        return "\n".join(lines) + "\n"


def _longest_backtick_run(text: str) -> int:
    longest = run = 0
    for ch in text:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    return longest


# --- which checks --------------------------------------------------------------------------


def collect_checks(
    ws: Workspace, *, package: Manifest | None = None, card_checks: Sequence[CheckSpec] = ()
) -> list[CheckSpec]:
    """The checks of a run: the package's, then the card's, then the workspace's.

    They are read from the hub (``package``, as loaded from the hub), the card and
    ``agentos.yaml`` at the workspace root -- never from an agent's worktree.

    Duplicate names: a check identical to one already collected (same name, same
    definition) runs once. A check with a name already taken but a *different* definition
    is kept as well -- a later source never replaces or weakens an earlier one -- and is
    renamed ``NAME [card]`` or ``NAME [workspace]`` (``[card 2]``... if needed) so every
    result and receipt line names one check.
    """
    sources: list[tuple[str, Sequence[CheckSpec]]] = [
        ("package", package.checks if package is not None else ()),
        ("card", card_checks),
        ("workspace", ws.settings.checks),
    ]
    out: list[CheckSpec] = []
    taken: dict[str, CheckSpec] = {}
    for source, checks in sources:
        for check in checks:
            first = taken.get(check.name)
            if first is None:
                taken[check.name] = check
                out.append(check)
                continue
            if first == check:
                continue
            n = 1
            while (new := f"{check.name} [{source}{f' {n}' if n > 1 else ''}]") in taken:
                n += 1
            renamed = check.model_copy(update={"name": new})
            taken[new] = renamed
            out.append(renamed)
    return out


def select_checks(checks: Sequence[CheckSpec], names: Sequence[str]) -> list[CheckSpec]:
    """The checks named in ``names`` (all of them when ``names`` is empty), in gate order."""
    if not names:
        return list(checks)
    known = {c.name for c in checks}
    missing = [n for n in names if n not in known]
    if missing:
        have = ", ".join(repr(n) for n in sorted(known)) or "none"
        raise NotFound(f"no check named {missing[0]!r} (checks: {have})", field="check")
    wanted = set(names)
    return [c for c in checks if c.name in wanted]


def describe(check: CheckSpec, profile: RepoProfile | None = None) -> str:
    """What a check does, in one line (a ``tests`` check: with the command ``profile``
    gives it, when known)."""
    if check.run is not None:
        where = f" (in {check.cwd})" if check.cwd else ""
        return f"`{check.run}`{where}, timeout {check.timeout:g}s"
    if check.tests is not None:
        which = " ".join(check.tests) or "the whole suite"
        if profile is None:
            return f"the repository's tests ({which})"
        return (
            f"the repository's tests ({which}): `{profile.test_command(check.tests)}`, "
            f"timeout {tests_timeout(check, profile):g}s"
        )
    if check.file_exists is not None:
        return f"file_exists {check.file_exists}"
    if check.file_contains is not None:
        return f"file_contains {check.file_contains.path} /{check.file_contains.pattern}/"
    if check.no_changes_outside is not None:
        return f"no_changes_outside {', '.join(check.no_changes_outside) or '(nothing)'}"
    return f"max_diff_lines {check.max_diff_lines}"


# --- running -------------------------------------------------------------------------------


def check_env(env: Mapping[str, str] | None) -> dict[str, str]:
    """The environment of a shell check: ``env`` only, plus PATH, HOME and LANG defaults.

    PATH and HOME default to this process's (tools such as ruff or pytest must be found),
    and PATH always ends with the directory of AgentOS's own interpreter, as an agent's
    does, so that the tools installed with AgentOS (ruff) are found whether or not its
    virtual environment is activated. LANG defaults to C.UTF-8. Nothing else leaks in.
    """
    out = dict(env or {})
    out.setdefault("PATH", os.environ.get("PATH", os.defpath))
    own = str(Path(sys.executable).parent)
    if own not in out["PATH"].split(os.pathsep):
        out["PATH"] = os.pathsep.join([out["PATH"], own])
    out.setdefault("HOME", os.environ.get("HOME", "/"))
    out.setdefault("LANG", DEFAULT_LANG)
    return out


def gate_environment(
    profile: RepoProfile | None, tree: Path, env: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment checks run with in ``tree``: :func:`check_env` of ``env``, then the
    repository's (its interpreter first on PATH, its variables, and in a worktree the
    import of the worktree's code rather than the main checkout's). ``agentos run`` and
    ``agentos gate run`` both use it, so one tree gets one result."""
    base = check_env(env)
    return base if profile is None else profile.environment(base, tree)


_PROGRAM = re.compile(r"[A-Za-z0-9_.+-]+")
_SHELL_WORDS = frozenset(
    "! . : [ [[ { alias builtin case cd command declare echo eval exec exit export false "
    "for function if kill let local printf pwd read return set shift source test time "
    "trap true type ulimit umask unset until wait while".split()
)


def missing_programs(checks: Sequence[CheckSpec], env: Mapping[str, str]) -> list[str]:
    """The shell checks whose program is not installed: one line each, naming the check,
    the program and the fix. Only bare program names are judged (``ruff check .``); a
    path (``./run.sh``) may be the work's own, and a compound command is left to run."""
    problems = []
    for check in checks:
        if check.run is None:
            continue
        try:
            program = shlex.split(check.run)[0]
        except (ValueError, IndexError):
            continue
        if not _PROGRAM.fullmatch(program) or program in _SHELL_WORDS:
            continue
        if shutil.which(program, path=env.get("PATH")) is None:
            problems.append(
                f"`{program}` (check {check.name!r}) is not installed or not on PATH: "
                "install it, or change the check"
            )
    return problems


def tests_timeout(check: CheckSpec, profile: RepoProfile) -> float:
    """A ``tests`` check's timeout: its own when it sets one, else the repository's."""
    return check.timeout if "timeout" in check.model_fields_set else profile.timeout


def environment_failure(result: GateResult) -> str | None:
    """When a failed gate is the environment's fault, not the agent's, say why: the
    repository's test command could not start (exit 126 or 127: not executable, not
    found). Such a failure is not retried; the person must fix the environment."""
    for r in result.failures:
        if r.kind == "tests" and r.exit_code in (126, 127):
            last = r.output_tail.strip().splitlines()[-1:] or ["(no output)"]
            return (
                f"the repository's test command could not start (exit {r.exit_code}: "
                f"{last[0]}); fix the test command or its environment (agentos repo show, "
                "agentos doctor --repo), then run again"
            )
    return None


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
        self._changes: list[cr.Change] | None = None
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
                    base=cr.resolve_base(self.worktree, "HEAD")[1],
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
    ) -> cr.Outcome:
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

    def changes(self) -> tuple[list[cr.Change], str]:
        assert self.base is not None  # run_gate resolves it whenever a diff check is present
        top, commit = self.base
        if self._changes is None:
            self._changes = cr.changes(top, commit)
        return self._changes, commit

    def run(self, check: CheckSpec) -> cr.Outcome:
        if check.tests is not None:
            self._changes = None
            self.evidence = None
            if self.profile is None:
                return cr.reported(False, "no repository profile: the test command is unknown\n")
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
            cwd = cr.inside(self.worktree, check.cwd or ".")
            if cwd is None:
                return cr.reported(False, f"cwd {check.cwd} leads outside the worktree (symlink)\n")
            if not cwd.is_dir():
                return cr.reported(False, f"cwd {check.cwd} is not a directory in the worktree\n")
            return self._shell(check.run, cwd, check.timeout, writes=bool(check.writes))
        if check.file_exists is not None:
            return cr.file_exists(self.worktree, check.file_exists)
        if check.file_contains is not None:
            return cr.file_contains(
                self.worktree, check.file_contains.path, check.file_contains.pattern
            )
        if check.no_changes_outside is not None:
            return cr.no_changes_outside(*self.changes(), check.no_changes_outside)
        assert check.max_diff_lines is not None
        return cr.max_diff_lines(*self.changes(), check.max_diff_lines)

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
    ) -> cr.Outcome:
        """A shell check, confined when the gate has a sandbox: the limit that ended it,
        or the read-only tree it tried to write, is said at the end of its output."""
        confiner = confiner or self.confiner
        env = self.env if env is None else env
        if confiner is None:
            return cr.run_shell(command, cwd, env, timeout, stop=self.stop, started=self.started)
        from agentos.sandbox import limits_hit

        wrap, group = confiner.prepare(
            cwd, writes=writes, network=network, also_writable=also_writable
        )
        try:
            outcome = cr.run_shell(
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
        resolved = cr.resolve_base(worktree, base or "HEAD")
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


def with_failure(result: GateResult, name: str, text: str) -> GateResult:
    """``result`` with one more, failed, check that AgentOS itself made (``text`` is what it
    found)."""
    outcome = cr.reported(False, text)
    extra = CheckResult(
        name=name,
        kind="builtin",
        passed=False,
        duration=0.0,
        exit_code=None,
        output_tail=outcome.tail,
        digest=outcome.digest,
        definition=f"AgentOS: {name}",
        output_bytes=outcome.size,
    )
    return GateResult([*result.results, extra], result.base)


def write_feedback(worktree: Path, result: GateResult) -> Path:
    """Write ``result.feedback()`` to AGENTOS_FEEDBACK.md in the worktree.

    Root-level ``AGENTOS_*`` files are not counted by the diff checks; do not commit them.
    """
    path = Path(worktree) / FEEDBACK_FILE
    atomic_write(path, result.feedback())
    return path


def gate_receipt_fields(result: GateResult, attempt: int) -> dict[str, Any]:
    """The fields of a "gate" receipt: for each check its name, pass/fail, duration and
    output digest; failing checks and commands (what ran, and what it printed) also carry
    their definition and output tail."""
    checks: list[dict[str, Any]] = []
    for r in result.results:
        entry: dict[str, Any] = {
            "name": r.name,
            "kind": r.kind,
            "result": "pass" if r.passed else "fail",
            "duration": round(r.duration, 3),
            "digest": r.digest,
        }
        if r.exit_code is not None:
            entry["exit_code"] = r.exit_code
        if r.timed_out:
            entry["timed_out"] = True
        if r.limit:
            entry["limit"] = r.limit
        if r.evidence is not None:
            entry["evidence"] = r.evidence
        if not r.passed or r.kind in ("run", "tests"):
            entry["definition"] = r.definition
            entry["output_tail"] = r.output_tail
        checks.append(entry)
    return {
        "attempt": attempt,
        "passed": result.passed,
        "summary": result.summary(),
        "base": result.base,
        "checks": checks,
    }


def write_gate_receipt(
    ws: Workspace,
    result: GateResult,
    *,
    attempt: int = 1,
    run_id: str | None = None,
    context: Mapping[str, object] | None = None,
) -> Receipt:
    """Append a "gate" receipt: ``context`` (where the gate ran, who asked), then
    :func:`gate_receipt_fields`."""
    fields = {**(context or {}), **gate_receipt_fields(result, attempt)}
    return write_receipt(ws, "gate", fields, run_id=run_id)


# --- the Claude Code Stop hook -----------------------------------------------------------


def repo_root(path: Path) -> Path:
    """The top of the git working tree holding ``path``; ``path`` itself outside git."""
    path = Path(path).resolve()
    if not path.is_dir():
        raise NotFound(f"{path} is not a directory", field="repo")
    return cr.toplevel(path) or path


def parse_hook_input(text: str) -> dict[str, Any]:
    """The JSON Claude Code sends a hook on stdin (session_id, transcript_path, cwd,
    hook_event_name, stop_hook_active, ...)."""
    try:
        payload = json.loads(text or "{}")
    except json.JSONDecodeError as exc:
        raise ValidationFailed(f"hook input is not JSON: {exc.msg}", file="<stdin>") from None
    if not isinstance(payload, dict):
        raise ValidationFailed("hook input must be a JSON object", file="<stdin>")
    for key, kind in _HOOK_FIELDS.items():
        if key in payload and not isinstance(payload[key], kind):
            raise ValidationFailed(f"expected {kind.__name__}", file="<stdin>", field=key)
    return payload


_HOOK_FIELDS: dict[str, type] = {
    "session_id": str,
    "cwd": str,
    "hook_event_name": str,
    "stop_hook_active": bool,
}


@dataclass(frozen=True)
class HookOutcome:
    exit_code: int  # 0 lets the agent stop; 2 blocks it, with ``message`` as the reason
    message: str
    result: GateResult | None = None
    repo: Path | None = None  # where the checks ran


def tree_profile(ws: Workspace, tree: Path) -> RepoProfile:
    """The repository profile that checks in ``tree`` use: that of the repository ``tree``
    belongs to (for an agent's worktree, its main repository, so that the worktree's code
    is imported and not the main checkout's)."""
    from agentos.gate.repo import repo_profile
    from agentos.worktrees.repo import common_repo

    return repo_profile(ws, common_repo(tree) or tree)


def gate_confiner(
    ws: Workspace, tree: Path, profile: RepoProfile, env: Mapping[str, str]
) -> CheckConfiner | None:
    """The sandbox the checks of ``agentos gate run`` and the Stop hook run in, as a run's
    do; None inside a sandbox AgentOS started (a hook run by a confined agent: the agent's
    sandbox already holds it, and namespaces do not nest here)."""
    from agentos.sandbox import choose
    from agentos.sandbox.confine import INSIDE, CheckConfiner, Scene, venv_paths
    from agentos.worktrees.repo import common_repo

    if os.environ.get(INSIDE):
        return None
    scene = Scene(
        ws.settings.sandbox,
        ws.root,
        common_repo(tree) or tree,
        Path(os.environ.get("HOME", "/")),
        tuple(venv_paths(profile.venv, profile.python)),
    )
    return CheckConfiner(choose(ws.settings.sandbox), scene, tree, env.get("PATH", ""))


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

    if cr.toplevel(tree) is None:
        raise BadInput(
            f"{tree} is not a git repository; a tests check judges a tree against the commit "
            "it started from",
            field="--repo",
        )
    scratch = ws.state_dir / "gate"
    scratch.mkdir(parents=True, exist_ok=True)
    allow = TestChanges(True, (), "--allow-test-changes") if allow_test_changes else TestChanges()
    return Judging(
        base=cr.resolve_base(tree, base or "HEAD")[1],
        scratch=Path(tempfile.mkdtemp(prefix="check-", dir=scratch)),
        cache=ws.state_dir / "cache" / "gate",
        allow=allow,
    )


def stop_hook(
    payload: Mapping[str, Any],
    checks: Sequence[CheckSpec],
    *,
    base: str | None = None,
    ws: Workspace | None = None,
    allow_test_changes: bool = False,
) -> HookOutcome:
    """Decide a Claude Code ``Stop`` hook: run ``checks`` in the repository at ``cwd``,
    with that repository's profile from ``ws`` (as ``agentos gate run`` does).

    When ``stop_hook_active`` is true, Claude is already continuing because of a Stop hook:
    the agent may stop (exit 0) without running anything, so it can never loop forever.
    """
    if payload.get("stop_hook_active") is True:
        return HookOutcome(0, "stop_hook_active: letting the agent stop")
    where = payload.get("cwd") or os.environ.get("CLAUDE_PROJECT_DIR") or os.getcwd()
    repo = repo_root(Path(where))
    profile = tree_profile(ws, repo) if ws is not None else None
    env = gate_environment(profile, repo)
    confiner = gate_confiner(ws, repo, profile, env) if ws is not None and profile else None
    judging = None
    if ws is not None and any(c.kind == "tests" for c in checks):
        judging = gate_judging(ws, repo, base, allow_test_changes)
    try:
        result = run_gate(
            checks, repo, base=base, env=env, profile=profile, confiner=confiner, judging=judging
        )
    finally:
        if judging is not None:
            shutil.rmtree(judging.scratch, ignore_errors=True)
    if result.passed:
        return HookOutcome(0, result.summary(), result, repo)
    return HookOutcome(2, result.feedback(), result, repo)


def hook_command(
    ws: Workspace,
    *,
    package: str | None = None,
    card: str | None = None,
    names: Sequence[str] = (),
    base: str | None = None,
    allow_test_changes: bool = False,
) -> str:
    """The shell command Claude Code runs for the hook: this Python, this workspace."""
    argv = [sys.executable, "-m", "agentos", "--workspace", str(ws.root), "gate", "hook"]
    if allow_test_changes:
        argv.append("--allow-test-changes")
    if package:
        argv += ["--package", package]
    if card:
        argv += ["--card", card]
    for name in names:
        argv += ["--check", name]
    if base:
        argv += ["--base", base]
    return shlex.join(argv)


def install_stop_hook(
    repo: Path, command: str, *, timeout: int = HOOK_TIMEOUT, local: bool = False
) -> tuple[Path, bool]:
    """Merge the gate's Stop hook (``command``) into the ``.claude/settings.json`` of the
    repository holding ``repo`` (``settings.local.json``, kept out of git, with ``local``),
    keeping everything already there. Installing twice changes nothing; an AgentOS gate
    hook already there is updated in place. Returns the settings file and whether it
    changed."""
    return merge_stop_hook(repo_root(repo), command, timeout=timeout, local=local)


def load_package(ws: Workspace, ref: str | None) -> Manifest | None:
    """The manifest of hub package ``name[@version]`` (None when ``ref`` is None)."""
    if not ref:
        return None
    return Hub(ws.hub_dir).get(ref)[1]


def gate_checks(
    ws: Workspace, *, package: str | None = None, card: str | None = None
) -> list[CheckSpec]:
    """The checks a run would get, for ``agentos gate run/hook``: those of hub package
    ``package`` (``name[@version]``) and of the card with id ``card`` -- whose agent, at the
    version the card asks for, is the package when ``package`` is not given -- then the
    workspace's."""
    card_checks: Sequence[CheckSpec] = ()
    if card:
        found = [c for c in load_cards(ws.cards_dir).cards if c.id == card]
        if not found:
            raise NotFound(f"no card with id {card!r} in {ws.cards_dir}", field="card")
        card_checks = found[0].checks
        if not package:
            hub = Hub(ws.hub_dir)
            package = f"{found[0].agent}@{hub.resolve(found[0].agent, found[0].version)}"
    return collect_checks(ws, package=load_package(ws, package), card_checks=card_checks)
