"""Eval reports kept in ``.agentos/evals/<id>/``: listing them, reading one back, and
comparing two runs of the same suite task by task and dimension by dimension."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from agentos.errors import BadInput, NotFound, ValidationFailed
from agentos.workspace.layout import Workspace

_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def evals_dir(ws: Workspace) -> Path:
    return ws.state_dir / "evals"


def load_report(ws: Workspace, eval_id: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The report of eval ``eval_id`` and its predictions."""
    if not _ID.fullmatch(eval_id):
        raise BadInput(f"not an eval id: {eval_id!r}", field="ID")
    folder = evals_dir(ws) / eval_id
    if not (folder / "report.json").is_file():
        raise NotFound(f"no eval {eval_id!r}", field="ID")
    try:
        report = json.loads((folder / "report.json").read_bytes())
        predictions = json.loads((folder / "predictions.json").read_bytes())
    except (OSError, ValueError) as exc:
        raise ValidationFailed(f"cannot read the report: {exc}", file=folder) from None
    if not isinstance(report, dict) or not isinstance(predictions, list):
        raise ValidationFailed("not an eval report", file=folder)
    return report, predictions


def list_reports(ws: Workspace) -> list[dict[str, Any]]:
    """Every kept report, newest first (a damaged one is left out)."""
    out = []
    folder = evals_dir(ws)
    for path in folder.iterdir() if folder.is_dir() else []:
        try:
            out.append(load_report(ws, path.name)[0])
        except (BadInput, NotFound, ValidationFailed):
            continue
    return sorted(out, key=lambda r: (r.get("started_at", 0), r.get("id", "")), reverse=True)


def compare(ws: Workspace, a: str, b: str) -> dict[str, Any]:
    """What changed from eval ``a`` to eval ``b`` of the same suite and split: each
    dimension, the composite, and every task both ran (b's score minus a's)."""
    (ra, pa), (rb, pb) = load_report(ws, a), load_report(ws, b)
    if (ra.get("suite"), ra.get("split")) != (rb.get("suite"), rb.get("split")):
        raise BadInput(
            f"eval {a} is of {ra.get('suite')}/{ra.get('split')} and eval {b} of "
            f"{rb.get('suite')}/{rb.get('split')}: only runs of one suite and split compare",
            field="B",
        )
    scores_a = {p["task"]: p["score"] for p in pa}
    scores_b = {p["task"]: p["score"] for p in pb}
    dims = sorted(set(ra["dimensions"]) & set(rb["dimensions"]))
    return {
        "a": {"id": a, "agent": ra["agent"], "composite": ra["composite"]},
        "b": {"id": b, "agent": rb["agent"], "composite": rb["composite"]},
        "suite": ra["suite"],
        "split": ra["split"],
        "composite": round(rb["composite"] - ra["composite"], 6),
        "dimensions": {d: round(rb["dimensions"][d] - ra["dimensions"][d], 6) for d in dims},
        "tasks": [
            {"task": t, "a": scores_a[t], "b": scores_b[t], "delta": scores_b[t] - scores_a[t]}
            for t in scores_a
            if t in scores_b
        ],
        "only_in_a": [t for t in scores_a if t not in scores_b],
        "only_in_b": [t for t in scores_b if t not in scores_a],
    }
