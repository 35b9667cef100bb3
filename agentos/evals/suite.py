"""An eval suite: a folder with ``suite.yaml`` and ``tasks.jsonl`` (and optional splits,
``<split>.jsonl``), loaded and checked before anything runs.

``suite.yaml``::

    name: arithmetic
    description: Small sums, answered as a number.
    mode: answer                 # answer | repo
    evaluator: {kind: numeric, tolerance: 0.01}    # each task's, unless the task says
    weights: {correctness: 1.0, time: 0.0}
    threshold: 0.5               # the composite score a run must reach to pass
    time_budget: 60              # seconds per task
    token_budget: 20000          # optional: tokens per task (what the agent reports)
    staged: {samples: 2, min_score: 0.5}           # optional

Each line of a split is a task: ``{"id": "t1", "input": "2+2", "expected": 4}``, with an
optional ``evaluator`` of its own. A repo-mode task names its fixture instead: a folder or
an archive (.tar.gz, .tgz, .tar) in the suite, checked member by member as a hub package
is (no absolute paths, no ``..``, no links out, no devices, size limits). A line that is
not JSON, a task without an id, a duplicate id, an evaluator AgentOS does not know, an
empty split: one line naming the file (and the line), exit code 2. So is a ``suite.yaml`` or
a split over its size limit (:mod:`agentos.shared.limits`), found before it is read.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, model_validator

from agentos.errors import BadInput, TooLarge, ValidationFailed
from agentos.evals.evaluators import NORMALISATIONS
from agentos.hub import archive
from agentos.shared import limits
from agentos.shared.checks import CheckSpec
from agentos.shared.models import Name, StrictModel, all_errors, load_yaml_model

SUITE_FILE = "suite.yaml"
DEFAULT_SPLIT = "tasks"
MAX_LINE = 1 << 20  # bytes of one task line
BUNDLED = Path(__file__).resolve().parent / "_bundled"  # the suites that come with AgentOS
ARCHIVES = (".tar.gz", ".tgz", ".tar")  # a repo-mode fixture may be one of these

EvaluatorKind = Literal["exact", "contains", "regex", "numeric", "json_equal", "command", "judge"]
Dimension = Literal["correctness", "time", "diff_size", "tokens", "cost"]
Normalisation = Literal["strip", "case", "whitespace", "punctuation"]
assert set(Normalisation.__args__) == set(NORMALISATIONS)  # type: ignore[attr-defined]


class EvaluatorSpec(StrictModel):
    kind: EvaluatorKind
    normalize: list[Normalisation] = Field(default_factory=list)  # exact and contains
    tolerance: float = Field(default=0.0, ge=0)  # numeric: absolute
    relative: float = Field(default=0.0, ge=0)  # numeric: relative
    command: str | None = None  # command: gets the answer on stdin; exit 0 is right
    agent: str | None = None  # judge: a hub package, NAME[@VERSION]

    @model_validator(mode="after")
    def _complete(self) -> EvaluatorSpec:
        if self.kind == "command" and not self.command:
            raise ValueError("a command evaluator needs `command`")
        if self.kind == "judge" and not self.agent:
            raise ValueError("a judge evaluator needs `agent` (a hub package)")
        return self


def _correctness_only() -> dict[Dimension, float]:
    return {"correctness": 1.0}


class Staged(StrictModel):
    samples: int = Field(ge=1)  # tasks in the first stage
    min_score: float = Field(ge=0, le=1)  # the score the first stage must reach


class SuiteSpec(StrictModel):
    name: Name
    description: str = ""
    mode: Literal["answer", "repo"] = "answer"  # an answer graded, or work on a repository
    evaluator: EvaluatorSpec | None = None  # the tasks' default (answer mode)
    # The composite is the weighted mean of these dimensions, each 0..1.
    weights: dict[Dimension, float] = Field(default_factory=_correctness_only)
    threshold: float = Field(default=0.5, ge=0, le=1)  # the composite a run passes at
    time_budget: float = Field(default=300, gt=0)  # seconds per task
    staged: Staged | None = None  # a sample first; the rest only when it clears min_score
    # Repo mode: the checks that judge each task's work (never the worktree's own), and
    # their weights by name (1 each unless given).
    checks: list[CheckSpec] = Field(default_factory=list)
    check_weights: dict[str, float] = Field(default_factory=dict)  # by check name
    diff_budget: int = Field(default=200, gt=0)  # repo mode: lines changed that score 0
    # What the agent reports it used ($AGENTOS_USAGE_FILE) is scored against these.
    token_budget: int | None = Field(default=None, gt=0)  # tokens per task that score 0
    cost_budget: float | None = Field(default=None, gt=0)  # cost per task that scores 0

    @model_validator(mode="after")
    def _weights(self) -> SuiteSpec:
        if any(w < 0 for w in self.weights.values()) or not sum(self.weights.values()) > 0:
            raise ValueError("weights must be >= 0 and not all 0")
        budgets: list[tuple[Dimension, float | None]] = [
            ("tokens", self.token_budget),
            ("cost", self.cost_budget),
        ]
        for dimension, budget in budgets:
            if self.weights.get(dimension) and budget is None:
                field = "token_budget" if dimension == "tokens" else "cost_budget"
                raise ValueError(f"a weight on {dimension} needs `{field}`")
        unknown = set(self.check_weights) - {c.name for c in self.checks}
        if unknown:
            raise ValueError(f"check_weights names no check: {', '.join(sorted(unknown))}")
        return self


class Task(StrictModel):
    id: str = Field(min_length=1, max_length=200)
    input: str = ""  # answer mode: what the agent is asked
    expected: Any = None
    evaluator: EvaluatorSpec | None = None
    request: str | None = None  # repo mode: the request
    repo: str | None = None  # repo mode: the fixture, a folder or an archive in the suite
    checks: list[CheckSpec] | None = None  # repo mode: this task's, instead of the suite's


class Suite:
    """A loaded suite: its spec and where it lives; tasks are read per split."""

    def __init__(self, root: Path, spec: SuiteSpec) -> None:
        self.root = root
        self.spec = spec
        self._checked: set[Path] = set()  # fixture archives found safe

    @property
    def name(self) -> str:
        return self.spec.name

    def splits(self) -> list[str]:
        return sorted(p.stem for p in self.root.glob("*.jsonl"))

    def tasks(self, split: str = DEFAULT_SPLIT) -> list[Task]:
        path = self.root / f"{split}.jsonl"
        if not path.is_file():
            raise BadInput(
                f"no split {split!r} (the suite has: {', '.join(self.splits()) or 'none'})",
                file=self.root,
                field="split",
            )
        tasks = read_tasks(path)
        for task in tasks:
            if self.spec.mode == "answer" and (task.evaluator or self.spec.evaluator) is None:
                raise ValidationFailed(
                    f"task {task.id!r} has no evaluator and the suite gives none",
                    file=path,
                    field="evaluator",
                )
            if self.spec.mode == "repo" and not (task.request and task.repo):
                raise ValidationFailed(
                    f"task {task.id!r}: a repo-mode task needs `request` and `repo`",
                    file=path,
                    field=task.id,
                )
            if self.spec.mode == "repo" and not (task.checks or self.spec.checks):
                raise ValidationFailed(
                    f"task {task.id!r}: no checks to judge the work (the task's or the suite's)",
                    file=path,
                    field="checks",
                )
            if self.spec.mode == "repo":
                self._check_fixture(task, path)
        return tasks

    def fixture(self, task: Task) -> Path:
        """A repo-mode task's fixture (a folder or an archive), inside the suite (never
        outside it)."""
        found = (self.root / (task.repo or "")).resolve()
        root = self.root.resolve()
        return found if found != root and found.is_relative_to(root) else root / ".missing"

    def _check_fixture(self, task: Task, split: Path) -> None:
        fixture = self.fixture(task)
        if fixture.is_dir():
            return
        if not (fixture.is_file() and fixture.name.endswith(ARCHIVES)):
            raise ValidationFailed(
                f"task {task.id!r}: no fixture folder or archive "
                f"({', '.join(ARCHIVES)}) {task.repo!r} in the suite",
                file=split,
                field="repo",
            )
        if fixture not in self._checked:
            archive.check(fixture, "fixture")
            self._checked.add(fixture)

    def lay_out(self, task: Task, dest: Path) -> None:
        """A repo-mode task's fixture as the files of folder ``dest`` (new): the folder's
        files, or the archive's (its one top folder's, when all its members sit in one);
        a ``.git`` in either is not the suite's and is left out (hooks, configuration)."""
        fixture = self.fixture(task)
        skip_git = shutil.ignore_patterns(".git")
        if fixture.is_dir():
            shutil.copytree(fixture, dest, symlinks=True, ignore=skip_git)
            return
        unpacked = dest.with_name(dest.name + ".unpacked")
        unpacked.mkdir(parents=True)
        try:
            archive.extract(fixture, unpacked, "fixture")
            entries = list(unpacked.iterdir())
            one = entries[0] if len(entries) == 1 else None
            top = one if one is not None and one.is_dir() and not one.is_symlink() else unpacked
            shutil.copytree(top, dest, symlinks=True, ignore=skip_git)
        finally:
            shutil.rmtree(unpacked, ignore_errors=True)

    def evaluator(self, task: Task) -> EvaluatorSpec:
        spec = task.evaluator or self.spec.evaluator
        assert spec is not None  # tasks() checked it
        return spec


