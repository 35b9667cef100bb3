"""Running an agent package on an eval suite and scoring it (answer mode).

Each task runs the agent as a run would (its scrubbed environment, its wrapper, its
sandbox), in a scratch folder of its own, with the task's input as its request; the agent
writes its answer to ``$AGENTOS_OUTPUT_FILE``. The suite's evaluator grades it. Tasks run
``jobs`` at a time; a seeded sample of the split picks the same tasks every time.

The report (``.agentos/evals/<id>/report.json``) gives every dimension (correctness: the
mean task score; time: how much of the time budget the tasks left, on average; diff size
in repo mode; tokens and cost, what the agent reported to ``$AGENTOS_USAGE_FILE`` against
the suite's budgets, a task that reported nothing scoring 0), the
composite (the suite's weights over the dimensions measured) and whether it reached the
suite's threshold; ``predictions.json`` gives each task's answer, score, feedback and
seconds. An ``eval`` receipt records both files' sha256.

The ``command`` evaluator runs the suite's command confined as a gate check is, with the
answer on its stdin; the ``judge`` evaluator runs a hub package as the agent was run, on
the task, the expectation and the answer (as JSON), and reads the score it writes.
In repo mode a task's fixture becomes a fresh repository, the agent runs on the task's
request as any run does (worktree, tmux, sandbox, its own gate; nothing is merged), and the
suite's checks (never the worktree's) judge its last commit: the task's score is the
weighted fraction that pass. Repo-mode tasks run one at a time (each run's orchestrator
takes this process's signals).
"""

from __future__ import annotations

import json
import os
import random
import shlex
import shutil
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentos.errors import BadInput
from agentos.evals import evaluators as ev
from agentos.evals.suite import BUNDLED, DEFAULT_SPLIT, EvaluatorSpec, Suite, Task, load_suite
from agentos.hub.manifest import Manifest
from agentos.hub.store import Hub
from agentos.receipts import write_receipt
from agentos.run.oneshot import read_output, run_once
from agentos.run.store import new_run_id
from agentos.runtimes import ready_package
from agentos.runtimes.usage import Usage
from agentos.sandbox import Sandbox, choose
from agentos.sandbox.confine import Scene
from agentos.shared.fs import atomic_write, sha256_bytes
from agentos.workspace.files import AgentFiles
from agentos.workspace.layout import Workspace
from agentos.workspace.settings import Backend

if TYPE_CHECKING:
    from agentos.cluster.fanout import RemoteOnce

ANSWER_MAX = 1 << 20  # bytes of an answer that are read
GRADED_HERE = ("exact", "contains", "regex", "numeric", "json_equal", "command", "judge")
COMMAND_TIMEOUT = 60.0  # seconds a command evaluator may take


def _run_all(
    runner: _Runner,
    tasks: list[Task],
    chosen: list[Task],
    jobs: int,
    on_task: Callable[[Prediction], None] | None,
) -> dict[str, Prediction]:
    """The ``chosen`` tasks, ``jobs`` at a time; each named by its place in ``tasks`` (so
    a task's files are the same whichever stage runs it)."""
    place = {t.id: i for i, t in enumerate(tasks)}
    out: dict[str, Prediction] = {}
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = [pool.submit(runner.run, place[t.id], t) for t in chosen]
        for fut in futures:
            prediction = fut.result()
            out[prediction.task] = prediction
            if on_task is not None:
                on_task(prediction)
    return out


@dataclass(frozen=True)
class _Answered:
    answer: str | None  # None: nothing was written
    seconds: float
    exit_code: int | None
    limit: str | None
    usage: Usage | None  # what it reported it used
    node: str | None = None  # the node of the cluster it ran on (backend ray)


@dataclass(frozen=True)
class Prediction:
    task: str
    answer: str
    score: float
    feedback: str
    seconds: float
    exit_code: int | None
    limit: str | None = None  # the sandbox limit that stopped the agent, if one did
    lines_changed: int | None = None  # repo mode: lines added and removed by the work
    tokens: int | None = None  # what the agent reported it used ($AGENTOS_USAGE_FILE)
    cost: float | None = None
    node: str | None = None  # the node of the cluster that ran it (``--backend ray``)

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if self.node is None:
            del out["node"]  # a local eval's predictions are as they were
        return out


