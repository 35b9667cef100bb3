"""AgentOS's stand-in for ``tool.py`` while a tool's tests run (verification).

Every call of the tool's function runs the implementation in a child process of its own
(``_impl/_runner.py``), its arguments and result passed as JSON, so the code under test
never runs in pytest's process: it cannot exit pytest early, patch its reporting, or
import a module of its own in pytest's place. An exception the implementation raises comes
back as the same built-in exception type (anything else as RuntimeError).
"""

from __future__ import annotations

import builtins
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

_RUNNER = Path(__file__).resolve().parent / "_impl" / "_runner.py"
FUNCTION_NAME = "FUNCTION_NAME"  # replaced by the spec's function name
CALL_TIMEOUT = 60


def _call(args: list[Any], kwargs: dict[str, Any]) -> Any:
    try:
        proc = subprocess.run(
            [sys.executable, "-I", str(_RUNNER), FUNCTION_NAME],
            input=json.dumps({"args": args, "kwargs": kwargs}),
            capture_output=True,
            text=True,
            timeout=CALL_TIMEOUT,
        )
    except (TypeError, ValueError) as exc:  # arguments that are not JSON
        raise TypeError(f"the arguments are not JSON values: {exc}") from None
    lines = proc.stdout.strip().splitlines()
    try:
        out = json.loads(lines[-1])
    except (IndexError, ValueError):
        tail = proc.stderr.strip()[-800:]
        raise RuntimeError(f"the tool did not answer (exit {proc.returncode}): {tail}") from None
    if "error" in out:
        kind = getattr(builtins, str(out.get("error")), None)
        if not (isinstance(kind, type) and issubclass(kind, Exception)):
            kind = RuntimeError
        raise kind(out.get("message", ""))
    return out.get("result")


def _function(*args: Any, **kwargs: Any) -> Any:
    return _call(list(args), kwargs)


globals()[FUNCTION_NAME] = _function
