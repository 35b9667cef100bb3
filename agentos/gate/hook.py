"""The Claude Code ``Stop`` hook: the gate run when Claude Code wants to stop, blocking it
(exit 2, with the failures as the reason) until the checks pass.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentos.errors import NotFound, ValidationFailed
from agentos.gate import builtin
from agentos.gate.claude_settings import HOOK_TIMEOUT, merge_stop_hook
from agentos.shared.checks import CheckSpec
from agentos.workspace.layout import Workspace

if TYPE_CHECKING:
    pass
from agentos.gate.environment import gate_confiner, gate_environment
from agentos.gate.repo import tree_profile
from agentos.gate.results import GateResult
from agentos.gate.runner import gate_judging, run_gate

# --- the Claude Code Stop hook -----------------------------------------------------------


def repo_root(path: Path) -> Path:
    """The top of the git working tree holding ``path``; ``path`` itself outside git."""
    path = Path(path).resolve()
    if not path.is_dir():
        raise NotFound(f"{path} is not a directory", field="repo")
    return builtin.toplevel(path) or path


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