@dataclass
class EvalReport:
    id: str
    suite: str
    split: str
    agent: str  # NAME@VERSION
    tasks: list[str]  # the task ids run, in the split's order
    sample: dict[str, Any] | None  # {"samples": N, "seed": S} when a sample was drawn
    jobs: int
    dimensions: dict[str, float]
    composite: float
    threshold: float
    passed: bool
    seconds: float
    started_at: float = 0.0  # when it started (seconds since the epoch)
    # With a staged suite: the first stage's size, score and whether the rest ran.
    staged: dict[str, Any] | None = None
    # What the agent reported it used, summed over the tasks, and on how many it reported.
    usage: dict[str, Any] = field(default_factory=dict)
    predictions: list[Prediction] = field(default_factory=list)
    receipt: str = ""

    @property
    def average(self) -> float:
        return self.dimensions["correctness"]

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("predictions")
        data["average"] = self.average
        return data


class EvalCancelled(Exception):
    """The eval was stopped before it ended; nothing of it is kept."""


def find_suite(ws: Workspace, name_or_path: str) -> Path:
    """A suite by path, or by name among the workspace's ``evals/`` and the bundled ones."""
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        return path.resolve()
    for root in (ws.root / "evals", BUNDLED):
        if (root / name_or_path / "suite.yaml").is_file():
            return root / name_or_path
    raise BadInput(f"no eval suite {name_or_path!r} (a folder, or a name under evals/)")


def pick(tasks: list[Task], samples: int | None, seed: int | None) -> list[Task]:
    """All tasks, or ``samples`` of them drawn with ``seed`` (the split's order kept)."""
    if samples is None or samples >= len(tasks):
        return tasks
    chosen = set(random.Random(seed).sample(range(len(tasks)), samples))
    return [t for i, t in enumerate(tasks) if i in chosen]


