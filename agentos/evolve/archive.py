"""An evolution's records: how it was asked for, each generation's metadata, and the
archive of every generation made, in ``.agentos/evolve/<evo>/``.

- ``evolution.json``: the spec, written once when the evolution starts;
- ``state.json``: whether a process drives it now (its pid), and why it stopped;
- ``gen-<n>/metadata.json``: one generation, written whole once it is decided (the truth
  about it); ``gen-<n>/patch.diff``: its change against its parent;
- ``archive.jsonl``: append-only snapshots, one per line, each the whole archive so far
  (``{"archive": [0, 1, ...], "entries": {"0": {...}, ...}}``), as HyperFlow keeps it.
  The last line is the current state; a torn last line (a process killed while writing)
  is skipped on read and cut off before the next append.

:class:`Evolution` is one evolution's folder; :func:`find_evolution` and
:func:`list_evolutions` find them.
"""

from __future__ import annotations

import json
import os
import time
from contextlib import suppress
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError

from agentos.errors import AgentOSError, BadInput, NotFound, ValidationFailed
from agentos.evolve.selection import Method
from agentos.shared.fs import atomic_write
from agentos.shared.models import Name, StrictModel
from agentos.workspace.layout import Workspace
from agentos.workspace.settings import Backend

Verdict = Literal["initial", "accept", "refine", "reject"]


class EvolutionSpec(StrictModel):
    id: str
    package: Name  # the package that evolves
    version: str  # the version it starts from
    suite: str  # the suite's folder
    suite_name: str
    split: str  # the training split: what generations are scored on and the meta agent sees
    val_split: str | None  # scores that choose parents, when the suite has one
    meta: str  # the meta agent, NAME@VERSION
    generations: int = Field(ge=1)
    children: int = Field(ge=1)
    select: Method
    seed: int
    staged: bool
    jobs: int = Field(ge=1)
    backend: Backend = "local"  # where its evals' tasks run (agentos.cluster)
    created_at: float


class Generation(StrictModel):
    gen: int = Field(ge=0)
    parent: int | None  # None for the initial generation
    round: int = Field(ge=0)  # the selection that chose its parent (0: the initial one)
    verdict: Verdict
    reason: str  # one line: why this verdict
    valid_parent: bool  # may future generations build on it
    commit: str  # its commit in the evolution's repository
    patch_sha256: str | None = None
    lines_changed: int = 0
    score: float | None = None  # what parents are chosen by (validation, else training)
    perfect: bool = False  # every task of that split scored 1
    # Per split: its eval's id, composite and dimensions.
    scores: dict[str, dict[str, Any]] = Field(default_factory=dict)
    selection: dict[str, Any] | None = None  # method, seed and weights that chose the parent
    meta: dict[str, Any] | None = None  # the meta agent: exit code, seconds, limit
    started_at: float
    ended_at: float


class Archive:
    """``archive.jsonl`` of one evolution."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> dict[int, Generation]:
        """The generations of the last complete snapshot, by id."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        lines = data.split(b"\n")
        # A last line without its newline was cut short: skipped, the one before is current.
        complete = lines[:-1]
        for raw in reversed(complete):
            try:
                snapshot = json.loads(raw)
                return {
                    int(k): Generation.model_validate(v) for k, v in snapshot["entries"].items()
                }
            except (ValueError, KeyError, TypeError, ValidationError):
                continue
        return {}

    def append(self, generations: dict[int, Generation]) -> None:
        """One more snapshot: every generation, in id order; durable when it returns."""
        self._cut_torn_tail()
        ids = sorted(generations)
        line = json.dumps(
            {
                "archive": ids,
                "entries": {str(g): generations[g].model_dump(mode="json") for g in ids},
            },
            separators=(",", ":"),
        )
        with self.path.open("ab") as fh:
            fh.write(line.encode() + b"\n")
            fh.flush()
            os.fsync(fh.fileno())

    def _cut_torn_tail(self) -> None:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return
        if data and not data.endswith(b"\n"):
            with self.path.open("r+b") as fh:
                fh.truncate(data.rfind(b"\n") + 1)


