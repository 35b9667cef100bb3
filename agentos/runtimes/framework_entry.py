"""Inside the agent's pane: run a package's LangChain or CrewAI entry.

Usage: python -m agentos.runtimes.framework_entry langchain|crewai PACKAGE_DIR
       MODULE:ATTR STATE_DIR [MODEL]

``MODULE:ATTR`` is either the object itself (a Runnable, an agent, a Crew) or a factory
that returns one. A factory is called with the keyword arguments it names, out of:

- ``request``, ``context``, ``feedback`` (str), ``repo`` and ``worktree`` (the checkout it
  works in, also the current directory), ``inputs`` (a dict of those), ``model`` (the
  package's model name or None);
- ``llm``: the package's Ollama model in the framework's own type (langchain-ollama's
  ``ChatOllama``, crewai's ``LLM("ollama/...")``), or None when the package sets no model
  and builds its own;
- ``tools``: read_file, write_file, list_files and run_command confined to the worktree,
  as the framework's own tool objects.

LangChain: an agent (a LangGraph graph, e.g. from ``langchain.agents.create_agent``) gets
the task as its first user message and its steps are printed as they happen; a chat model
gets the task as a prompt; any other Runnable is invoked with ``inputs`` (so a prompt
template can use ``{request}``, ``{context}``, ``{repo}``). CrewAI: ``kickoff(inputs=...)``.
The result is printed last, so it is what the run receipt's output tail shows.
"""

from __future__ import annotations

import inspect
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentos.runtimes import prompt
from agentos.runtimes.entry import load_entry
from agentos.runtimes.worktree_tools import SCHEMAS, WorktreeTools

# crewai otherwise phones home (telemetry, a PyPI version check), waiting ~15 s when
# offline, and asks about tracing; a package that lists one of these in `env` decides.
CREWAI_ENV = {
    "CREWAI_DISABLE_TELEMETRY": "true",
    "OTEL_SDK_DISABLED": "true",
    "CREWAI_TRACING_ENABLED": "false",
    "CREWAI_DISABLE_TRACKING": "true",
    "CREWAI_DISABLE_VERSION_CHECK": "true",
}
SHOWN = 400  # characters of each intermediate step printed to the pane


class EntryError(Exception):
    """The package's entry is not something this runtime can run."""


def _say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _short(text: str) -> str:
    text = text.strip()
    return text if len(text) <= SHOWN else text[:SHOWN] + " [...]"


def _ollama_host() -> str | None:
    return os.environ.get("OLLAMA_HOST") or None


# -- what a factory can ask for ---------------------------------------------------------


def _langchain_llm(model: str | None) -> Any:
    if model is None:
        return None
    from langchain_ollama import ChatOllama

    from agentos.runtimes.ollama_agent import NUM_CTX

    return ChatOllama(model=model, base_url=_ollama_host(), num_ctx=NUM_CTX)


def _langchain_tools(worktree: WorktreeTools) -> list[Any]:
    from langchain_core.tools import StructuredTool

    def make(name: str) -> Any:
        def run(**kwargs: Any) -> str:
            return worktree.call(name, kwargs)

        spec = SCHEMAS[name]
        return StructuredTool.from_function(
            func=run, name=name, description=spec["description"], args_schema=spec["parameters"]
        )

    return [make(name) for name in SCHEMAS]


def _crewai_llm(model: str | None) -> Any:
    if model is None:
        return None
    from crewai import LLM

    from agentos.runtimes.frameworks import parse_host

    return LLM(model=f"ollama/{model}", base_url=parse_host(_ollama_host()))


def _crewai_tools(worktree: WorktreeTools) -> list[Any]:
    from crewai.tools import tool

    @tool("read_file")
    def read_file(path: str) -> str:
        """Read a text file of the repository (path relative to the repository root)."""
        return worktree.call("read_file", {"path": path})

    @tool("write_file")
    def write_file(path: str, content: str) -> str:
        """Create or overwrite a file of the repository with the whole new content."""
        return worktree.call("write_file", {"path": path, "content": content})

    @tool("list_files")
    def list_files(path: str = ".") -> str:
        """List the files under a directory of the repository ('.' for all of it)."""
        return worktree.call("list_files", {"path": path})

    @tool("run_command")
    def run_command(command: str) -> str:
        """Run a bash command in the repository root; returns its exit code and output."""
        return worktree.call("run_command", {"command": command})

    return [read_file, write_file, list_files, run_command]


def _const(value: Any) -> Callable[[], Any]:
    return lambda: value


def _offers(framework: str, model: str | None) -> dict[str, Callable[[], Any]]:
    """What a factory may ask for, each built only when asked."""
    cwd = str(Path.cwd())
    inputs = {
        "request": prompt.request(),
        "context": prompt.context(),
        "feedback": prompt.feedback(),
        "repo": cwd,
    }
    worktree = WorktreeTools(cwd)
    llm = _langchain_llm if framework == "langchain" else _crewai_llm
    tools = _langchain_tools if framework == "langchain" else _crewai_tools
    return {
        **{name: _const(value) for name, value in inputs.items()},
        "worktree": lambda: cwd,
        "inputs": lambda: dict(inputs),
        "model": lambda: model,
        "llm": lambda: llm(model),
        "tools": lambda: tools(worktree),
    }


