from agentos.cli import run

run()
