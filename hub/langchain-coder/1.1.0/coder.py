"""A LangChain coding agent for AgentOS's `langchain` runtime.

AgentOS calls build() with what it names: `llm` is the package's Ollama model as a
langchain-ollama ChatOllama, `tools` are read_file / write_file / list_files /
run_command confined to the worktree. The agent then gets the request and the
knowledge-store context as its first message. To use another model, drop `model:` from
agent.yaml and build it here (e.g. ChatOpenAI, listing its key in `env`).
"""

from langchain.agents import create_agent

SYSTEM = """You are a careful software engineer working on a git repository, in a worktree
of your own (your current directory). Use the tools to look at the files, change them
(write_file takes the whole new content) and run the tests. Change only what the request
asks for. Do not commit. When the work is done, answer with a short summary; automatic
checks decide whether it is accepted."""


def build(llm, tools):
    return create_agent(llm, tools, system_prompt=SYSTEM)
