"""Runs this tool package's function (written by AgentOS into every tool package).

The request ($AGENTOS_REQUEST) is the call's arguments as a JSON object; the result is
written as JSON, ``{"result": ...}``, to $AGENTOS_OUTPUT_FILE (or printed when it is not
set). AgentOS checks the arguments against spec.json before it starts the tool, and the
result's type after.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def main(request: str, worktree: Any = None, context: Any = None) -> int:
    spec = json.loads((HERE / "spec.json").read_text(encoding="utf-8"))
    args = json.loads(request)
    sys.path.insert(0, str(HERE))
    tool = importlib.import_module("tool")  # this package's tool.py
    result = getattr(tool, spec["function_name"])(**args)
    text = json.dumps({"result": result})
    out = os.environ.get("AGENTOS_OUTPUT_FILE")
    if out:
        Path(out).write_text(text, encoding="utf-8")
    else:
        print(text)
    return 0