def run_eval(
    ws: Workspace,
    suite_path: Path,
    agent: str,
    *,
    split: str = DEFAULT_SPLIT,
    samples: int | None = None,
    seed: int | None = None,
    jobs: int = 1,
    on_task: Callable[[Prediction], None] | None = None,
    on_start: Callable[[int], None] | None = None,
    package: tuple[Manifest, Path] | None = None,
    staged: bool = True,
    cancel: threading.Event | None = None,
    backend: Backend = "local",
) -> EvalReport:
    """Run ``agent`` (NAME[@VERSION]) on the suite's ``split``; the report, written with
    its predictions and an ``eval`` receipt. ``on_start`` is told how many tasks will run
    (at most), ``on_task`` gets each prediction as it is made.

    ``package`` runs a package that is not in the hub (its manifest and folder; ``agent``
    then only names it in the report), as evolve does with each generation; ``staged``
    False runs every task even when the suite stages; once ``cancel`` is set, the tasks
    running are stopped and :class:`EvalCancelled` is raised (no report is written).
    ``backend="ray"`` runs the tasks on the cluster (:mod:`agentos.cluster.fanout`; a
    repo-mode task as a run whose agents are dispatched there), graded here as local ones."""
    suite = load_suite(suite_path)
    split_tasks = suite.tasks(split)
    tasks = pick(split_tasks, samples, seed)
    drawn = samples is not None and samples < len(split_tasks)
    sample = {"samples": samples, "seed": seed} if drawn else None
    if suite.spec.mode == "repo":
        jobs = 1  # each task is a run, whose orchestrator owns this process's signals
    hub = Hub(ws.hub_dir)
    label = agent  # the report's name for it
    if package is None:
        info, manifest = ready_package(hub, agent, "--agent")
        package, label = (manifest, info.path), manifest.ref
    elif suite.spec.mode == "repo":
        raise BadInput("a repo-mode suite runs hub packages only", field="suite")
    manifest = package[0]
    eval_id = new_run_id()
    base = ws.state_dir / "evals" / eval_id
    runner = _Runner(ws, suite, manifest, package[1], base, eval_id, cancel, backend)
    judges = set() if suite.spec.mode == "repo" else {suite.evaluator(t).agent for t in tasks}
    for ref in sorted(j for j in judges if j):
        judge, judge_manifest = ready_package(hub, ref, "evaluator.agent")
        runner.judges[ref] = (judge_manifest, judge.path)
    started, started_at = time.monotonic(), time.time()
    if on_start is not None:
        on_start(len(tasks))
    stages = suite.spec.staged if samples is None and staged else None
    stage: dict[str, Any] | None = None
    try:
        if stages is not None and stages.samples < len(tasks):
            # A sample first; the rest only when the sample clears min_score.
            first = pick(tasks, stages.samples, 0 if seed is None else seed)
            done = _run_all(runner, tasks, first, jobs, on_task)
            score = sum(p.score for p in done.values()) / len(done)
            stage = {"samples": stages.samples, "min_score": stages.min_score}
            stage |= {"score": round(score, 6), "complete": score >= stages.min_score}
            if score >= stages.min_score and not (cancel and cancel.is_set()):
                rest = [t for t in tasks if t.id not in done]
                done |= _run_all(runner, tasks, rest, jobs, on_task)
            tasks = [t for t in tasks if t.id in done]
        else:
            done = _run_all(runner, tasks, tasks, jobs, on_task)
        predictions = [done[t.id] for t in tasks]
    finally:
        shutil.rmtree(base / "run", ignore_errors=True)  # env files: secrets
        shutil.rmtree(base / "work", ignore_errors=True)
        shutil.rmtree(base / "grade", ignore_errors=True)
    if cancel is not None and cancel.is_set():
        shutil.rmtree(base, ignore_errors=True)
        raise EvalCancelled(eval_id)
    report = _report(suite, split, eval_id, label, tasks, predictions, sample, jobs)
    report.staged = stage
    report.seconds = round(time.monotonic() - started, 3)
    report.started_at = started_at
    _write(ws, base, report)
    from agentos.run.events import record

    record(
        ws,
        "eval",
        "eval",
        f"eval {eval_id}: {label} on {suite.name}/{split}: composite {report.composite:g} "
        f"({'passed' if report.passed else 'did not pass'})",
        run=eval_id,
        status="passed" if report.passed else "failed",
    )
    return report


