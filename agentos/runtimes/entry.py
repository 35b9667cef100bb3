"""Inside the agent's pane: import a package's ``module:callable`` and call it.

Usage: python -m agentos.runtimes.entry PACKAGE_DIR MODULE:CALLABLE CONTEXT_FILE
The request comes from AGENTOS_REQUEST. Exits with the callable's return value.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from typing import Any


def load_entry(package_dir: Path, entry: str) -> Any:
    module_name, _, attr = entry.partition(":")
    sys.path.insert(0, str(package_dir))
    return getattr(importlib.import_module(module_name), attr)


def main(argv: list[str]) -> int:
    package_dir, entry, context_file = Path(argv[0]), argv[1], Path(argv[2])
    context = context_file.read_text(encoding="utf-8") if context_file.exists() else ""
    func = load_entry(package_dir, entry)
    result = func(
        request=os.environ.get("AGENTOS_REQUEST", ""), worktree=os.getcwd(), context=context
    )
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
