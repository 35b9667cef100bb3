"""The model API a CLI agent talks to: which of the agent's variables hold its key, and
whether that API takes the key, asked once before anything starts.

A CLI with no key, or with a key its API refuses, would start, fail at its first request
and spend an attempt on what is the environment's fault. So the runtime's preflight finds
the key among the variables the package passes through (``env`` in agent.yaml: nothing
else reaches the agent), and asks the API's model list with it (a ``GET``, no tokens
spent). No key, a refused key or an API that cannot be reached is bad input (exit 2) with
the fix; a key that is accepted is remembered for ten minutes in this process. Variables
that hand authentication to a cloud provider (Bedrock, Vertex AI) are taken as they are:
their credentials are not ours to test.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field

from agentos.errors import MissingTool
from agentos.hub.manifest import Manifest

PROBE_TIMEOUT = 10.0
ACCEPTED_FOR = 600.0  # seconds an accepted key is not asked about again
_PROXIES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy")


class NoKey(MissingTool):
    """The agent has no key its API takes (or no API to ask): ``detail`` says what, ``fix``
    what to do; the message is both."""

    def __init__(self, detail: str, fix: str) -> None:
        super().__init__(f"{detail}; {fix}", field="env")
        self.detail, self.fix = detail, fix


@dataclass(frozen=True)
class ApiKey:
    """A variable that may hold the key, and how a request carries it."""

    var: str
    header: str
    prefix: str = ""
    also: tuple[tuple[str, str], ...] = ()  # headers this kind of key needs besides


@dataclass(frozen=True)
class ModelApi:
    label: str  # "the Anthropic API"
    base_var: str  # the variable that points the CLI at another address
    default_base: str
    models_path: str  # GET here lists the models: the key check
    keys: tuple[ApiKey, ...]  # in the order the CLI prefers them
    cloud: tuple[str, ...]  # variables that select a cloud provider's own authentication
    fix: str  # how to get a key, for the error
    headers: dict[str, str] = field(default_factory=dict)

    def credential(self, manifest: Manifest, environ: Mapping[str, str]) -> str:
        """What the agent will authenticate with (a description for doctor), after
        checking it with the API; MissingTool with the fix otherwise."""
        passed = {k: v for k, v in manifest.passed(environ).items() if v}
        for var in self.cloud:
            if var in passed:
                return f"{var} is set: authentication is the cloud provider's"
        key = next((k for k in self.keys if k.var in passed), None)
        if key is None:
            withheld = [k.var for k in self.keys if environ.get(k.var)]
            why = (
                f"{' and '.join(withheld)} is set here, but the package does not pass it to "
                "its agent (add it to `env` in agent.yaml)"
                if withheld
                else f"none of {', '.join(k.var for k in self.keys)} is set"
            )
            raise NoKey(f"{manifest.name} has no key for {self.label}: {why}", self.fix)
        base = (passed.get(self.base_var) or self.default_base).rstrip("/")
        problem = _ask(
            base + self.models_path,
            {key.header: key.prefix + passed[key.var], **self.headers, **dict(key.also)},
            {k: v for k, v in passed.items() if k in _PROXIES},
        )
        if problem is not None:
            refused = problem.startswith("refused")
            raise NoKey(
                f"{manifest.name}: {self.label} at {base} {problem}"
                + (f" ({key.var})" if refused else ""),
                self.fix if refused else f"check the network, or {self.base_var}",
            )
        return f"{key.var} accepted by {base}"


_accepted: dict[str, float] = {}
_lock = threading.Lock()


def _ask(url: str, headers: dict[str, str], proxies: Mapping[str, str]) -> str | None:
    """None when the API at ``url`` takes the key in ``headers``; else what went wrong."""
    seen = hashlib.sha256(json.dumps([url, sorted(headers.items())]).encode()).hexdigest()
    with _lock:
        if time.monotonic() - _accepted.get(seen, -ACCEPTED_FOR) < ACCEPTED_FOR:
            return None
    # The agent's proxy is the one its package passes, not ours.
    wanted = {
        "http": proxies.get("HTTP_PROXY") or proxies.get("http_proxy"),
        "https": proxies.get("HTTPS_PROXY") or proxies.get("https_proxy"),
    }
    handler = urllib.request.ProxyHandler({k: v for k, v in wanted.items() if v})
    request = urllib.request.Request(url, headers=headers, method="GET")
    try:
        with urllib.request.build_opener(handler, _NoRedirect()).open(
            request, timeout=PROBE_TIMEOUT
        ):
            pass
    except urllib.error.HTTPError as exc:
        if exc.code in (400, 401, 403):
            return f"refused the key: HTTP {exc.code}{_message(exc)}"
        if 300 <= exc.code < 400:  # the key is never carried to where it points
            where = exc.headers.get("Location", "elsewhere") if exc.headers else "elsewhere"
            return f"cannot be reached (it redirects to {where[:200]})"
        # Anything else (a proxy without a models list, a server error) says nothing
        # about the key: the CLI's own requests will tell.
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return f"cannot be reached ({getattr(exc, 'reason', exc)})"
    with _lock:
        _accepted[seen] = time.monotonic()
    return None


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is an answer, not followed: urllib would carry the key to its target."""

    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


def _message(exc: urllib.error.HTTPError) -> str:
    """The API's own words for the refusal, when it gave them (one line, short)."""
    try:
        body = json.loads(exc.read(4096).decode("utf-8", "replace"))
    except (OSError, ValueError):
        return ""
    error = body.get("error") if isinstance(body, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    return f" ({' '.join(str(message).split())[:160]})" if message else ""


ANTHROPIC = ModelApi(
    label="the Anthropic API",
    base_var="ANTHROPIC_BASE_URL",
    default_base="https://api.anthropic.com",
    models_path="/v1/models",
    keys=(
        ApiKey("ANTHROPIC_API_KEY", "x-api-key"),
        ApiKey("ANTHROPIC_AUTH_TOKEN", "authorization", "Bearer "),
        ApiKey(
            "CLAUDE_CODE_OAUTH_TOKEN",
            "authorization",
            "Bearer ",
            (("anthropic-beta", "oauth-2025-04-20"),),
        ),
    ),
    cloud=("CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX"),
    fix="export ANTHROPIC_API_KEY (a key from console.anthropic.com), or "
    "CLAUDE_CODE_OAUTH_TOKEN (from `claude setup-token`)",
    headers={"anthropic-version": "2023-06-01"},
)

GEMINI = ModelApi(
    label="the Gemini API",
    base_var="GOOGLE_GEMINI_BASE_URL",
    default_base="https://generativelanguage.googleapis.com",
    models_path="/v1beta/models",
    keys=(ApiKey("GEMINI_API_KEY", "x-goog-api-key"), ApiKey("GOOGLE_API_KEY", "x-goog-api-key")),
    cloud=("GOOGLE_GENAI_USE_VERTEXAI",),
    fix="export GEMINI_API_KEY (a key from aistudio.google.com/apikey)",
)

OPENAI = ModelApi(
    label="the OpenAI API",
    base_var="OPENAI_BASE_URL",
    default_base="https://api.openai.com/v1",
    models_path="/models",
    keys=(ApiKey("OPENAI_API_KEY", "authorization", "Bearer "),),
    cloud=(),
    fix="export OPENAI_API_KEY (a key from platform.openai.com/api-keys)",
)
