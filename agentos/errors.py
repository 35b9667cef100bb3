"""The one exception tree of AgentOS.

Every error carries the context a person needs to act on it: the file and the field it is
about, and a ``hint`` (what to do about it, such as the command to run) kept apart from the
message, so that the CLI, ``--json`` callers and MCP tool errors show the same text and a
program can read the hint alone. The CLI maps :class:`BadInput` to exit code 2 and
:class:`OperationFailed` to exit code 1; the MCP server turns both into tool errors with the
same one-line text.

A stable import, with :mod:`agentos.sdk` (``__all__`` lists what is public).
"""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "REQUEST_MAX_BYTES",
    "AgentOSError",
    "BadInput",
    "Conflict",
    "DatabaseCorrupt",
    "DatabaseLocked",
    "EnvironmentBroken",
    "HostileArchive",
    "MissingTool",
    "NotFound",
    "OperationFailed",
    "RequestBlocked",
    "StateUnavailable",
    "Tampered",
    "TaskFailed",
    "TooLarge",
    "ValidationFailed",
    "VerifyFailed",
    "check_request",
]


class AgentOSError(Exception):
    """Base of every error AgentOS raises on purpose."""

    exit_code = 1

    def __init__(
        self,
        message: str,
        *,
        file: str | Path | None = None,
        field: str | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.file = str(file) if file is not None else None
        self.field = field
        self.hint = hint

    def with_context(
        self,
        *,
        message: str | None = None,
        file: str | Path | None = None,
        field: str | None = None,
        hint: str | None = None,
    ) -> AgentOSError:
        """This error, of the same class and with what else it carries (problems, questions,
        failures), told where it happened: each part given replaces this one's."""
        import copy

        told = copy.copy(self)
        if message is not None:
            told.message = message
        if file is not None:
            told.file = str(file)
        if field is not None:
            told.field = field
        if hint is not None:
            told.hint = hint
        told.args = (told.message,)
        return told

    def __reduce__(self) -> tuple[object, ...]:
        """Pickled (a process pool, Ray) as its class, its attributes and all, whatever the
        class's own constructor takes."""
        return (_rebuilt, (type(self), self.__dict__))

    def __str__(self) -> str:
        """``file: field: message (hint)``, one line, the parts there are."""
        parts = [p for p in (self.file, self.field) if p]
        text = ": ".join([*parts, self.message])
        return f"{text} ({self.hint})" if self.hint else text


class BadInput(AgentOSError):
    """The user gave something we cannot use: exit code 2."""

    exit_code = 2


class ValidationFailed(BadInput):
    """A YAML file or value does not fit its schema."""


class TooLarge(ValidationFailed):
    """A file or value is over the size AgentOS reads of its kind (:mod:`agentos.shared.limits`):
    refused before it is parsed."""


class NotFound(BadInput):
    """A named thing (package, card, receipt, run, file) does not exist."""


class HostileArchive(BadInput):
    """An archive tries to write outside its package, or is otherwise unsafe."""


class Conflict(BadInput):
    """The request contradicts what is already recorded (e.g. same version, other content)."""


class MissingTool(BadInput):
    """A program AgentOS needs (tmux, git, a CLI agent) is not installed."""


class EnvironmentBroken(BadInput):
    """The repository's environment cannot run its checks (an interpreter that is missing,
    a test command that cannot start, a suite that does not collect before any agent
    worked on it): the person must fix it, so no agent is retried for it. Exit code 2."""


class DatabaseCorrupt(BadInput):
    """An AgentOS database (``state.db``, ``knowledge.db``) is not a readable SQLite
    database: truncated, overwritten, or another kind of file. Exit code 2."""


class DatabaseLocked(BadInput):
    """Another process held an AgentOS database past the busy timeout; the message names
    it where the system tells. Exit code 2."""


class StateUnavailable(BadInput):
    """The state database on a server (PostgreSQL) cannot be used: unreachable, the
    credentials refused, the database missing, its schema newer than this AgentOS, or the
    connection lost for longer than AgentOS retries it. The message names the URL with its
    password masked, and the fix. Exit code 2."""


class OperationFailed(AgentOSError):
    """The operation ran and failed: exit code 1."""


class RequestBlocked(OperationFailed):
    """The interview blocked the request; ``questions`` are what would unblock it."""

    def __init__(self, message: str, questions: list[str] | None = None) -> None:
        super().__init__(message)
        self.questions = questions or []


class TaskFailed(OperationFailed):
    """Workflow tasks failed and no result came of them; the message names each failed task
    and why (what its run said), ``failures`` holds ``(task id, reason)`` for each."""

    def __init__(self, failures: list[tuple[int, str]], *, hint: str | None = None) -> None:
        shown = "; ".join(f"task {task} failed: {reason}" for task, reason in failures)
        super().__init__(shown, hint=hint)
        self.failures = failures


class VerifyFailed(OperationFailed):
    """A verification found drift or tampering."""

    def __init__(
        self, message: str, problems: list[str] | None = None, *, hint: str | None = None
    ) -> None:
        super().__init__(message, hint=hint)
        self.problems = problems or []


class Tampered(VerifyFailed):
    """An installed package differs from what ``hub.lock`` recorded: it must not run.

    The message is the drift as ``agentos hub verify`` prints it (``NAME@VERSION: REL:
    modified|added|removed``), on one line; ``problems`` holds every line.
    """

    def __init__(self, problems: list[str]) -> None:
        shown = "; ".join(problems[:3])
        more = f"; and {len(problems) - 3} more" if len(problems) > 3 else ""
        super().__init__(
            f"{shown}{more}",
            problems,
            hint="changed since it was installed; `agentos hub verify` checks the whole hub",
        )


def _rebuilt(cls: type[AgentOSError], state: dict[str, object]) -> AgentOSError:
    error = cls.__new__(cls)
    Exception.__init__(error, state.get("message", ""))
    error.__dict__.update(state)
    return error


REQUEST_MAX_BYTES = 65536  # a request travels as one command-line argument (at most 128 KiB)


def check_request(request: str, field: str = "REQUEST") -> str:
    """``request`` when it is a request a person could have written; else :class:`BadInput`:
    empty, holding a NUL, not valid text (bytes that are not UTF-8 reach Python as lone
    surrogates), or over ``REQUEST_MAX_BYTES``."""
    if not request.strip():
        raise BadInput("the request is empty", field=field)
    if "\x00" in request:
        raise BadInput("the request contains a NUL character", field=field)
    try:
        size = len(request.encode("utf-8"))
    except UnicodeEncodeError:
        raise BadInput(
            "the request is not valid text (bytes that are not UTF-8)", field=field
        ) from None
    if size > REQUEST_MAX_BYTES:
        raise BadInput(
            f"the request is too long ({size:,} bytes; the limit is {REQUEST_MAX_BYTES:,})",
            field=field,
        )
    return request
