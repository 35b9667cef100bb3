"""What the CLI runtimes (claude-code, gemini-cli, codex) share: finding the CLI and
building the prompt from the package's prompt file, the request, the context and any
fed-back gate failures. The prompt reaches the CLI as an argument, never as keystrokes."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from agentos.errors import MissingTool
from agentos.manifest import Manifest
from agentos.runtimes import CONTEXT_FILE, FEEDBACK_FILE, AgentTask

MAX_INLINE_CONTEXT = 24_000  # characters of context put into the prompt itself


@dataclass(frozen=True)
class CliAgent:
    runtime: str
    program: str
    install_hint: str

    def executable(self) -> str:
        path = shutil.which(self.program)
        if path is None:
            raise MissingTool(
                f"the {self.runtime} runtime needs the `{self.program}` CLI, which is not "
                f"installed ({self.install_hint})",
                field="runtime",
            )
        return path

    def preflight(self, manifest: Manifest, package_dir: Path) -> None:
        self.executable()

    def path_dirs(self) -> list[str]:
        path = shutil.which(self.program)
        return [str(Path(path).resolve().parent), str(Path(path).parent)] if path else []

    def prompt(self, task: AgentTask) -> str:
        parts = [
            (task.package_dir / task.manifest.entry).read_text(encoding="utf-8").strip(),
            "## Request",
            task.request.strip(),
        ]
        if task.context_file.exists():
            context = task.context_file.read_text(encoding="utf-8")
            if len(context) > MAX_INLINE_CONTEXT:
                context = context[:MAX_INLINE_CONTEXT] + f"\n[... the rest is in {CONTEXT_FILE}]"
            parts += ["## Context from the knowledge store", context.strip()]
        if task.feedback_file.exists():
            parts += [
                f"## Attempt {task.attempt}: the checks failed last time ({FEEDBACK_FILE})",
                task.feedback_file.read_text(encoding="utf-8").strip(),
            ]
        text = "\n\n".join(p for p in parts if p) + "\n"
        (task.run_dir / "prompt.md").write_text(text, encoding="utf-8")
        return text
