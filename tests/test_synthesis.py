"""Capability synthesis (issue 20) with scripted step agents: search first, then a spec,
tests that must fail against a stub, an implementation verified in the sandbox, and a hub
package only when it is verified."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path
from typing import Any

import pytest
from conftest import missing, write_package

from agentos.hub.store import Hub
from agentos.receipts import list_receipts, parse_receipt

SPEC = {
    "function_name": "reverse_string",
    "parameters": [{"name": "s", "type": "str", "description": "the text"}],
    "return_type": "str",
    "docstring": "Return s with its characters in reverse order.",
}
TESTS = """from tool import reverse_string


def test_a_word():
    assert reverse_string("hello") == "olleh"


def test_empty():
    assert reverse_string("") == ""


def test_one_letter():
    assert reverse_string("a") == "a"
"""
GOOD = "def reverse_string(s: str) -> str:\n    return s[::-1]\n"


def writes(path: str, text: str) -> str:
    """A shell step agent that writes ``text`` to ``path`` in its working directory."""
    return f"mkdir -p \"$(dirname {path})\"\ncat > {path} <<'AGENTOS_EOF'\n{text}\nAGENTOS_EOF\n"


def step_agents(ws: Any, tmp_path: Path, **scripts: str) -> None:
    """Install step agents (name -> script) and choose the first three as the steps."""
    for name, script in scripts.items():
        src = write_package(tmp_path / "steps" / name, name=name, files={"run.sh": script})
        Hub(ws.hub_dir).install(str(src))


@pytest.fixture
def steps(ws: Any, tmp_path: Path) -> None:
    step_agents(
        ws,
        tmp_path,
        **{
            "spec-writer": writes("spec.json", json.dumps(SPEC)),
            "test-writer": writes("tests/test_tool.py", TESTS),
            "impl-writer": writes("tool.py", GOOD),
        },
    )
    use_steps(ws, "spec-writer", "test-writer", "impl-writer")


def use_steps(ws: Any, spec: str, test: str, impl: str, retries: int = 1) -> None:
    ws.settings_file.write_text(
        f"synthesis: {{spec_agent: {spec}, test_agent: {test}, impl_agent: {impl}, "
        f"retries: {retries}}}\n"
    )


def synthesis_receipts(ws: Any) -> list[dict[str, Any]]:
    return [
        parse_receipt(r.path.read_text()).fields for r in list_receipts(ws) if r.kind == "synthesis"
    ]


def test_a_tool_is_specified_tested_implemented_verified_and_registered(
    cli: Any, ws: Any, steps: None
) -> None:
    out = cli("synth", "Reverse a string", "--json")

    assert out.returncode == 0, out.stdout + out.stderr
    result = json.loads(out.stdout)
    assert (result["existing"], result["package"]) == (False, "tool-reverse-string@0.1.0")
    listed = json.loads(cli("hub", "list", "--json").stdout)
    assert any(p["name"] == "tool-reverse-string" for p in listed["packages"])
    assert cli("hub", "verify").returncode == 0
    order = [(r["step"], r["status"]) for r in synthesis_receipts(ws)]
    assert order == [
        ("spec", "done"),
        ("tests", "done"),
        ("implementation", "done"),
        ("verification", "passed"),
        ("registration", "done"),
    ]
    assert all(len(r["output_sha256"]) == 64 for r in synthesis_receipts(ws))
    called = cli("tool", "call", "tool-reverse-string", "--args", '{"s":"hello"}', "--json")
    assert called.returncode == 0, called.stderr
    assert json.loads(called.stdout) == {"result": "olleh"}
    # The package carries its spec, code, tests and a check that is the tests.
    info, manifest = Hub(ws.hub_dir).get("tool-reverse-string")
    assert {p.name for p in info.path.iterdir()} >= {"spec.json", "tool.py", "tests", "agent.yaml"}
    assert [c.name for c in manifest.checks] == ["tool tests"]
    # Asked again, it exists: nothing is built.
    again = json.loads(cli("synth", "reverse a string", "--json").stdout)
    assert again["existing"] is True and again["package"] == "tool-reverse-string@0.1.0"


def test_an_implementer_that_never_passes_changes_nothing(
    cli: Any, ws: Any, steps: None, tmp_path: Path
) -> None:
    step_agents(ws, tmp_path, wrong=writes("tool.py", "def reverse_string(s):\n    return s\n"))
    use_steps(ws, "spec-writer", "test-writer", "wrong", retries=2)
    lock = (ws.hub_dir / "hub.lock").read_bytes()

    out = cli("synth", "Reverse a string", "--json")

    assert out.returncode == 1, out.stdout + out.stderr
    assert "the tests still fail after 3 attempt(s)" in out.stderr
    assert (ws.hub_dir / "hub.lock").read_bytes() == lock
    assert not (ws.hub_dir / "tool-reverse-string").exists()
    verifications = [r for r in synthesis_receipts(ws) if r["step"] == "verification"]
    assert [v["attempt"] for v in verifications] == [1, 2, 3]
    assert "assert 'hello' == 'olleh'" in verifications[-1]["output_tail"]


def test_an_implementer_that_edits_the_tests_is_rejected(
    cli: Any, ws: Any, steps: None, tmp_path: Path
) -> None:
    cheat = writes("tool.py", "def reverse_string(s):\n    return s\n") + writes(
        "tests/test_tool.py", "def test_nothing():\n    pass\n"
    )
    step_agents(ws, tmp_path, cheat=cheat)
    use_steps(ws, "spec-writer", "test-writer", "cheat")
    lock = (ws.hub_dir / "hub.lock").read_bytes()

    out = cli("synth", "Reverse a string")

    assert out.returncode == 1 and "tests changed" in out.stderr, out.stderr
    assert (ws.hub_dir / "hub.lock").read_bytes() == lock


@pytest.mark.parametrize(
    ("tests", "message"),
    [
        (
            "from tool import reverse_string\n\n"
            "def test_a():\n    assert True\n\ndef test_b():\n    assert True\n\n"
            "def test_c():\n    assert 1 == 1\n",
            "3 test(s) pass against a stub that raises NotImplementedError",
        ),
        (
            "from tool import reverse_string\n\n"
            "def test_a():\n    assert reverse_string('ab') == 'ba'\n",
            "1 test(s) in tests/test_tool.py; at least 3 are needed",
        ),
    ],
    ids=["assert-true", "too-few"],
)
def test_tests_that_test_nothing_or_too_few_are_rejected(
    cli: Any, ws: Any, steps: None, tmp_path: Path, tests: str, message: str
) -> None:
    step_agents(ws, tmp_path, weak=writes("tests/test_tool.py", tests))
    use_steps(ws, "spec-writer", "weak", "impl-writer")

    out = cli("synth", "Reverse a string")

    assert out.returncode == 1 and message in out.stderr, out.stderr
    assert [r["step"] for r in synthesis_receipts(ws)] == ["spec", "tests"]  # no implementer


def test_a_request_an_installed_package_covers_runs_no_step_agent(
    cli: Any, ws: Any, steps: None
) -> None:
    out = cli("synth", "run the repository tests", "--json")

    result = json.loads(out.stdout)
    assert result["existing"] is True and result["package"].startswith("test-runner@")
    assert result["match"]["score"] >= 0.75
    assert synthesis_receipts(ws) == []  # no step ran
    assert not (ws.state_dir / "synth").exists()


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({**SPEC, "function_name": "2bad"}, "spec.json: function_name: '2bad' is not a Python"),
        (
            {**SPEC, "parameters": [{"name": "s", "type": "string"}]},
            "spec.json: parameters[0].type: unknown type 'string'",
        ),
        ({**SPEC, "extra": 1}, "spec.json: extra: unknown field"),
    ],
    ids=["bad-name", "unknown-type", "unknown-field"],
)
def test_a_bad_spec_fails_at_the_spec_step_naming_the_field(
    cli: Any, ws: Any, steps: None, tmp_path: Path, spec: dict[str, Any], message: str
) -> None:
    step_agents(ws, tmp_path, badspec=writes("spec.json", json.dumps(spec)))
    use_steps(ws, "badspec", "test-writer", "impl-writer")

    out = cli("synth", "Reverse a string")

    assert out.returncode == 1, out.stderr
    assert len(out.stderr.splitlines()) == 1 and message in out.stderr, out.stderr


def test_bad_arguments_and_vague_requests_are_refused_in_one_line(
    cli: Any, ws: Any, steps: None
) -> None:
    assert cli("synth", "Reverse a string").returncode == 0
    call = ["tool", "call", "tool-reverse-string", "--args"]
    cases = [
        ([*call, '{"t": "x"}'], 2, "unknown parameter 't'"),
        ([*call, '{"s": 5}'], 2, "s: expected str, got int"),
        ([*call, "hello"], 2, "--args: not JSON"),
        (["tool", "call", "calculator", "--args", "{}"], 2, "not a tool package"),
        (["synth", "make a tool"], 1, "does not say what the tool does"),
    ]
    for argv, code, message in cases:
        out = cli(*argv)
        assert out.returncode == code, (argv, out.stderr)
        assert len(out.stderr.splitlines()) == 1 and message in out.stderr, out.stderr


def test_a_synthesized_test_that_reaches_the_network_fails_in_the_sandbox(
    cli: Any, ws: Any, steps: None, tmp_path: Path
) -> None:
    from agentos.sandbox import choose

    if not choose(ws.settings.sandbox).confined:
        missing("no sandbox works here (bubblewrap, or unshare)")
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    reached: list[bool] = []
    listener.settimeout(30)

    def accept() -> None:
        try:
            conn, _ = listener.accept()
            reached.append(True)
            conn.sendall(b"olleh")
            conn.close()
        except OSError:
            pass

    threading.Thread(target=accept, daemon=True).start()
    phone_home = "import socket\nfrom tool import reverse_string\n\n" + "".join(
        f"def test_{i}():\n    s = socket.create_connection(('127.0.0.1', {port}), 2)\n"
        f"    assert s.recv(5).decode() == reverse_string('hello')\n\n"
        for i in range(3)
    )
    step_agents(ws, tmp_path, caller=writes("tests/test_tool.py", phone_home))
    use_steps(ws, "spec-writer", "caller", "impl-writer", retries=0)

    out = cli("synth", "Reverse a string")
    listener.close()

    assert out.returncode == 1, out.stdout + out.stderr
    assert reached == []  # the host's listener was never reached
    (last,) = [r for r in synthesis_receipts(ws) if r["step"] == "verification"]
    assert (
        "ConnectionRefusedError" in last["output_tail"]
        or "Network is unreachable" in (last["output_tail"])
    )


def test_an_mcp_client_synthesizes_a_tool_is_told_the_list_changed_and_calls_it(
    ws: Any, steps: None
) -> None:
    import anyio
    from mcp.types import ServerNotification, ToolListChangedNotification
    from test_mcp_server import connect, error_text, ok

    told: list[str] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, ServerNotification) and isinstance(
            message.root, ToolListChangedNotification
        ):
            told.append(message.root.method)

    async def scenario() -> None:
        async with connect("stdio", ws, message_handler=on_message) as s:
            assert s.get_server_capabilities().tools.listChanged is True  # type: ignore[union-attr]
            before = {t.name for t in (await s.list_tools()).tools}
            found = ok(await s.call_tool("hub_search", {"query": "reverse a string"}))
            assert found["matches"] == []
            made = ok(await s.call_tool("synthesize_capability", {"request": "Reverse a string"}))
            assert made["package"] == "tool-reverse-string@0.1.0" and made["existing"] is False
            for _ in range(100):  # the notification comes on its own, after the answer
                if told:
                    break
                await anyio.sleep(0.02)
            assert told == ["notifications/tools/list_changed"]
            tools = {t.name: t for t in (await s.list_tools()).tools}
            assert set(tools) - before == {"tool-reverse-string"}
            schema = tools["tool-reverse-string"].inputSchema
            assert schema["required"] == ["s"] and schema["properties"]["s"]["type"] == "string"
            called = await s.call_tool("tool-reverse-string", {"s": "hello"})
            assert not called.isError and called.content[0].text == "olleh"  # type: ignore[union-attr]
            bad = await s.call_tool("tool-reverse-string", {"s": 5})
            assert "s" in error_text(bad)
            found = ok(await s.call_tool("hub_search", {"query": "reverse a string"}))
            assert found["matches"][0]["name"] == "tool-reverse-string"

    anyio.run(scenario)


@pytest.mark.slow
def test_the_mcp_inspector_lists_and_calls_a_synthesized_tool(
    cli: Any, ws: Any, steps: None, tmp_path: Path
) -> None:
    from test_mcp_clients import client_env, npm_tool, run_client, serve_argv

    inspector = npm_tool("mcp-inspector")
    if inspector is None:
        missing("the MCP Inspector is not installed (scripts/install-mcp-clients installs it)")
    assert cli("synth", "Reverse a string").returncode == 0
    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    project.mkdir()
    env = client_env(home, with_clients=True)
    serve = [str(inspector), "--cli", *serve_argv(ws)]

    listed = run_client([*serve, "--method", "tools/list"], env, project)
    called = run_client(
        [*serve, "--method", "tools/call", "--tool-name", "tool-reverse-string",
         "--tool-arg", "s=hello"],
        env,
        project,
    )  # fmt: skip

    tools = {t["name"]: t for t in json.loads(listed[listed.index("{") :])["tools"]}
    assert tools["tool-reverse-string"]["inputSchema"]["required"] == ["s"]
    assert tools["tool-reverse-string"]["description"] == SPEC["docstring"]
    result = json.loads(called[called.index("{") :])
    assert result["isError"] is False and result["content"][0]["text"] == "olleh"


# A stand-in for Claude Code (the real one needs an account): it does each step as the
# bundled step agents' prompts ask, as a model would.
FAKE_CLAUDE = """#!PYTHON
import json, os, sys
from pathlib import Path
prompt = sys.argv[-1]  # (after --)
assert "Reverse a string" in prompt, prompt[-300:]
if "specification of one Python function" in prompt:
    Path("spec.json").write_text(json.dumps(SPEC))
