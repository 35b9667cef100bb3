"""Inside the agent's pane: a coding agent on a local model, through the ``ollama`` client.

Usage: python -m agentos.runtimes.ollama_agent PROMPT_FILE MODEL

The system prompt is the package's prompt file plus how to use the tools; the first user
message holds the request (AGENTOS_REQUEST), the knowledge store's context and any gate
failures fed back from the last attempt. The model then works in turns: its text is
streamed to stdout (the pane and the log), its tool calls (read_file, write_file,
list_files, run_command, all inside the worktree = the current directory) are run and
their results sent back, until it answers without a tool call. The tokens the server
counted (prompt and reply, every turn) are reported to $AGENTOS_USAGE_FILE. The client reads
OLLAMA_HOST itself (the package must list it in ``env`` to receive it).

Exit codes: 0 the model finished, 1 the server failed or refused, 3 out of turns.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from agentos.runtimes.prompt import heartbeat, user_message
from agentos.runtimes.usage import Usage, report_usage
from agentos.runtimes.worktree_tools import WorktreeTools, ollama_tools

MAX_TURNS = 40
# Ollama's default context window (2-8k tokens, by version) silently cuts long chats from
# the front, system prompt first; a coding agent's files and tool results need more.
NUM_CTX = 16_384
RESULT_ECHO = 300  # characters of each tool result shown in the pane

TOOL_GUIDE = """\
You are working in a git checkout of the repository (your current directory). Change it
with the tools: list_files, read_file, write_file (give the whole new content) and
run_command (e.g. to run the tests). Paths are relative to the repository root. Work until
the request is done, then answer with a short summary and no tool call. Your work is
checked by automatic checks after you finish; only what is in the files counts."""


def _say(text: str, end: str = "\n") -> None:
    sys.stdout.write(text + end)
    sys.stdout.flush()


def _show_call(name: str, args: Any) -> str:
    shown = (
        ", ".join(
            f"{k}={v!r}" if len(repr(v)) < 60 else f"{k}=<{len(str(v))} chars>"
            for k, v in (args or {}).items()
        )
        if isinstance(args, dict)
        else repr(args)
    )
    return f"{name}({shown})"


def chat_turn(
    client: Any, model: str, messages: list[dict[str, Any]]
) -> tuple[str, list[dict[str, Any]], int]:
    """One streamed reply: print its text as it comes; return the text, the tool calls and
    the tokens the server counted (prompt and reply)."""
    content: list[str] = []
    calls: list[dict[str, Any]] = []
    tokens = 0
    for chunk in client.chat(
        model=model,
        messages=messages,
        tools=ollama_tools(),
        stream=True,
        options={"num_ctx": NUM_CTX},
    ):
        tokens += (chunk.prompt_eval_count or 0) + (chunk.eval_count or 0)
        message = chunk.message
        if message.content:
            content.append(message.content)
            _say(message.content, end="")
        for call in message.tool_calls or []:
            calls.append(
                {
                    "function": {
                        "name": call.function.name,
                        "arguments": dict(call.function.arguments or {}),
                    }
                }
            )
    if content:
        _say("")
    return "".join(content), calls, tokens


def run(prompt_file: Path, model: str) -> int:
    import ollama

    tools = WorktreeTools(Path.cwd())
    system = prompt_file.read_text(encoding="utf-8").strip() + "\n\n" + TOOL_GUIDE
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": system},
        {"role": "user", "content": user_message()},
    ]
    client = ollama.Client()  # OLLAMA_HOST, when the package passes it through
    host = os.environ.get("OLLAMA_HOST") or "the default address"
    _say(f"[agentos] model {model} on the Ollama server at {host}; up to {MAX_TURNS} turns")
    used = Usage(tokens=0)
    for turn in range(1, MAX_TURNS + 1):
        heartbeat()
        try:
            content, calls, tokens = chat_turn(client, model, messages)
        except ollama.ResponseError as exc:
            _say(f"[agentos] the Ollama server refused: {exc.error} (status {exc.status_code})")
            return 1
        except ConnectionError as exc:
            _say(f"[agentos] {exc}")
            return 1
        used += Usage(tokens=tokens)
        report_usage(used)
        messages.append(
            {"role": "assistant", "content": content, "tool_calls": calls}
            if calls
            else {"role": "assistant", "content": content}
        )
        if not calls:
            _say(f"[agentos] the model finished after {turn} turn(s)")
            return 0
        for call in calls:
            name, args = call["function"]["name"], call["function"]["arguments"]
            result = tools.call(name, args)
            echo = result if len(result) <= RESULT_ECHO else result[:RESULT_ECHO] + " [...]"
            _say(f"[tool] {_show_call(name, args)} -> {echo}")
            messages.append({"role": "tool", "content": result, "tool_name": name})
    _say(f"[agentos] stopped: the model was still calling tools after {MAX_TURNS} turns")
    return 3


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        _say("usage: python -m agentos.runtimes.ollama_agent PROMPT_FILE MODEL")
        return 2
    return run(Path(argv[0]), argv[1])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
