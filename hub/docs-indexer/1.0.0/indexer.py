"""docs-indexer: feed the target repository into the workspace's knowledge store.

The python runtime imports this module from the package directory and calls
``main(request=..., worktree=..., context=...)`` with the agent's worktree as the
current directory. AGENTOS_WORKSPACE names the workspace and AGENTOS_REPO the target
repository; without them the workspace is found as the CLI finds it and the worktree is
indexed. Indexing is incremental, so a second run costs almost nothing. No file in the
repository is changed.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def main(request: str = "", worktree: str = ".", context: str = "") -> int:
    from agentos.errors import AgentOSError
    from agentos.knowledge import open_store
    from agentos.workspace import Workspace, find_workspace

    try:
        home = os.environ.get("AGENTOS_WORKSPACE")
        ws = Workspace(Path(home).resolve()) if home else find_workspace()
        repo = Path(os.environ.get("AGENTOS_REPO") or worktree or ".").resolve()
        print(f"docs-indexer: indexing {repo} into {ws.knowledge_db}", flush=True)
        with open_store(ws) as store:
            stats = store.add([repo])
            info = store.stats()
    except AgentOSError as exc:
        print(f"docs-indexer: error: {exc}", file=sys.stderr, flush=True)
        return exc.exit_code
    print(f"docs-indexer: {stats.seen} files seen, {stats.read} read, {stats.added} added, "
          f"{stats.updated} updated, {stats.removed} removed, {stats.chunks} chunks written "
          f"in {stats.seconds:.2f}s", flush=True)
    for error in stats.errors:
        print(f"docs-indexer: not read: {error}", file=sys.stderr, flush=True)
    print(f"docs-indexer: the store now holds {info['files']} files in {info['chunks']} "
          "chunks", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(worktree=os.getcwd()))
