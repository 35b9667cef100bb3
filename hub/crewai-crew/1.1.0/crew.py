"""A two-agent CrewAI crew for AgentOS's `crewai` runtime: an engineer makes the change,
a reviewer checks it and fixes what is wrong.

AgentOS calls build() with what it names: `llm` is the package's Ollama model as a crewai
LLM, `tools` are read_file / write_file / list_files / run_command confined to the
worktree. The crew is kicked off with inputs {request, context, feedback, repo}, which
fill the {placeholders} of the task descriptions. To use another model, drop `model:`
from agent.yaml and build the LLM here (listing its key in `env`).
"""

from crewai import Agent, Crew, Process, Task


def build(llm, tools):
    engineer = Agent(
        role="Software engineer",
        goal="Make exactly the change the request asks for, in the repository's style",
        backstory="You work in a git worktree of your own and change files with your tools. "
                  "Automatic checks decide whether your work is accepted.",
        llm=llm, tools=tools, allow_delegation=False)
    reviewer = Agent(
        role="Code reviewer",
        goal="Make sure the change is complete, correct and tested",
        backstory="You read the changed files, run the tests, and fix what is wrong.",
        llm=llm, tools=tools, allow_delegation=False)
    change = Task(
        description="Request: {request}\n\nFailures of the last attempt, if any:\n"
                    "{feedback}\n\nRelevant parts of the repository:\n{context}",
        expected_output="A short summary of the files changed and why.",
        agent=engineer)
    review = Task(
        description="Review the change made for this request and fix anything missing or "
                    "wrong, running the tests where there are some: {request}",
        expected_output="What was checked, what was fixed, and the test results.",
        agent=reviewer, context=[change])
    return Crew(agents=[engineer, reviewer], tasks=[change, review],
                process=Process.sequential)
