"""Optional: task descriptions as vectors from an Ollama model, for deduplication
(``workflows.dedup.embeddings: ollama:MODEL`` in agentos.yaml).

The vectors come from the Ollama API's embeddings through the ``ollama`` client, imported
only when a model is configured. A server that cannot be reached, or a model it does not
have, is one warning (per process and model) and the deterministic similarity alone:
never a failure. Vectors are kept as float32 in state.db; two are compared by cosine.
"""

from __future__ import annotations

import logging
import math
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentos.workspace.layout import Workspace

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 30.0  # seconds for one embedding
_warned: set[str] = set()  # the models this process has warned about


@dataclass(frozen=True)
class Embedder:
    """An Ollama model that embeds task descriptions, and the cosine that means "the same
    task" with it."""

    model: str
    threshold: float
    host: str | None = None  # None: OLLAMA_HOST, else the client's default address
    timeout: float = DEFAULT_TIMEOUT

    def embed(self, text: str) -> Embedding | None:
        """``text``'s vector, or None (after one warning) when the model cannot give it."""
        try:  # heavy and optional: only a configured model pays for them
            import httpx
            import ollama
        except ImportError as exc:
            _warn(self.model, f"the ollama client is not installed ({exc})")
            return None
        try:
            reply = ollama.Client(host=self.host, timeout=self.timeout).embed(
                model=self.model, input=text
            )
            vector = [float(x) for x in reply.embeddings[0]]
        except (ollama.ResponseError, ConnectionError, httpx.HTTPError, IndexError) as exc:
            _warn(self.model, str(exc) or type(exc).__name__)
            return None
        if not vector or not any(vector):
            _warn(self.model, "it returned an empty vector")
            return None
        return Embedding(self.model, tuple(vector), self.threshold)


@dataclass(frozen=True)
class Embedding:
    """A task description's vector, the model it came from and its threshold."""

    model: str
    vector: tuple[float, ...]
    threshold: float


def from_settings(ws: Workspace) -> Embedder | None:
    """The embedder agentos.yaml configures (``workflows.dedup``), or None. Read from the
    validated settings kept by digest, so that a workspace without one imports neither
    pydantic nor ollama here."""
    dedup = ws.settings_data["workflows"]["dedup"]
    if dedup["embeddings"] is None:
        return None
    return Embedder(str(dedup["embeddings"]).removeprefix("ollama:"), float(dedup["threshold"]))


def _warn(model: str, why: str) -> None:
    if model in _warned:
        return
    _warned.add(model)
    log.warning(
        "deduplication by embeddings is off: Ollama model %s gave no vector (%s); "
        "comparing words only",
        model,
        why,
    )


def pack(vector: Sequence[float]) -> bytes:
    return array("f", vector).tobytes()


def unpack(data: bytes) -> array[float]:
    out = array("f")
    out.frombytes(data)
    return out


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """The cosine of two vectors, 0 when their lengths differ or one is zero."""
    if len(a) != len(b):
        return 0.0
    dot = math.fsum(x * y for x, y in zip(a, b, strict=True))
    norm = math.sqrt(math.fsum(x * x for x in a)) * math.sqrt(math.fsum(y * y for y in b))
    return dot / norm if norm else 0.0
