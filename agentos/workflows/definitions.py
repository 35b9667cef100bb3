"""Workflow definitions: ``workflows/<id>.yaml`` in the workspace (and the bundled ones),
checked before anything runs. The models keep the seed's names.

```yaml
id: bug-fix
name: Bug fix
description: Reproduce a bug, fix it, verify the fix.
phases:
  - id: 1
    name: analyze
    description: Reproduce the bug and find its cause.
    done_definitions: [The bug is reproduced by a failing test, A phase 2 task is created]
    checks: [{name: report written, file_exists: REPORT.md}]   # what makes "done" testable
    agent: claude-coder            # or card: ID; neither: routed like any request
  - id: 2
    name: fix
    description: Fix the bug.
    done_definitions: [The fix is in, The tests pass]
    checks: [{name: tests pass, tests: []}]
    changes: true                  # its work merges; a phase without it changes nothing
config:
  has_result: true
  result_criteria: The bug is fixed and a test proves it
  result_checks: [{name: tests pass, tests: []}]
  on_result_found: stop_all       # or do_nothing
launch_template:
  parameters:
    - {name: bug_description, label: Bug, type: textarea, required: true}
    - {name: severity, type: dropdown, options: [Critical, High, Medium, Low], default: Medium}
  phase_1_task_prompt: "Severity {severity}. Reproduce and fix: {bug_description}"
```

A field AgentOS does not know, a phase id given twice, an agent not in the hub or a card
not in the workspace, a ``{placeholder}`` the template's parameters do not define: one line
naming the file and the field, exit code 2.
"""

from __future__ import annotations

import re
import string
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from agentos.errors import AgentOSError, BadInput, ValidationFailed
from agentos.shared import limits
from agentos.shared.checks import CheckSpec
from agentos.shared.models import Name, StrictModel, load_yaml_model
from agentos.workflows.similarity import DEFAULT_THRESHOLD

BUNDLED = Path(__file__).resolve().parent / "_bundled"
_REF = re.compile(r"^[a-z0-9][a-z0-9-]*(@\S+)?$")

ParameterType = Literal["text", "textarea", "dropdown", "number", "boolean"]


class LaunchParameter(StrictModel):
    name: str
    label: str = ""
    type: ParameterType = "text"
    required: bool = False
    default: str | float | bool | None = None
    description: str = ""
    options: list[str] = Field(default_factory=list)  # dropdown: the values it takes

    @field_validator("name")
    @classmethod
    def _identifier(cls, value: str) -> str:
        if not value.isidentifier():
            raise ValueError(f"{value!r} is not a parameter name (letters, digits, _)")
        return value

    @model_validator(mode="after")
    def _options(self) -> LaunchParameter:
        if self.type == "dropdown" and not self.options:
            raise ValueError(f"{self.name}: a dropdown needs `options`")
        if self.type != "dropdown" and self.options:
            raise ValueError(f"{self.name}: only a dropdown has `options`")
        if self.default is not None:
            self.coerce(self.default)
        return self

    def coerce(self, value: Any) -> str:
        """A value for this parameter as the prompt shows it; ValueError saying why not."""
        if self.type == "dropdown":
            if str(value) not in self.options:
                raise ValueError(f"{self.name}: {value!r} is not one of {', '.join(self.options)}")
            return str(value)
        if self.type == "number":
            try:
                number = float(value)
            except (TypeError, ValueError):
                raise ValueError(f"{self.name}: {value!r} is not a number") from None
            return f"{number:g}"
        if self.type == "boolean":
            text = str(value).lower()
            if text not in ("true", "false", "yes", "no", "1", "0"):
                raise ValueError(f"{self.name}: {value!r} is not true or false")
            return "true" if text in ("true", "yes", "1") else "false"
        return str(value)


class LaunchTemplate(StrictModel):
    parameters: list[LaunchParameter] = Field(default_factory=list)
    phase_1_task_prompt: str = Field(min_length=1)

    @model_validator(mode="after")
    def _placeholders(self) -> LaunchTemplate:
        names = [p.name for p in self.parameters]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"parameter {twice[0]!r} is given twice")
        for placeholder in placeholders(self.phase_1_task_prompt):
            if placeholder not in names:
                raise ValueError(
                    f"phase_1_task_prompt: {{{placeholder}}} is not a parameter "
                    f"({', '.join(names) or 'there are none'})"
                )
        return self

    def render(self, values: dict[str, Any]) -> str:
        """The phase-1 prompt with the values in; BadInput naming the parameter."""
        known = {p.name: p for p in self.parameters}
        for name in values:
            if name not in known:
                raise BadInput(
                    f"unknown parameter {name!r} (the template takes: "
                    f"{', '.join(known) or 'none'})",
                    field="--param",
                )
        filled: dict[str, str] = {}
        for p in self.parameters:
            value = values.get(p.name, p.default)
            if value is None or (isinstance(value, str) and not value.strip() and p.required):
                if p.required:
                    raise BadInput(f"{p.name}: a required parameter is missing", field="--param")
                value = ""
            try:
                filled[p.name] = p.coerce(value) if value != "" else ""
            except ValueError as exc:
                raise BadInput(str(exc), field="--param") from None
        return self.phase_1_task_prompt.format_map(filled)


