"""The exception tree: every error keeps its class and what it carries when it is told where
it happened, and survives pickling (a process pool, a cluster)."""

from __future__ import annotations

import inspect
import pickle

import pytest

from agentos import errors


def an_error(cls: type[errors.AgentOSError]) -> errors.AgentOSError:
    """One of ``cls``, made the way its own constructor wants."""
    if cls is errors.TaskFailed:
        return errors.TaskFailed([(3, "no routing card matches the request")], hint="name one")
    if cls is errors.Tampered:
        return errors.Tampered(["demo@1.0.0: run.sh: modified"])
    if cls is errors.VerifyFailed:
        return errors.VerifyFailed("drift", ["a: modified"], hint="run `agentos hub verify`")
    if cls is errors.RequestBlocked:
        return errors.RequestBlocked("too vague", ["what should change?"])
    return cls("it broke", file="agentos.yaml", field="run", hint="fix it")


CLASSES = [
    getattr(errors, name)
    for name in errors.__all__
    if inspect.isclass(getattr(errors, name))
    and issubclass(getattr(errors, name), errors.AgentOSError)
]


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_an_error_told_where_it_happened_keeps_its_class_and_what_it_carries(
    cls: type[errors.AgentOSError],
) -> None:
    error = an_error(cls)
    told = error.with_context(field="--agent", hint="set run.default_agent")
    assert type(told) is cls and told is not error
    assert (told.field, told.hint, told.message) == (
        "--agent",
        "set run.default_agent",
        error.message,
    )
    assert {k: v for k, v in vars(told).items() if k not in ("field", "hint")} == {
        k: v for k, v in vars(error).items() if k not in ("field", "hint")
    }
    assert str(told).endswith(f"--agent: {error.message} (set run.default_agent)")
    assert told.exit_code == error.exit_code
    assert (error.field, error.hint) != ("--agent", "set run.default_agent")  # untouched


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_an_error_survives_pickling_with_everything_it_carries(
    cls: type[errors.AgentOSError],
) -> None:
    error = an_error(cls)
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is cls
    assert vars(back) == vars(error) and str(back) == str(error)


def test_the_hint_is_a_field_shown_after_the_message() -> None:
    error = errors.NotFound("no workspace found", hint="run `agentos init`")
    assert (error.message, error.hint) == ("no workspace found", "run `agentos init`")
    assert str(error) == "no workspace found (run `agentos init`)"
    assert str(errors.BadInput("bare")) == "bare"
