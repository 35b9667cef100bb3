"""What makes a hub package a tool package: the files it holds. Apart from the spec's model
(:mod:`agentos.synthesis.spec`) so that the MCP server can tell whether the hub holds any
tool package without building that model."""

from __future__ import annotations

from pathlib import Path

SPEC_FILE = "spec.json"
TOOL_FILE = "tool.py"
TESTS_DIR = "tests"
TEST_FILE = "tests/test_tool.py"


def is_tool_package(package_dir: Path) -> bool:
    return (package_dir / SPEC_FILE).is_file() and (package_dir / TOOL_FILE).is_file()