class _Runner:
    """One task: the agent in a scratch folder, confined, until it exits or the budget
    ends; its answer graded."""

    def __init__(
        self,
        ws: Workspace,
        suite: Suite,
        manifest: Manifest,
        package_dir: Path,
        base: Path,
        eval_id: str,
        cancel: threading.Event | None = None,
        backend: Backend = "local",
    ) -> None:
        self.ws, self.suite, self.manifest, self.package_dir = ws, suite, manifest, package_dir
        self.base, self.eval_id, self.cancel = base, eval_id, cancel
        self.backend = backend
        self.remote: RemoteOnce | None = None
        if backend == "ray" and suite.spec.mode != "repo":
            from agentos.cluster.fanout import RemoteOnce

            self.remote = RemoteOnce(ws, eval_id)
        self.judges: dict[str, tuple[Manifest, Path]] = {}  # ref -> its package
        self.agent_ref = manifest.ref
        settings = ws.settings.sandbox
        self.sandbox: Sandbox = choose(settings)
        # The suite's folder holds the expected answers, and so do the bundled suites,
        # inside AgentOS's package (which an agent's interpreter may need): each hidden.
        # The agent gets the task's input as its request, nothing else of the suite.
        self.answers = tuple(dict.fromkeys((suite.root.resolve(), BUNDLED.resolve())))
        self.scene = Scene(
            settings, ws.root, base, Path(os.environ.get("HOME", "/")), also_hidden=self.answers
        )

    def run(self, index: int, task: Task) -> Prediction:
        if self.suite.spec.mode == "repo":
            return self._run_repo(index, task)
        name = f"{index:04d}"
        scratch = self.base / "work" / name
        done = self._answer(self.manifest, self.package_dir, task.input, name, scratch)
        spec = self.suite.evaluator(task)
        if done.limit == "time":
            grade = ev.Grade(0.0, f"stopped at the time budget ({self.suite.spec.time_budget:g}s)")
        elif done.answer is None:
            grade = ev.Grade(0.0, "the agent wrote no answer to $AGENTOS_OUTPUT_FILE")
        elif spec.kind == "command":
            grade = self._command(spec, done.answer, name)
        elif spec.kind == "judge":
            grade = self._judge(spec, task, done.answer, name)
        else:
            grade = grade_answer(spec, done.answer, task.expected)
        used = done.usage or Usage()
        return Prediction(
            task.id,
            done.answer or "",
            grade.score,
            grade.feedback,
            done.seconds,
            done.exit_code,
            done.limit,
            tokens=used.tokens,
            cost=used.cost,
            node=done.node,
        )

    def _answer(
        self, manifest: Manifest, package_dir: Path, request: str, name: str, scratch: Path
    ) -> _Answered:
        """Run a package on ``request`` in ``scratch``, confined as a run's agent is, until
        it exits or the suite's time budget ends; what it wrote to $AGENTOS_OUTPUT_FILE.
        On the cluster, the same on a node (its scratch folder there)."""
        if self.remote is not None:
            return self._answer_remote(self.remote, manifest, package_dir, request, name)
        files = AgentFiles(self.base / "run" / name, self.base / "logs" / f"{name}.log")
        answer_file = files.io / "answer"
        done = run_once(
            self.ws,
            self.sandbox,
            self.scene,
            manifest,
            package_dir,
            run_id=self.eval_id,
            workdir=scratch,
            request=request,
            files=files,
            timeout=self.suite.spec.time_budget,
            env={"AGENTOS_OUTPUT_FILE": str(answer_file)},
            cancel=self.cancel,
        )
        return _Answered(
            read_output(answer_file, ANSWER_MAX),
            done.seconds,
            done.exit_code,
            done.limit,
            done.usage,
        )

    def _answer_remote(
        self, remote: RemoteOnce, manifest: Manifest, package_dir: Path, request: str, name: str
    ) -> _Answered:
        from agentos.cluster.fanout import TaskCancelled

        try:
            done = remote.run(
                manifest,
                package_dir,
                request,
                name,
                timeout=self.suite.spec.time_budget,
                output_max=ANSWER_MAX,
                cancel=self.cancel,
            )
        except TaskCancelled:
            return _Answered(None, 0.0, None, "cancelled", None)
        return _Answered(
            done.answer, done.seconds, done.exit_code, done.limit, done.usage, done.node.name
        )

    def _run_repo(self, index: int, task: Task) -> Prediction:
        """A repo-mode task: the fixture as a fresh repository, the request run on it by
        the agent as any run is (worktree, tmux, sandbox, its own gate), nothing merged;
        then the suite's checks (never the worktree's) on the agent's last commit."""
        from agentos.gate.environment import check_env
        from agentos.gate.runner import run_gate
        from agentos.run.orchestrator import start_run
        from agentos.run.values import RunOptions
        from agentos.sandbox.confine import CheckConfiner
        from agentos.worktrees import repo as wt

        name = f"{index:04d}"
        repo = self.base / "repos" / name
        self.suite.lay_out(task, repo)
        wt.run_git(repo, "init", "-q", "-b", "main")
        wt.run_git(repo, "add", "-A")
        wt.run_git(repo, "commit", "-q", "-m", "fixture", "--allow-empty")
        base = wt.rev(repo, "HEAD") or ""
        started = time.monotonic()
        dispatch = None
        if self.backend == "ray":
            from agentos.cluster.dispatch import ray_dispatch

            dispatch = ray_dispatch(self.ws)
        report = start_run(
            self.ws,
            task.request or "",
            repo,
            RunOptions(
                force=True, agent=self.agent_ref, merge=False, run_id=f"{self.eval_id}-{name}"
            ),
            dispatch=dispatch,
        )
        seconds = round(time.monotonic() - started, 3)
        agent = report.agents[0] if report.agents else None
        commit = (
            (agent.gated_commit or (agent.commits[-1] if agent.commits else None))
            if agent
            else None
        )
        wt.run_git(repo, "checkout", "-q", "--detach", commit or base)
        env = check_env(None)
        gate = run_gate(
            task.checks or self.suite.spec.checks,
            repo,
            base=base,
            env=env,
            confiner=CheckConfiner(self.sandbox, self.scene_for(repo), repo, env["PATH"]),
        )
        weights = self.suite.spec.check_weights
        total = sum(weights.get(r.name, 1.0) for r in gate.results)
        passed = sum(weights.get(r.name, 1.0) for r in gate.results if r.passed)
        score = round(passed / total, 6) if total else 0.0
        lines = _changed_lines(repo, base, commit) if commit else 0
        used = (agent.usage if agent else None) or Usage()
        return Prediction(
            task.id,
            f"{lines} lines changed ({commit or 'no commit'}); run {report.run_id}: "
            f"{report.status}",
            score,
            gate.summary(),
            seconds,
            agent.exit_code if agent else None,
            agent.limit if agent else None,
            lines,
            used.tokens,
            used.cost,
        )

    def scene_for(self, repo: Path) -> Scene:
        settings = self.ws.settings.sandbox
        return Scene(
            settings,
            self.ws.root,
            repo,
            Path(os.environ.get("HOME", "/")),
            also_hidden=self.answers,
        )

    def _judge(self, spec: EvaluatorSpec, task: Task, answer: str, name: str) -> ev.Grade:
        """The judge package, run as the agent was, on the task, the expectation and the
        answer (its request, as JSON); what it writes is read by :func:`judge_score`."""
        assert spec.agent is not None
        manifest, package_dir = self.judges[spec.agent]
        request = json.dumps({"task": task.input, "expected": task.expected, "answer": answer})
        done = self._answer(
            manifest, package_dir, request, f"{name}-judge", self.base / "work" / f"{name}-judge"
        )
        if done.limit == "time":
            return ev.Grade(0.0, "the judge stopped at the time budget")
        return ev.judge_score(done.answer or "")

    def _command(self, spec: EvaluatorSpec, answer: str, name: str) -> ev.Grade:
        """The suite's command, confined as a gate check is (no network, its folder
        read-only), in a folder of its own holding only the answer (never the agent's
        scratch folder, where a planted ``json.py`` would be what ``python3 -c`` imports),
        with the answer on its stdin: exit 0 is right."""
        from agentos.sandbox.confine import CheckConfiner

        folder = self.base / "grade" / name
        folder.mkdir(parents=True)
        answer_file = folder / "answer"
        atomic_write(answer_file, answer)
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/tmp"}
        outcome = CheckConfiner(self.sandbox, self.scene, folder, env["PATH"]).run(
            f"( {spec.command} ) < {shlex.quote(str(answer_file))}", env, COMMAND_TIMEOUT
        )
        if outcome.passed:
            return ev.Grade(1.0, f"`{spec.command}` accepted the answer")
        why = "timed out" if outcome.timed_out else f"exited {outcome.exit_code}"
        last = [line for line in outcome.tail.splitlines() if line.strip()][-1:]
        return ev.Grade(0.0, f"`{spec.command}` {why}" + (f": {last[0]}" if last else ""))