elif "tests of a tool before it exists" in prompt:
    assert json.loads(Path("spec.json").read_text())["function_name"] == "reverse_string"
    Path("tests").mkdir(exist_ok=True)
    Path("tests/test_tool.py").write_text(TESTS)
elif "implement a tool so that its tests pass" in prompt:
    Path("tool.py").write_text(GOOD)
else:
    sys.exit("unexpected prompt: " + prompt[:200])
"""


def test_the_bundled_step_agents_drive_claude_code_through_a_synthesis(
    cli: Any, ws: Any, tmp_path: Path, model_api: dict[str, str]
) -> None:
    import os
    import sys

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = (
        FAKE_CLAUDE.replace("PYTHON", sys.executable)
        .replace("SPEC", repr(SPEC))
        .replace("TESTS", repr(TESTS))
        .replace("GOOD", repr(GOOD))
    )
    (bin_dir / "claude").write_text(fake)
    (bin_dir / "claude").chmod(0o755)

    out = cli(
        "synth", "Reverse a string", "--json", env={"PATH": f"{bin_dir}:{os.environ['PATH']}"}
    )

    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert json.loads(out.stdout)["package"] == "tool-reverse-string@0.1.0"


def test_hub_search_ranks_packages_deterministically_with_their_matched_words(
    cli: Any, ws: Any
) -> None:
    first = cli("hub", "search", "fix lint errors with ruff", "--json")
    again = cli("hub", "search", "fix lint errors with ruff", "--json")

    assert first.returncode == 0, first.stderr
    found = json.loads(first.stdout)
    assert found == json.loads(again.stdout)
    assert found[0]["name"] == "ruff-fixer" and found[0]["score"] > 0.8
    assert found[0]["matched"] == ["fix", "lint", "errors", "ruff"]
    assert all(0 < m["score"] <= 1 for m in found)
    assert [m["score"] for m in found] == sorted((m["score"] for m in found), reverse=True)
    strict = json.loads(
        cli("hub", "search", "fix lint errors", "--threshold", "0.8", "--json").stdout
    )
    assert [m["name"] for m in strict] == ["ruff-fixer"]
    assert json.loads(cli("hub", "search", "quantum teleportation", "--json").stdout) == []
    empty = cli("hub", "search", "the of and")
    assert empty.returncode == 2 and "the query has no words to search for" in empty.stderr


def test_with_card_the_tool_comes_with_a_linted_routing_card(
    cli: Any, ws: Any, steps: None
) -> None:
    out = cli("synth", "Reverse a string", "--card", "--json")

    assert out.returncode == 0, out.stderr
    cards = list(ws.cards_dir.glob("tool-reverse-string--*.yaml"))
    assert len(cards) == 1
    assert cli("cards", "lint").returncode == 0
    routed = json.loads(cli("route", "reverse this string", "--json").stdout)
    assert [s["agent"] for s in routed["selected"]] == ["tool-reverse-string"]


SLY_CONFTEST = """import pytest

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    outcome.get_result().outcome = "passed"
"""


@pytest.mark.parametrize(
    "files",
    [
        {"tool.py": "import os\nos._exit(0)\n"},  # ends pytest at once, exit 0
        {"tool.py": "def reverse_string(s):\n    return s\n", "conftest.py": SLY_CONFTEST},
        {"tool.py": "def reverse_string(s):\n    return s\n", "pytest.py": "raise SystemExit(0)\n"},
        {
            "tool.py": (
                "import _pytest.python\n"
                "_pytest.python.Function.runtest = lambda self: None\n"
                "def reverse_string(s):\n    return s\n"
            )
        },
    ],
    ids=["exit-0-on-import", "conftest-forces-pass", "fake-pytest", "patches-pytest"],
)
def test_an_implementer_cannot_fake_its_verification(
    cli: Any, ws: Any, steps: None, tmp_path: Path, files: dict[str, str]
) -> None:
    step_agents(ws, tmp_path, sly="".join(writes(p, t) for p, t in files.items()))
    use_steps(ws, "spec-writer", "test-writer", "sly", retries=0)
    lock = (ws.hub_dir / "hub.lock").read_bytes()

    out = cli("synth", "Reverse a string")

    assert out.returncode == 1, out.stdout + out.stderr
    assert "the tests still fail after 1 attempt(s)" in out.stderr
    assert (ws.hub_dir / "hub.lock").read_bytes() == lock
