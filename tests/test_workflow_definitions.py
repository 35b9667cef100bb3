"""Workflow definitions (issue 21): the models, the launch template, and bad YAML as one
line naming the file and field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentos.errors import BadInput
from agentos.workflows.definitions import BUNDLED, load_workflow

GOOD: dict[str, Any] = {
    "id": "two-step",
    "name": "Two steps",
    "phases": [
        {
            "id": 1,
            "name": "plan",
            "description": "Plan it",
            "checks": [{"name": "plan", "file_exists": "PLAN.md"}],
        },
        {"id": 2, "name": "do", "description": "Do it", "done_definitions": ["It is done"]},
    ],
    "config": {"has_result": True, "on_result_found": "stop_all"},
    "launch_template": {
        "parameters": [
            {"name": "goal", "type": "textarea", "required": True},
            {"name": "size", "type": "dropdown", "options": ["S", "M", "L"], "default": "M"},
            {"name": "budget", "type": "number", "default": 3},
            {"name": "careful", "type": "boolean", "default": False},
        ],
        "phase_1_task_prompt": "Goal: {goal} (size {size}, budget {budget}, careful {careful})",
    },
}  # fmt: skip


def write(root: Path, data: dict[str, Any], name: str | None = None) -> Path:
    folder = root / "workflows"
    folder.mkdir(exist_ok=True)
    path = folder / f"{name or data['id']}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_the_bundled_workflows_load_and_lint_clean(cli: Any) -> None:
    assert sorted(p.stem for p in BUNDLED.glob("*.yaml")) == ["bug-fix", "review-pr"]
    out = cli("workflows", "lint")
    assert out.returncode == 0 and "no problems" in out.stdout, out.stdout
    listed = json.loads(cli("workflows", "list", "--json").stdout)
    assert [w["id"] for w in listed] == ["bug-fix", "review-pr"]


def test_parameters_land_in_the_phase_one_prompt(tmp_path: Path) -> None:
    template = load_workflow(write(tmp_path, GOOD)).launch_template
    assert template is not None
    assert template.render({"goal": "ship it", "size": "L", "careful": "yes"}) == (
        "Goal: ship it (size L, budget 3, careful true)"
    )


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({}, "goal: a required parameter is missing"),
        ({"goal": "x", "size": "XL"}, "size: 'XL' is not one of S, M, L"),
        ({"goal": "x", "colour": "red"}, "unknown parameter 'colour'"),
        ({"goal": "x", "budget": "lots"}, "budget: 'lots' is not a number"),
        ({"goal": "x", "careful": "perhaps"}, "careful: 'perhaps' is not true or false"),
    ],
)
def test_bad_launch_values_are_one_line_naming_the_parameter(
    tmp_path: Path, values: dict[str, str], message: str
) -> None:
    template = load_workflow(write(tmp_path, GOOD)).launch_template
    assert template is not None
    with pytest.raises(BadInput, match=message):
        template.render(values)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"colour": "red"}, "colour: unknown field"),
        (
            {
                "phases": [
                    {"id": 1, "name": "a", "description": "a"},
                    {"id": 1, "name": "b", "description": "b"},
                ]
            },
            "phase id 1 is given twice",
        ),
        ({"config": {"on_result_found": "explode"}}, "config.on_result_found: Input should be"),
        (
            {"launch_template": {"phase_1_task_prompt": "Do {what}", "parameters": []}},
            "phase_1_task_prompt: {what} is not a parameter",
        ),
        (
            {"phases": [{"id": 1, "name": "a", "description": "a", "agent": "nobody"}]},
            "phases[0].agent: no package 'nobody'",
        ),
        (
            {"phases": [{"id": 1, "name": "a", "description": "a", "card": "no-card"}]},
            "phases[0].card: no card 'no-card'",
        ),
    ],
    ids=["unknown-field", "duplicate-phase", "bad-on-result", "unknown-placeholder",
         "unknown-agent", "unknown-card"],
)  # fmt: skip
def test_bad_workflow_yaml_is_one_line_naming_file_and_field(
    cli: Any, ws: Any, change: dict[str, Any], message: str
) -> None:
    path = write(ws.root, {**GOOD, **change})

    out = cli("workflows", "lint", str(path))

    assert out.returncode == 2, out.stdout + out.stderr
    (line,) = out.stdout.splitlines()
    assert line.startswith(f"{path}: ") and message in line, line