def call_factory(factory: Callable[..., Any], offers: dict[str, Callable[[], Any]]) -> Any:
    params = inspect.signature(factory).parameters.values()
    kwargs: dict[str, Any] = {}
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        kwargs = {name: make() for name, make in offers.items()}
    for p in params:
        if p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            continue
        if p.name in offers:
            kwargs[p.name] = offers[p.name]()
        elif p.default is inspect.Parameter.empty:
            raise EntryError(f"the entry asks for {p.name!r}; it can ask for " + ", ".join(offers))
    return factory(**kwargs)


def build(framework: str, target: Any, offers: dict[str, Callable[[], Any]]) -> Any:
    runnable = hasattr(target, "invoke") if framework == "langchain" else hasattr(target, "kickoff")
    if not runnable and callable(target):
        target = call_factory(target, offers)
    wanted = "a Runnable or an agent" if framework == "langchain" else "a Crew"
    if not hasattr(target, "invoke" if framework == "langchain" else "kickoff"):
        raise EntryError(f"the entry gave {type(target).__name__}, not {wanted}")
    return target


# -- running ----------------------------------------------------------------------------


def _text(value: Any) -> str:
    content = getattr(value, "content", value)
    if isinstance(content, list):  # content blocks
        return "".join(b.get("text", "") if isinstance(b, dict) else str(b) for b in content)
    return content if isinstance(content, str) else str(content)


def _is_graph(obj: Any) -> bool:
    return any(cls.__module__.startswith("langgraph.") for cls in type(obj).__mro__)


def _show_message(message: Any) -> str:
    prompt.heartbeat()
    kind = getattr(message, "type", "")
    for call in getattr(message, "tool_calls", None) or []:
        _say(f"[tool] {call.get('name')}({_short(str(call.get('args')))})")
    text = _text(message)
    if kind == "tool":
        _say(f"[tool result] {_short(text)}")
    elif text.strip():
        _say(text.strip())
    return text if kind == "ai" else ""


def run_langchain(target: Any) -> str:
    from langchain_core.language_models import BaseLanguageModel

    if _is_graph(target):
        task = {"messages": [{"role": "user", "content": prompt.user_message()}]}
        last = ""
        for update in target.stream(task, {"recursion_limit": 100}, stream_mode="updates"):
            for node_output in (update or {}).values():
                messages = node_output.get("messages", []) if isinstance(node_output, dict) else []
                for message in messages:
                    last = _show_message(message) or last
        return last
    if isinstance(target, BaseLanguageModel):
        return _text(target.invoke(prompt.user_message()))
    inputs = {
        "request": prompt.request(),
        "context": prompt.context(),
        "feedback": prompt.feedback(),
        "repo": str(Path.cwd()),
        "input": prompt.request(),
    }
    result = target.invoke(inputs)
    if isinstance(result, dict):
        for key in ("output", "messages", "text", "result"):
            if key in result:
                value = result[key]
                return _text(value[-1] if key == "messages" and value else value)
    return _text(result)


def _crewai_step(step: Any) -> None:
    """Print each step of a crew (tool uses, answers) to the pane as it happens."""
    prompt.heartbeat()
    tool = getattr(step, "tool", None)
    if tool:
        _say(f"[tool] {tool}({_short(str(getattr(step, 'tool_input', '')))})")
        result = getattr(step, "result", None)
        if result:
            _say(f"[tool result] {_short(str(result))}")
        return
    text = getattr(step, "output", None) or getattr(step, "text", None)
    if text:
        _say(_short(str(text)))


def run_crewai(target: Any, inputs: dict[str, Any]) -> str:
    if getattr(target, "step_callback", False) is None:
        target.step_callback = _crewai_step
    result = target.kickoff(inputs=inputs)
    raw = getattr(result, "raw", result)
    return raw if isinstance(raw, str) else str(raw)


def main(argv: list[str]) -> int:
    if len(argv) not in (4, 5) or argv[0] not in ("langchain", "crewai"):
        _say(
            "usage: python -m agentos.runtimes.framework_entry langchain|crewai "
            "PACKAGE_DIR MODULE:ATTR STATE_DIR [MODEL]"
        )
        return 2
    framework, package_dir, entry, state_dir = argv[0], Path(argv[1]), argv[2], argv[3]
    model = argv[4] if len(argv) == 5 else None
    if framework == "crewai":
        for name, value in CREWAI_ENV.items():
            os.environ.setdefault(name, value)
        # crewai keeps its databases under CREWAI_STORAGE_DIR (default: ~/.local/share/<cwd
        # name>); keep them with the run, outside the worktree, gone at teardown.
        os.environ.setdefault("CREWAI_STORAGE_DIR", str(Path(state_dir).resolve() / "crewai"))
    _say(
        f"[agentos] {framework} entry {entry}"
        + (
            f" with the Ollama model {model} at {_ollama_host() or 'the default address'}"
            if model
            else ""
        )
    )
    offers = _offers(framework, model)
    try:
        target = build(framework, load_entry(package_dir, entry), offers)
        output = (
            run_langchain(target)
            if framework == "langchain"
            else run_crewai(target, offers["inputs"]())
        )
    except EntryError as exc:
        _say(f"[agentos] {entry}: {exc}")
        return 2
    except Exception as exc:  # the package's own failure: top level of the agent, shown in the pane
        traceback.print_exc(file=sys.stdout)
        _say(f"[agentos] the {framework} agent failed: {type(exc).__name__}: {exc}")
        return 1
    _say(f"[agentos] {framework} result:\n{output.strip()}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