def grade_answer(spec: EvaluatorSpec, answer: str, expected: Any) -> ev.Grade:
    """The answer graded by one of the evaluators run here."""
    how = tuple(spec.normalize)
    if spec.kind == "exact":
        return ev.exact(answer, str(expected), how)
    if spec.kind == "contains":
        return ev.contains(answer, str(expected), how)
    if spec.kind == "regex":
        return ev.regex(answer, str(expected))
    if spec.kind == "numeric":
        try:
            want = float(expected)
        except (TypeError, ValueError):
            return ev.Grade(0.0, f"the task's expected value {expected!r} is not a number")
        return ev.numeric(answer, want, spec.tolerance, spec.relative)
    if spec.kind == "json_equal":
        return ev.json_equal(answer, expected)
    raise BadInput(f"the {spec.kind} evaluator cannot run yet", field="evaluator")


def _changed_lines(repo: Path, base: str, commit: str) -> int:
    from agentos.worktrees import repo as wt

    out = wt.run_git(repo, "diff", "--numstat", base, commit)
    total = 0
    for line in out.splitlines():
        added, removed, _ = [*line.split("\t"), "", "", ""][:3]
        total += sum(int(n) for n in (added, removed) if n.isdigit())
    return total


def _report(
    suite: Suite,
    split: str,
    eval_id: str,
    agent: str,
    tasks: list[Task],
    predictions: list[Prediction],
    sample: dict[str, Any] | None,
    jobs: int,
) -> EvalReport:
    budget = suite.spec.time_budget
    dimensions = {
        "correctness": round(sum(p.score for p in predictions) / len(predictions), 6),
        "time": round(
            sum(max(0.0, 1 - p.seconds / budget) for p in predictions) / len(predictions), 6
        ),
    }
    if suite.spec.mode == "repo":  # smaller work is better: 1 for none, 0 at the budget
        lines = suite.spec.diff_budget
        dimensions["diff_size"] = round(
            sum(max(0.0, 1 - (p.lines_changed or 0) / lines) for p in predictions)
            / len(predictions),
            6,
        )
    spend: dict[str, float | None] = {
        "tokens": suite.spec.token_budget,
        "cost": suite.spec.cost_budget,
    }
    for name, most in spend.items():  # a task that reported nothing scores 0 on it
        if most is not None:
            used = [getattr(p, name) for p in predictions]
            dimensions[name] = round(
                sum(0.0 if u is None else max(0.0, 1 - u / most) for u in used) / len(predictions),
                6,
            )
    weights = {k: w for k, w in suite.spec.weights.items() if k in dimensions and w > 0}
    composite = round(
        sum(dimensions[k] * w for k, w in weights.items()) / sum(weights.values())
        if weights
        else dimensions["correctness"],
        6,
    )
    return EvalReport(
        id=eval_id,
        suite=suite.name,
        split=split,
        agent=agent,
        tasks=[t.id for t in tasks],
        sample=sample,
        jobs=jobs,
        dimensions=dimensions,
        composite=composite,
        threshold=suite.spec.threshold,
        passed=composite >= suite.spec.threshold,
        seconds=0.0,
        usage=_usage_total(predictions),
        predictions=predictions,
    )


def _usage_total(predictions: list[Prediction]) -> dict[str, Any]:
    """Tokens and cost summed over the tasks that reported them, and how many did."""
    total = Usage()
    reported = 0
    for p in predictions:
        if p.tokens is not None or p.cost is not None:
            total += Usage(p.tokens, p.cost)
            reported += 1
    return {**total.as_dict(), "reported": reported}


def _write(ws: Workspace, base: Path, report: EvalReport) -> None:
    base.mkdir(parents=True, exist_ok=True)
    predictions = json.dumps([p.as_dict() for p in report.predictions], indent=2).encode()
    atomic_write(base / "predictions.json", predictions)
    body = json.dumps(report.as_dict(), indent=2).encode()
    atomic_write(base / "report.json", body)
    receipt = write_receipt(
        ws,
        "eval",
        {
            "suite": report.suite,
            "split": report.split,
            "agent": report.agent,
            "tasks": len(report.tasks),
            "sample": report.sample,
            "average": report.average,
            "composite": report.composite,
            "passed": report.passed,
            "report_sha256": sha256_bytes(body),
            "predictions_sha256": sha256_bytes(predictions),
        },
        run_id=report.id,
    )
    report.receipt = receipt.id
