"""agentos.yaml: the workspace's settings, and the check that they are valid.

Validating them imports pydantic (about 0.1 s):
:meth:`agentos.workspace.layout.Workspace.check_settings` does it only when the file changed
since it was last found valid.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, Field, field_validator, model_validator

from agentos.sandbox.settings import SandboxSettings, Size
from agentos.shared import limits
from agentos.shared.checks import CheckSpec
from agentos.shared.models import StrictModel, load_yaml_model


class ReceiptSettings(StrictModel):
    redact: bool = False  # the request as its sha256, free text as its length
    # A mac on every receipt under .agentos/receipts.key; false: hashes and links only.
    sign: bool = True


Axis = Literal["goal", "constraints", "scope", "context", "success"]


class InterviewSettings(StrictModel):
    threshold: float = Field(default=0.4, ge=0, le=1)  # the most ambiguity a run starts with
    floors: dict[Axis, float] = Field(default_factory=dict)  # an axis below its floor blocks
    weights: dict[Axis, float] = Field(default_factory=dict)  # each axis's share of the score
    rewrite_model: str | None = None  # an Ollama model that proposes clearer rewrites

    @model_validator(mode="after")
    def _in_unit_range(self) -> InterviewSettings:
        for table in (self.floors, self.weights):
            for axis, value in table.items():
                if not 0 <= value <= 1:
                    raise ValueError(f"{axis}: {value} is outside 0..1")
        return self


class BudgetSettings(StrictModel):
    """``run.budget``: what one agent may use over its attempts in a run; past it, it is
    stopped (``limit: budget`` in its gate receipt). Tokens and cost as the agent reports
    them (agentos.runtimes.usage); cost in the currency of ``prices``."""

    tokens: int | None = Field(default=None, gt=0)  # tokens, input and output together
    cost: float | None = Field(default=None, gt=0, allow_inf_nan=False)  # in prices' currency


class ModelPrice(StrictModel):
    """What a model costs per million tokens, for the agents whose CLI reports no cost."""

    input: float = Field(ge=0, allow_inf_nan=False)  # per million input tokens
    output: float = Field(ge=0, allow_inf_nan=False)  # per million output tokens
    # per million input tokens read from the model's cache; none: the input price
    cached_input: float | None = Field(default=None, ge=0, allow_inf_nan=False)


class RunSettings(StrictModel):
    retries: int = Field(default=2, ge=0, le=20)  # attempts after the first, gate failures fed back
    guardian: bool = True  # a run starts the workspace's guardian unless one runs
    timeout: int = Field(default=1800, gt=0)  # seconds a whole run may take
    # The agent (NAME or NAME@VERSION) that takes requests no routing card matches.
    default_agent: str | None = Field(default=None, pattern=r"^[a-z0-9][a-z0-9-]*(@\S+)?$")
    # What lands on the target branch: one squashed commit per agent, or one for the run.
    squash: Literal["agent", "run"] = "agent"
    # Kept branches of finished runs (and the hidden refs of merged ones) older than this
    # many days are removed by `agentos runs prune` and `agentos gc --branches`.
    keep_days: float = Field(default=14, ge=0)
    budget: BudgetSettings = BudgetSettings()  # none by default


class GuardianSettings(StrictModel):
    interval: float = Field(default=60, ge=0.05)  # seconds between cycles
    stuck_after: float = Field(default=300, gt=0)  # seconds of silence before a nudge
    nudge: str = "Are you stuck? Continue with the task."  # typed into the agent's terminal
    max_restarts: int = Field(default=1, ge=0)  # restarts before an agent is stopped
    kill_after: float = Field(default=900, gt=0)  # seconds of silence before it is stopped


class RepoSettings(StrictModel):
    """How one repository is tested: ``repos:`` in agentos.yaml, or its own .agentos.yaml.

    Every field is optional; what is not set is detected (see :mod:`agentos.gate.repo`)."""

    test: str | None = Field(default=None, min_length=1)  # shell command, run in the tree
    python: str | None = Field(default=None, min_length=1)  # relative to the repository
    env: dict[str, str] = Field(default_factory=dict)
    timeout: float | None = Field(default=None, gt=0)  # seconds for the test check


class SynthesisSettings(StrictModel):
    """``synthesis:``: the hub packages that build a tool, step by step (agentos.synthesis)."""

    spec_agent: str = "synth-spec"  # writes spec.json
    test_agent: str = "synth-tests"  # writes tests/test_tool.py
    impl_agent: str = "synth-impl"  # writes tool.py
    retries: int = Field(default=2, ge=0, le=20)  # implementation attempts after the first
    min_tests: int = Field(default=3, ge=1, le=1000)  # tests the test step must write
    threshold: float = Field(default=0.75, ge=0, le=1)  # a search score that means "exists"
    timeout: int = Field(default=120, gt=0)  # seconds the tests may take


# ``cluster.address``: auto (the cluster this machine joined), ray://HOST:PORT (Ray Client) or
# HOST:PORT (the head's GCS); HOST a name, an IPv4 address or a bracketed IPv6 one.
_ADDRESS = r"^(auto|(ray://)?([A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\]):[0-9]{1,5})$"
# A Ray resource name an agent may ask for (`agentos_slot`, a runtime, a label of your own).
_RESOURCE = r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$"


# Where a run's agents (an eval's, a workflow's tasks) work: this machine, or a Ray cluster.
Backend = Literal["local", "ray"]


class NodeSettings(StrictModel):
    """``cluster.node``: what this machine gives the agents it runs as a node of a cluster
    (read on the node, from its own AGENTOS_HOME; see docs/cluster.md)."""

    # repository (the folder's name at the driver) -> the virtual environment its tests and
    # agents use here; a repository not listed gets one built from its own files
    environments: dict[str, str] = Field(default_factory=dict)
    # what pip is given when this node builds a repository's environment
    # (e.g. [--no-index, --find-links, /srv/wheelhouse] on a private network)
    pip: list[str] = Field(default_factory=list)


class ClusterSettings(StrictModel):
    """``cluster:``: where a run's agents, an eval's tasks and a workflow's tasks run
    (agentos.cluster, docs/cluster.md). ``local`` (the default) is this machine."""

    backend: Backend = "local"
    address: str = "auto"  # the Ray cluster to join: auto, ray://HOST:PORT or HOST:PORT
    # resources every agent asks for besides its slot and its runtime (a label of yours)
    resources: dict[str, float] = Field(default_factory=dict)
    # seconds a remote agent outlives a driver that stopped renewing its lease (killed)
    lease: float = Field(default=15, gt=0, le=3600)
    node: NodeSettings = NodeSettings()

    @field_validator("address")
    @classmethod
    def _address(cls, value: str) -> str:
        if not re.match(_ADDRESS, value):
            raise ValueError(f"{value!r} is not auto, ray://HOST:PORT or HOST:PORT")
        port = int(value.rpartition(":")[2]) if value != "auto" else 1
        if not 0 < port < 65536:
            raise ValueError(f"{value!r}: the port {port} is not 1..65535")
        return value

    @field_validator("resources")
    @classmethod
    def _resources(cls, value: dict[str, float]) -> dict[str, float]:
        for name, amount in value.items():
            if not re.match(_RESOURCE, name):
                raise ValueError(f"{name!r} is not a Ray resource name")
            if not 0 < amount <= 1_000_000:
                raise ValueError(f"{name}: {amount} is not a positive amount")
        return value


class DedupSettings(StrictModel):
    """``workflows.dedup``: how a workflow task is found to repeat a live one. The words
    (agentos.workflows.similarity) always; with ``embeddings``, also the vectors of an
    Ollama model (through the ollama client, OLLAMA_HOST), compared by cosine: a task is a
    duplicate when either says so. A server that cannot be reached is one warning and the
    words alone."""

    embeddings: str | None = None  # ollama:MODEL
    threshold: float = Field(default=0.9, gt=0, le=1)  # the cosine that means "the same task"

    @field_validator("embeddings")
    @classmethod
    def _ollama_model(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"ollama:[\w.:/-]+", value):
            raise ValueError(f"{value!r} is not ollama:MODEL (e.g. ollama:nomic-embed-text)")
        return value


class WorkflowSettings(StrictModel):
    """``workflows:``: what every workflow execution in this workspace shares."""

    dedup: DedupSettings = DedupSettings()


class Settings(StrictModel):
    # Where the state is: a PostgreSQL URL (postgresql://USER@HOST:PORT/DB, no password:
    # AGENTOS_STATE_URL, PGPASSWORD or ~/.pgpass give it) that many machines share; none:
    # SQLite in .agentos/state.db. AGENTOS_STATE_URL wins over it (docs/state.md).
    state: str | None = None
    receipts: ReceiptSettings = ReceiptSettings()
    interview: InterviewSettings = InterviewSettings()
    run: RunSettings = RunSettings()
    checks: list[CheckSpec] = Field(default_factory=list)  # checks of every run here
    guardian: GuardianSettings = GuardianSettings()
    sandbox: SandboxSettings = SandboxSettings()
    # repository path (~ expanded; relative to the workspace) -> how it is tested
    repos: dict[str, RepoSettings] = Field(default_factory=dict)
    synthesis: SynthesisSettings = SynthesisSettings()
    # model (as its CLI names it) -> its price per million tokens; a model not listed has
    # no cost unless its CLI reports one
    prices: dict[str, ModelPrice] = Field(default_factory=dict)
    cluster: ClusterSettings = ClusterSettings()  # where agents run: here, or on Ray
    workflows: WorkflowSettings = WorkflowSettings()

    @field_validator("state")
    @classmethod
    def _state_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        from agentos.errors import BadInput
        from agentos.state.location import SETTING, parse_url, refuse_password

        try:
            refuse_password(value)
            parse_url(value, source=SETTING)
        except BadInput as exc:
            raise ValueError(exc.message) from None
        return value


def load_settings(path: Path) -> Settings:
    """The settings in ``path``; the defaults when it does not exist."""
    if not path.exists():
        return Settings()
    return load_yaml_model(Settings, path, limits.SETTINGS)


_DEFAULTS_HEAD = """\
# AgentOS workspace settings. Every key is optional: a key not set here takes its default.
# Below, commented out, is every key with its default, generated from the settings model;
# what each means is in docs/formats.md ("agentos.yaml: the workspace's settings").
# Uncomment a key, and the keys it is under, to change it. The keys left commented out
# follow the defaults of the AgentOS that reads this file.
"""


def defaults_yaml() -> str:
    """agentos.yaml as ``agentos init`` writes it: every setting of :class:`Settings` with its
    default, made from the model (so it cannot drift), commented out (so it pins nothing)."""
    import yaml

    data = _readable(Settings, Settings().model_dump(mode="json"))
    body = yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=1000)
    return _DEFAULTS_HEAD + "".join(f"# {line}\n" for line in body.splitlines())


def _readable(model: type[BaseModel], data: dict[str, Any]) -> dict[str, Any]:
    """``data`` (a model's JSON dump) with its sizes written as agentos.yaml's readers
    write them (``4G``, not 4294967296)."""
    out = dict(data)
    for name, info in model.model_fields.items():
        value = out.get(name)
        kind = info.annotation
        if isinstance(value, dict) and isinstance(kind, type) and issubclass(kind, BaseModel):
            out[name] = _readable(kind, value)
        elif isinstance(value, int) and Size in (kind, *get_args(kind)):
            out[name] = _size(value)
    return out


def _size(size: int) -> str | int:
    for unit, shift in (("T", 40), ("G", 30), ("M", 20), ("K", 10)):
        if size % (1 << shift) == 0:
            return f"{size >> shift}{unit}"
    return size