def read_json_model(model: type[Any], path: Path) -> Any:
    """A JSON file of AgentOS's own, checked (one line naming it when damaged)."""
    try:
        return model.model_validate_json(path.read_bytes())
    except FileNotFoundError:
        raise
    except (OSError, ValidationError) as exc:
        raise ValidationFailed(f"damaged: {str(exc).splitlines()[0]}", file=path) from None


def write_json_model(path: Path, value: StrictModel) -> None:
    atomic_write(path, value.model_dump_json(indent=2) + "\n")


# --- an evolution's folder ------------------------------------------------------------------


class Evolution:
    """The files of evolution ``evo_id`` (which need not exist yet)."""

    def __init__(self, ws: Workspace, evo_id: str) -> None:
        self.ws, self.id = ws, evo_id
        self.root = evolve_dir(ws) / evo_id

    @property
    def spec_file(self) -> Path:
        return self.root / "evolution.json"

    @property
    def state_file(self) -> Path:
        return self.root / "state.json"

    @property
    def archive(self) -> Archive:
        return Archive(self.root / "archive.jsonl")

    @property
    def repo(self) -> Path:
        return self.root / "repo"

    @property
    def evals(self) -> Path:
        """$AGENTOS_EVAL_DIR: the training evals of every generation so far."""
        return self.root / "evals"

    def gen_dir(self, gen: int) -> Path:
        return self.root / f"gen-{gen}"

    def worktree(self, gen: int) -> Path:
        return self.root / "work" / f"gen-{gen}"

    def spec(self) -> EvolutionSpec:
        if not self.spec_file.is_file():
            raise NotFound(f"no evolution {self.id!r}", field="EVO")
        spec: EvolutionSpec = read_json_model(EvolutionSpec, self.spec_file)
        return spec

    def state(self) -> dict[str, Any]:
        try:
            data = json.loads(self.state_file.read_bytes())
        except (OSError, ValueError):
            return {"status": "created"}
        return data if isinstance(data, dict) else {"status": "created"}

    def set_state(self, status: str, **fields: Any) -> None:
        atomic_write(
            self.state_file,
            json.dumps({"status": status, "updated_at": time.time(), **fields}) + "\n",
        )

    def generations(self) -> dict[int, Generation]:
        """Every decided generation: the archive's, and any whose metadata was written but
        whose snapshot was lost (a process killed between the two, a torn last line)."""
        found = self.archive.read()
        for meta in sorted(self.root.glob("gen-*/metadata.json")):
            gen = gen_number(meta.parent.name)
            if gen is not None and gen not in found:
                with suppress(AgentOSError):
                    found[gen] = read_json_model(Generation, meta)
        return dict(sorted(found.items()))


def evolve_dir(ws: Workspace) -> Path:
    return ws.state_dir / "evolve"


def gen_number(name: str) -> int | None:
    number = name.removeprefix("gen-")
    return int(number) if number.isdigit() else None


def list_evolutions(ws: Workspace) -> list[Evolution]:
    """Every evolution of the workspace, newest first."""
    root = evolve_dir(ws)
    found = [Evolution(ws, p.parent.name) for p in root.glob("*/evolution.json")]
    return sorted(found, key=lambda e: e.id, reverse=True)


def find_evolution(ws: Workspace, evo_id: str | None) -> Evolution:
    """Evolution ``evo_id``, or the newest when None."""
    if evo_id is None:
        found = list_evolutions(ws)
        if not found:
            raise NotFound("no evolution yet (start one with `agentos evolve start`)")
        return found[0]
    if not evo_id.replace("-", "").isalnum():
        raise BadInput(f"not an evolution id: {evo_id!r}", field="EVO")
    evo = Evolution(ws, evo_id)
    evo.spec()  # exists
    return evo