def placeholders(template: str) -> list[str]:
    """The ``{names}`` of a template (``{{`` and ``}}`` are literal braces)."""
    try:
        return [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
    except ValueError as exc:
        raise ValueError(f"phase_1_task_prompt: {exc}") from None


class Phase(StrictModel):
    id: int = Field(ge=1)
    name: str = Field(min_length=1)
    description: str = Field(min_length=1)
    done_definitions: list[str] = Field(default_factory=list)
    checks: list[CheckSpec] = Field(default_factory=list)  # what makes done testable
    agent: str | None = None  # NAME[@VERSION] that takes this phase's tasks
    card: str | None = None  # or the card that routes them; neither: routing decides
    # Whether its tasks may change the repository: true, their passing work merges into
    # the target branch; false (the default), nothing of theirs lands: their work stays
    # on its branches (`agentos runs diff RUN`) and a result is checked on it there.
    changes: bool = False
    notes: str = ""

    @field_validator("agent")
    @classmethod
    def _agent(cls, value: str | None) -> str | None:
        if value is not None and not _REF.match(value):
            raise ValueError(f"{value!r} is not NAME or NAME@VERSION")
        return value

    @model_validator(mode="after")
    def _one_taker(self) -> Phase:
        if self.agent and self.card:
            raise ValueError("give `agent` or `card`, not both")
        return self


class WorkflowConfig(StrictModel):
    has_result: bool = False
    result_criteria: str = ""
    result_checks: list[CheckSpec] = Field(default_factory=list)  # a result is checked so
    on_result_found: Literal["stop_all", "do_nothing"] = "do_nothing"
    max_concurrent: int = Field(default=2, ge=1, le=64)  # tasks running at once
    max_tasks: int = Field(default=200, ge=1, le=100_000)  # an execution's tasks, at most
    task_deduplication_enabled: bool = True
    similarity_threshold: float = Field(default=DEFAULT_THRESHOLD, gt=0, le=1)


class WorkflowDefinition(StrictModel):
    id: Name
    name: str = Field(min_length=1)
    description: str = ""
    phases: list[Phase] = Field(min_length=1)
    config: WorkflowConfig = WorkflowConfig()
    launch_template: LaunchTemplate | None = None

    @model_validator(mode="after")
    def _phase_ids(self) -> WorkflowDefinition:
        ids = [p.id for p in self.phases]
        twice = sorted({i for i in ids if ids.count(i) > 1})
        if twice:
            raise ValueError(f"phase id {twice[0]} is given twice")
        return self

    def phase(self, phase_id: int) -> Phase:
        for p in self.phases:
            if p.id == phase_id:
                return p
        raise BadInput(
            f"workflow {self.id} has no phase {phase_id} (its phases: "
            f"{', '.join(str(p.id) for p in self.phases)})",
            field="--phase",
        )


def load_workflow(path: Path) -> WorkflowDefinition:
    """A workflow file, checked (its id must be its file's name)."""
    found = load_yaml_model(WorkflowDefinition, path, limits.WORKFLOW)
    if found.id != path.stem:
        raise ValidationFailed(
            f"id {found.id!r} is not the file's name {path.stem!r}", file=path, field="id"
        )
    return found


def check_references(ws: Any, workflow: WorkflowDefinition, path: Path) -> None:
    """Every phase's agent is in the hub, every card in the workspace (one line naming the
    phase's field)."""
    from agentos.hub.store import Hub
    from agentos.routing.cards import load_cards

    hub = Hub(ws.hub_dir)
    cards: set[str] | None = None
    for i, phase in enumerate(workflow.phases):
        if phase.agent:
            try:
                hub.get(phase.agent)
            except AgentOSError as exc:
                raise ValidationFailed(
                    exc.message, file=path, field=f"phases[{i}].agent", hint=exc.hint
                ) from None
        if phase.card:
            if cards is None:
                cards = {c.id for c in load_cards(ws.cards_dir).cards}
            if phase.card not in cards:
                raise ValidationFailed(
                    f"no card {phase.card!r} in {ws.cards_dir}",
                    file=path,
                    field=f"phases[{i}].card",
                )


def workflow_files(ws: Any) -> list[Path]:
    """The workspace's workflows, then the bundled ones it does not override."""
    own = sorted((ws.root / "workflows").glob("*.yaml"))
    names = {p.stem for p in own}
    return own + [p for p in sorted(BUNDLED.glob("*.yaml")) if p.stem not in names]


def find_workflow(ws: Any, workflow_id: str) -> tuple[WorkflowDefinition, Path]:
    for path in workflow_files(ws):
        if path.stem == workflow_id:
            found = load_workflow(path)
            check_references(ws, found, path)
            return found, path
    raise BadInput(f"no workflow {workflow_id!r} (see `agentos workflows list`)", field="WORKFLOW")


def lint(ws: Any, paths: list[Path]) -> list[str]:
    """Every problem of each workflow file, one line each."""
    problems = []
    for path in paths:
        try:
            check_references(ws, load_workflow(path), path)
        except AgentOSError as exc:
            problems.append(str(exc))
    return problems
