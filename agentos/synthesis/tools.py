"""Calling an installed tool package: its arguments checked against its spec, the tool
run confined as any agent is (no network, limits, a time-out), its result checked against
the spec's return type.

A tool package is a hub package with ``spec.json`` and ``tool.py``; its entry,
``run_tool:main``, is AgentOS's own runner (``agentos/synthesis/_run_tool.py``, copied in
at registration): the request is the arguments as JSON, the result comes back through
``$AGENTOS_OUTPUT_FILE``.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentos.errors import BadInput, OperationFailed
from agentos.hub.manifest import Manifest
from agentos.hub.store import Hub
from agentos.run.oneshot import read_output, run_once
from agentos.run.store import new_run_id
from agentos.run.values import tail
from agentos.sandbox import choose
from agentos.sandbox.confine import Scene
from agentos.synthesis.package import SPEC_FILE, is_tool_package
from agentos.synthesis.spec import ToolSpec, check_args, load_spec
from agentos.synthesis.spec import matches as type_matches
from agentos.workspace.files import AgentFiles
from agentos.workspace.layout import Workspace

RESULT_MAX = 1 << 20  # bytes of a result that are read


@dataclass(frozen=True)
class Tool:
    name: str
    version: str
    spec: ToolSpec
    path: Path
    manifest: Manifest


def installed_tools(ws: Workspace) -> list[Tool]:
    """The active version of every tool package in the hub, by name."""
    hub = Hub(ws.hub_dir)
    out = []
    for info, manifest in hub.active():
        if is_tool_package(info.path):
            try:
                spec = load_spec(info.path / SPEC_FILE)
            except BadInput:
                continue  # a broken one is left out; `hub verify` names it
            out.append(Tool(info.name, info.version, spec, info.path, manifest))
    return sorted(out, key=lambda t: t.name)


def get_tool(ws: Workspace, ref: str) -> Tool:
    hub = Hub(ws.hub_dir)
    try:
        info, manifest = hub.get(ref)
    except BadInput as exc:
        raise exc.with_context(field="NAME") from None
    if not is_tool_package(info.path):
        raise BadInput(f"{manifest.ref} is not a tool package (no spec.json)", field="NAME")
    hub.check_intact(info.name, info.version)
    return Tool(info.name, info.version, load_spec(info.path / SPEC_FILE), info.path, manifest)


def call_tool(ws: Workspace, ref: str, args_text: str) -> Any:
    """The tool's result for these arguments (a JSON object as text); bad arguments are
    :class:`BadInput` (exit 2), a tool that fails or returns the wrong type
    :class:`OperationFailed` (exit 1) with its last line."""
    tool = get_tool(ws, ref)
    args = check_args(tool.spec, args_text)
    call_id = new_run_id()
    base = ws.state_dir / "tools" / call_id
    files = AgentFiles(base / "run", base / "tool.log")
    output = files.io / "result.json"
    settings = ws.settings.sandbox
    scene = Scene(settings, ws.root, base, Path(os.environ.get("HOME", "/")))
    try:
        done = run_once(
            ws,
            choose(settings),
            scene,
            tool.manifest,
            tool.path,
            run_id=call_id,
            workdir=base / "work",
            request=json.dumps(args),
            files=files,
            timeout=float(tool.manifest.timeout),
            env={"AGENTOS_OUTPUT_FILE": str(output)},
        )
        text = read_output(output, RESULT_MAX)
        if done.limit == "time":
            raise OperationFailed(f"{tool.name} ran out of time ({tool.manifest.timeout}s)")
        if text is None:
            last = [line for line in tail(files.log, 4000).splitlines() if line.strip()][-1:]
            raise OperationFailed(
                f"{tool.name} failed (exit {done.exit_code})" + (f": {last[0]}" if last else "")
            )
    finally:
        shutil.rmtree(base, ignore_errors=True)
    try:
        result = json.loads(text)["result"]
    except (ValueError, KeyError, TypeError):
        raise OperationFailed(f"{tool.name} wrote no result") from None
    if not type_matches(tool.spec.return_type, result):
        raise OperationFailed(
            f"{tool.name} returned {type(result).__name__}; its spec says {tool.spec.return_type}"
        )
    return result