def load_suite(root: Path) -> Suite:
    """The suite in folder ``root`` (its ``suite.yaml``, checked)."""
    if not (root / SUITE_FILE).is_file():
        raise BadInput(f"not an eval suite: no {SUITE_FILE}", file=root)
    return Suite(root, load_yaml_model(SuiteSpec, root / SUITE_FILE, limits.SUITE))


def read_tasks(path: Path) -> list[Task]:
    """Every task of a split, checked line by line; one line names the first problem."""
    tasks: list[Task] = []
    seen: dict[str, int] = {}
    read = 0
    with limits.open_within(path, limits.SPLIT) as fh:
        # A line at a time, never more than MAX_LINE and one byte of it: a file of one huge
        # line costs no more than a short one.
        for number, raw in enumerate(iter(lambda: fh.readline(MAX_LINE + 1), b""), start=1):
            if len(raw) > MAX_LINE:
                raise ValidationFailed(f"line {number}: longer than {MAX_LINE} bytes", file=path)
            read += len(raw)
            if read > limits.SPLIT.most:  # one that grew since it was measured
                raise TooLarge(limits.SPLIT.refusal(), file=path)
            text = raw.decode("utf-8", errors="replace").strip()
            if not text:
                continue
            try:
                data = json.loads(text)
            except json.JSONDecodeError as exc:
                raise ValidationFailed(
                    f"line {number}: not JSON ({exc.msg}, column {exc.colno})", file=path
                ) from None
            if not isinstance(data, dict):
                raise ValidationFailed(f"line {number}: a task is a JSON object", file=path)
            try:
                task = Task.model_validate(data)
            except ValidationError as exc:
                field, message = all_errors(exc)[0]
                raise ValidationFailed(f"line {number}: {field}: {message}", file=path) from None
            if task.id in seen:
                raise ValidationFailed(
                    f"line {number}: task id {task.id!r} is also on line {seen[task.id]}",
                    file=path,
                )
            seen[task.id] = number
            tasks.append(task)
    if not tasks:
        raise ValidationFailed("the split has no tasks", file=path)
    return tasks


def available_suites(workspace_evals: Path) -> list[dict[str, Any]]:
    """The suites under the workspace's ``evals/`` and the bundled ones (the workspace's
    first; a broken one is left out: ``eval lint`` names its problem)."""
    from agentos.errors import AgentOSError

    found = []
    for root in (workspace_evals, BUNDLED):
        for folder in sorted(root.glob("*/")) if root.is_dir() else []:
            try:
                suite = load_suite(folder)
            except AgentOSError:
                continue
            found.append(
                {
                    "name": suite.name,
                    "mode": suite.spec.mode,
                    "splits": suite.splits(),
                    "path": str(folder),
                }
            )
    return found


def lint_suites(folders: list[Path]) -> tuple[list[str], int]:
    """Every problem of each suite (its suite.yaml, every split), one line each; and how
    many suites were checked."""
    from agentos.errors import AgentOSError

    problems = []
    for folder in folders:
        try:
            suite = load_suite(folder)
        except AgentOSError as exc:
            problems.append(str(exc))
            continue
        for split in suite.splits() or [DEFAULT_SPLIT]:
            try:
                suite.tasks(split)
            except AgentOSError as exc:
                problems.append(str(exc))
    return problems, len(folders)
