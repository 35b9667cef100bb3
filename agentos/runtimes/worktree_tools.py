"""The four tools a framework agent gets to change code: read, write, list, run.

Paths are relative to the agent's worktree and may not leave it (``..``, absolute paths
and symlinks pointing outside are refused), nor touch ``.git``. ``run_command`` runs in
the worktree with a time limit; it is not a sandbox, but the agent's environment is the
scrubbed one AgentOS gave it. Every tool returns text for the model, errors included,
so a model's mistake is something it can read and correct, never a crash of the agent.

Used by the ollama agent (JSON schemas below) and, wrapped by each framework's own tool
type, by langchain and crewai packages that ask for ``tools``.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

MAX_READ = 60_000  # characters returned by read_file (about 15k tokens)
MAX_OUTPUT = 20_000  # characters of command output returned
MAX_LISTED = 500
COMMAND_TIMEOUT = 300


class ToolError(Exception):
    """A tool call the model got wrong; its text goes back to the model."""


class WorktreeTools:
    def __init__(self, root: Path | str) -> None:
        self.root = Path(root).resolve()

    def _path(self, rel: str) -> Path:
        if not isinstance(rel, str) or not rel.strip():
            raise ToolError("a path is required")
        target = (self.root / rel).resolve()
        if target != self.root and self.root not in target.parents:
            raise ToolError(f"{rel!r} is outside the worktree")
        if ".git" in target.relative_to(self.root).parts:
            raise ToolError(f"{rel!r} is inside .git, which tools may not touch")
        return target

    def read_file(self, path: str) -> str:
        """Read a text file of the repository (path relative to its root)."""
        target = self._path(path)
        if not target.is_file():
            raise ToolError(f"{path!r} is not a file")
        text = target.read_text(encoding="utf-8", errors="replace")
        if len(text) > MAX_READ:
            return text[:MAX_READ] + f"\n[... truncated: {len(text)} characters in all]"
        return text

    def write_file(self, path: str, content: str) -> str:
        """Create or overwrite a file of the repository with the given content."""
        target = self._path(path)
        if not isinstance(content, str):
            raise ToolError("content must be a string")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, encoding="utf-8")
        return f"wrote {len(content)} characters to {target.relative_to(self.root)}"

    def list_files(self, path: str = ".") -> str:
        """List the files under a directory of the repository (default: all of it)."""
        base = self._path(path or ".")
        if not base.is_dir():
            raise ToolError(f"{path!r} is not a directory")
        found: list[str] = []
        for item in sorted(base.rglob("*")):
            rel = item.relative_to(self.root)
            if ".git" in rel.parts or not item.is_file():
                continue
            found.append(str(rel))
            if len(found) >= MAX_LISTED:
                found.append(f"[... more than {MAX_LISTED} files]")
                break
        return "\n".join(found) or "(no files)"

    def run_command(self, command: str) -> str:
        """Run a shell command in the repository's root; returns its exit code and output."""
        if not isinstance(command, str) or not command.strip():
            raise ToolError("a command is required")
        try:
            proc = subprocess.run(
                ["bash", "-c", command],
                cwd=self.root,
                text=True,
                capture_output=True,
                timeout=COMMAND_TIMEOUT,
                stdin=subprocess.DEVNULL,
                errors="replace",
            )
        except subprocess.TimeoutExpired:
            return f"exit code: timeout after {COMMAND_TIMEOUT}s"
        output = proc.stdout + proc.stderr
        if len(output) > MAX_OUTPUT:
            output = "[... truncated]\n" + output[-MAX_OUTPUT:]
        return f"exit code: {proc.returncode}\n{output}"

    def functions(self) -> dict[str, Callable[..., str]]:
        return {
            "read_file": self.read_file,
            "write_file": self.write_file,
            "list_files": self.list_files,
            "run_command": self.run_command,
        }

    def call(self, name: str, arguments: Any) -> str:
        """Run tool ``name`` with the model's arguments; errors come back as text."""
        func = self.functions().get(name)
        if func is None:
            return f"error: there is no tool {name!r}; use one of {', '.join(SCHEMAS)}"
        if not isinstance(arguments, dict):
            return f"error: the arguments of {name} must be an object"
        try:
            return func(**arguments)
        except ToolError as exc:
            return f"error: {exc}"
        except TypeError as exc:
            return f"error: bad arguments for {name}: {exc}"
        except OSError as exc:
            return f"error: {exc.strerror or exc}"


def _schema(description: str, params: dict[str, str], *optional: str) -> dict[str, Any]:
    return {
        "description": description,
        "parameters": {
            "type": "object",
            "properties": {
                name: {"type": "string", "description": text} for name, text in params.items()
            },
            "required": [name for name in params if name not in optional],
        },
    }


# name -> description and JSON-schema parameters (the ollama / OpenAI tool format)
SCHEMAS: dict[str, dict[str, Any]] = {
    "read_file": _schema(
        "Read a text file of the repository.", {"path": "Path relative to the repository root."}
    ),
    "write_file": _schema(
        "Create or overwrite a file of the repository.",
        {
            "path": "Path relative to the repository root.",
            "content": "The whole new content of the file.",
        },
    ),
    "list_files": _schema(
        "List the files under a directory of the repository.",
        {"path": "Directory relative to the repository root; '.' for all."},
        "path",
    ),
    "run_command": _schema(
        "Run a shell command in the repository root and return its "
        "exit code and output (e.g. to run the tests).",
        {"command": "The bash command line."},
    ),
}


def ollama_tools() -> list[dict[str, Any]]:
    return [
        {"type": "function", "function": {"name": name, **spec}} for name, spec in SCHEMAS.items()
    ]
