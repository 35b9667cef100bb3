"""Runs the implementation under verification once (``_impl/_runner.py``): the function
named by argv[1], the arguments as JSON on stdin, the result (or the exception's type and
message) as the last line of stdout."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    data = json.load(sys.stdin)
    try:
        function = getattr(importlib.import_module("tool"), sys.argv[1])
        result = function(*data["args"], **data["kwargs"])
        line = json.dumps({"result": result})
    except Exception as exc:  # the tests judge it: the shim raises the same type
        line = json.dumps({"error": type(exc).__name__, "message": str(exc)})
    sys.stdout.write("\n" + line + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
