"""Capability synthesis: when no installed package can do a request, build a tool test
first, verify it in the sandbox, and add it to the hub only when it is verified.

1. **interview**: the request must say what the tool does to what (``--force`` skips it,
   and the receipt says so);
2. **search**: a package scoring over ``synthesis.threshold`` is returned
   (``existing: true``) and nothing is built;
3. **spec**: the spec agent writes ``spec.json`` (:mod:`agentos.synthesis.spec`, checked
   strictly);
4. **tests**: the test agent writes ``tests/test_tool.py``; at least ``min_tests`` tests,
   none of which may pass against a stub that raises ``NotImplementedError`` (a test that
   passes there tests nothing); then they are frozen by their sha256;
5. **implementation**: the implementer writes ``tool.py``; an attempt that changes the
   frozen tests (or the spec) is rejected; the tests run in the sandbox (no network, the
   tree read-only, limits, a time-out), and what failed goes back to the implementer in
   ``$AGENTOS_FEEDBACK_FILE``, up to ``retries`` more times;
6. **registration**, only when verified: a hub package ``tool-<name>@0.1.0`` (spec, code,
   tests, AgentOS's runner, an ``agent.yaml`` whose check is the tests), installed with
   the usual hashes; with ``card``, a routing card comes with it.

Each step agent is a hub package (``synthesis:`` in agentos.yaml) run confined, its
working directory the package being built, the request in ``$AGENTOS_REQUEST``. Each step
writes a ``synthesis`` receipt with the sha256 of what it produced; a failed synthesis
leaves the hub untouched.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentos.errors import AgentOSError, Conflict, OperationFailed, RequestBlocked
from agentos.hub.manifest import Manifest
from agentos.hub.store import Hub
from agentos.receipts import write_receipt
from agentos.run.oneshot import run_once
from agentos.run.store import new_run_id
from agentos.runtimes import ready_package
from agentos.sandbox import choose
from agentos.sandbox.confine import Scene
from agentos.shared.fs import atomic_write, sha256_file
from agentos.synthesis.package import SPEC_FILE, TEST_FILE, TESTS_DIR, TOOL_FILE
from agentos.synthesis.spec import ToolSpec, load_spec
from agentos.workspace.files import AgentFiles
from agentos.workspace.layout import Workspace

TOOL_VERSION = "0.1.0"
RUNNER = "run_tool.py"
OUTPUT_TAIL = 3000  # characters of test output kept in a receipt and fed back
_PASSED = re.compile(r"^PASSED (\S+)", re.MULTILINE)
# Words that say nothing about what a tool does: with only these, the request is vague.
_EMPTY = frozenset(
    {
        "tool", "tools", "function", "functions", "script", "program", "utility", "helper",
        "make", "build", "create", "write", "implement", "add", "need", "want", "new", "do",
        "does", "use", "useful", "please", "can", "could", "would", "us", "me", "i", "we",
        "you", "code", "thing", "things", "stuff", "something", "anything", "help",
    }
)  # fmt: skip


class SynthesisFailed(OperationFailed):
    """A step failed: nothing was registered (exit code 1)."""


@dataclass
class SynthesisResult:
    id: str
    request: str
    existing: bool
    package: str | None = None  # NAME@VERSION
    match: dict[str, Any] | None = None  # the search hit, when it exists
    steps: list[dict[str, Any]] = field(default_factory=list)
    forced: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "request": self.request,
            "existing": self.existing,
            "package": self.package,
            "match": self.match,
            "forced": self.forced,
            "steps": self.steps,
        }


def vague_words(request: str) -> list[str]:
    """The words of a tool request that say what it does (empty: it says nothing)."""
    from agentos.interview.lexicon import PRONOUNS, STOPWORDS, VAGUE, WEAK_VERBS
    from agentos.shared.text import words

    empty = _EMPTY | set(STOPWORDS) | set(VAGUE) | set(PRONOUNS) | set(WEAK_VERBS)
    return [w for w in words(request) if w not in empty and not w.isdigit()]


def synthesize(
    ws: Workspace,
    request: str,
    *,
    name: str | None = None,
    card: bool = False,
    force: bool = False,
    on_step: Callable[[str, str], None] | None = None,
) -> SynthesisResult:
    """Find or build the tool ``request`` asks for (see the module docstring)."""
    from agentos.errors import check_request
    from agentos.routing.capabilities import search

    check_request(request)
    say = on_step or (lambda _step, _line: None)
    settings = ws.settings.synthesis
    result = SynthesisResult(new_run_id(), request, existing=False, forced=force)
    said = vague_words(request)
    if len(said) < 2 and not force:
        raise RequestBlocked(
            "the request does not say what the tool does to what (e.g. 'reverse a "
            "string', 'convert Celsius to Fahrenheit'); say it, or use --force",
            ["goal: what should the tool do, to which input, giving what?"],
        )
    found = search(ws, request, k=1, threshold=settings.threshold)
    if found:
        result.existing = True
        result.package = f"{found[0].name}@{found[0].version}"
        result.match = found[0].as_dict()
        say("search", f"{result.package} already does this (score {found[0].score:.2f})")
        return result
    builder = _Builder(ws, result, name, card, say)
    try:
        builder.build()
    finally:
        shutil.rmtree(builder.base, ignore_errors=True)
    return result


class _Builder:
    def __init__(
        self,
        ws: Workspace,
        result: SynthesisResult,
        name: str | None,
        card: bool,
        say: Callable[[str, str], None],
    ) -> None:
        self.ws, self.result, self.name, self.card, self.say = ws, result, name, card, say
        self.settings = ws.settings.synthesis
        self.base = ws.state_dir / "synth" / result.id
        self.pkg = self.base / "package"
        self.hub = Hub(ws.hub_dir)
        self.agents = {
            step: _step_agent(self.hub, ref, f"synthesis.{step}_agent")
            for step, ref in (
                ("spec", self.settings.spec_agent),
                ("test", self.settings.test_agent),
                ("impl", self.settings.impl_agent),
            )
        }
        self.sandbox = choose(ws.settings.sandbox)
        # Every step agent and test run: the workspace hidden, this synthesis's folder too.
        self.scene = Scene(
            ws.settings.sandbox, ws.root, self.base, Path(os.environ.get("HOME", "/"))
        )

    def build(self) -> None:
        self.pkg.mkdir(parents=True)
        spec = self._spec()
        tests_sha = self._tests(spec)
        self._implement(spec, tests_sha)
        self._register(spec)

    # -- the steps ------------------------------------------------------------------------

    def _spec(self) -> ToolSpec:
        self._run("spec", "spec")
        if (self.pkg / SPEC_FILE).is_symlink():
            self._fail("spec", "spec step: spec.json is a link, not a file")
        try:
            spec = load_spec(self.pkg / SPEC_FILE)
        except AgentOSError as exc:
            self._fail("spec", f"spec step: {exc}")
        # What is verified and registered is this, whatever happens to the file later.
        self.spec_text = json.dumps(spec.model_dump(mode="json"), indent=2) + "\n"
        package = f"tool-{(self.name or spec.function_name).replace('_', '-').lower()}"
        try:
            Manifest.model_validate(
                {
                    "name": package,
                    "version": TOOL_VERSION,
                    "description": "x",
                    "runtime": "python",
                    "entry": "a:b",
                }
            )
        except ValueError:
            self._fail("spec", f"spec step: {package!r} is not a package name (use --name)")
        if any(v.name == package for v in self.hub.versions()):
            raise Conflict(f"{package} is already installed (hub use or remove it)", field="NAME")
        self.package = package
        self._receipt(
            "spec",
            "done",
            {"function": spec.function_name, "package": package},
            sha256=sha256_file(self.pkg / SPEC_FILE),
        )
        return spec

    def _tests(self, spec: ToolSpec) -> str:
        spec_sha = sha256_file(self.pkg / SPEC_FILE)
        self._run("tests", "test")
        if sha256_file(self.pkg / SPEC_FILE) != spec_sha:
            self._fail("tests", "tests step: the test agent changed spec.json")
        test_file = self.pkg / TEST_FILE
        if not test_file.is_file() or test_file.is_symlink():
            self._fail("tests", f"tests step: the test agent wrote no {TEST_FILE}")
        count = _count_tests(test_file)
        if count < self.settings.min_tests:
            self._fail(
                "tests",
                f"tests step: {count} test(s) in {TEST_FILE}; at least "
                f"{self.settings.min_tests} are needed",
            )
        passed, output = self._pytest(spec, spec.stub())
        stub_passes = _PASSED.findall(output)
        if passed or stub_passes:
            self._fail(
                "tests",
                f"tests step: {len(stub_passes) or count} test(s) pass against a stub that "
                f"raises NotImplementedError, so they test nothing: {', '.join(stub_passes[:5])}",
                output=output,
            )
        frozen = _tree_sha(self.pkg / TESTS_DIR)
        self._receipt("tests", "done", {"tests": count}, sha256=frozen)
        return frozen

    def _implement(self, spec: ToolSpec, tests_sha: str) -> None:
        spec_sha = sha256_file(self.pkg / SPEC_FILE)
        feedback = self.pkg / "AGENTOS_FEEDBACK.md"
        attempts = self.settings.retries + 1
        for attempt in range(1, attempts + 1):
            self._run("implementation", "impl", attempt=attempt)
            if _tree_sha(self.pkg / TESTS_DIR) != tests_sha:
                self._fail("implementation", "implementation step: tests changed (they are frozen)")
            if sha256_file(self.pkg / SPEC_FILE) != spec_sha:
                self._fail("implementation", "implementation step: spec.json changed")
            code = _regular_text(self.pkg / TOOL_FILE)
            if code is None:
                sha = None
                passed, output = False, f"the implementer wrote no {TOOL_FILE}\n"
            else:
                sha = hashlib.sha256(code.encode()).hexdigest()
                self._receipt("implementation", "done", {"attempt": attempt}, sha256=sha)
                passed, output = self._pytest(spec, code)
            fields = {"attempt": attempt, "passed": passed, "output_tail": output[-OUTPUT_TAIL:]}
            if passed:
                assert code is not None
                self.code = code  # what was verified is what is registered
                feedback.unlink(missing_ok=True)
                self._receipt("verification", "passed", fields, sha256=sha)
                return
            self._receipt("verification", "failed", fields, sha256=sha)
            atomic_write(
                feedback,
                f"# Attempt {attempt}: the tests failed\n\nFix {TOOL_FILE} (not the tests, "
                f"which are frozen) so that they pass.\n\n```text\n{output[-OUTPUT_TAIL:]}\n```\n",
            )
        self._fail(
            "verification",
            f"verification: the tests still fail after {attempts} attempt(s); nothing registered",
            receipt=False,
        )

    def _register(self, spec: ToolSpec) -> None:
        for leftover in ("AGENTOS_FEEDBACK.md", "AGENTOS_CONTEXT.md"):
            (self.pkg / leftover).unlink(missing_ok=True)
        shutil.copyfile(Path(__file__).with_name("_run_tool.py"), self.pkg / RUNNER)
        summary = spec.docstring.strip().splitlines()[0][:200]
        manifest = {
            "name": self.package,
            "version": TOOL_VERSION,
            "description": summary,
            "runtime": "python",
            "entry": "run_tool:main",
            "capabilities": ["tool", *sorted({w for w in vague_words(summary)})[:8]],
            "timeout": 60,
            "checks": [
                {"name": "tool tests", "run": "python -m pytest -q -p no:cacheprovider tests"}
            ],
        }
        atomic_write(self.pkg / "agent.yaml", json.dumps(manifest, indent=2) + "\n")
        if self.card:
            keywords = sorted(set(vague_words(f"{spec.function_name.replace('_', ' ')} {summary}")))
            card = {
                "id": self.package,
                "agent": self.package,
                "description": summary,
                "group": "tools",
                "triggers": {"keywords": keywords[:12] or [spec.function_name]},
            }
            (self.pkg / "cards").mkdir(exist_ok=True)
            atomic_write(self.pkg / "cards" / f"{self.package}.yaml", json.dumps(card, indent=2))
        # The package is what was verified, no more: whatever else the agents left in
        # their folder (a conftest.py, a pytest.py, a sitecustomize.py) stays out.
        staged = self.base / self.package  # named as the package: the hub's source name
        _copy_regular(self.pkg / TESTS_DIR, staged / TESTS_DIR)
        atomic_write(staged / SPEC_FILE, self.spec_text)
        atomic_write(staged / TOOL_FILE, self.code)
        for name in (RUNNER, "agent.yaml"):
            shutil.copyfile(self.pkg / name, staged / name)
        if self.card:
            _copy_regular(self.pkg / "cards", staged / "cards")
        from agentos.routing.package_cards import install_package

        installed, _ = install_package(self.ws, str(staged))  # its card too, checked
        self.result.package = f"{installed.name}@{installed.version}"
        self._receipt(
            "registration",
            "done",
            {"package": self.result.package, "card": self.card},
            sha256=installed.sha256,
        )

    # -- helpers ----------------------------------------------------------------------------

    def _run(self, step: str, agent: str, attempt: int = 1) -> None:
        manifest, package_dir = self.agents[agent]
        self.say(
            step, f"{manifest.ref} ({'attempt ' + str(attempt) if attempt > 1 else 'running'})"
        )
        files = AgentFiles(
            self.base / "run" / f"{step}-{attempt}", self.base / f"{step}-{attempt}.log"
        )
        done = run_once(
            self.ws,
            self.sandbox,
            self.scene,
            manifest,
            package_dir,
            run_id=self.result.id,
            workdir=self.pkg,
            request=self.result.request,
            files=files,
            timeout=float(manifest.timeout),
            env={"AGENTOS_SYNTH_STEP": step},
            attempt=attempt,
        )
        shutil.rmtree(files.run_dir, ignore_errors=True)  # its env file
        if done.limit == "time":
            self._fail(step, f"{step} step: {manifest.ref} ran out of time ({manifest.timeout}s)")

    def _pytest(self, spec: ToolSpec, implementation: str) -> tuple[bool, str]:
        """The frozen tests against ``implementation``, confined (no network, the tree
        read-only), in a folder holding only the tests, the spec, AgentOS's stand-in for
        tool.py and the implementation behind it (run in a process of its own per call,
        see ``_verify_shim.py``): nothing else the agents left there takes part."""
        from agentos.sandbox.confine import CheckConfiner, python_check_env

        verify = self.base / "verify"
        shutil.rmtree(verify, ignore_errors=True)
        _copy_regular(self.pkg / TESTS_DIR, verify / TESTS_DIR)
        atomic_write(verify / SPEC_FILE, self.spec_text)
        here = Path(__file__).parent
        shim = (here / "_verify_shim.py").read_text(encoding="utf-8")
        atomic_write(
            verify / TOOL_FILE, shim.replace('"FUNCTION_NAME"', json.dumps(spec.function_name))
        )
        (verify / "_impl").mkdir()
        atomic_write(verify / "_impl" / TOOL_FILE, implementation)
        shutil.copyfile(here / "_verify_runner.py", verify / "_impl" / "_runner.py")

        env = python_check_env()
        outcome = CheckConfiner(self.sandbox, self.scene, verify, env["PATH"]).run(
            f"{sys.executable} -m pytest -q -rA -p no:cacheprovider -c /dev/null "
            f"--rootdir . {TESTS_DIR}",
            env,
            float(self.settings.timeout),
        )
        output = outcome.tail + ("\n[timed out]\n" if outcome.timed_out else "")
        return outcome.passed, output

    def _receipt(
        self, step: str, status: str, fields: dict[str, Any], sha256: str | None = None
    ) -> None:
        receipt = write_receipt(
            self.ws,
            "synthesis",
            {
                "synthesis": self.result.id,
                "step": step,
                "status": status,
                "forced": self.result.forced,
                **fields,
                **({"output_sha256": sha256} if sha256 else {}),
            },
            run_id=self.result.id,
            request=self.result.request,
        )
        self.result.steps.append({"step": step, "status": status, "receipt": receipt.id, **fields})
        from agentos.run.events import record

        record(
            self.ws,
            "synthesis",
            step,
            f"synthesis {self.result.id}: {step} {status}",
            run=self.result.id,
            status=status,
        )
        self.say(step, status)

    def _fail(self, step: str, message: str, *, output: str = "", receipt: bool = True) -> Any:
        if receipt:
            self._receipt(step, "failed", {"reason": message, "output_tail": output[-OUTPUT_TAIL:]})
        raise SynthesisFailed(message)


def _step_agent(hub: Hub, ref: str, field: str) -> tuple[Manifest, Path]:
    info, manifest = ready_package(hub, ref, field, where=f"set {field} in agentos.yaml")
    return manifest, info.path


def _regular_text(path: Path) -> str | None:
    """A file an agent wrote, when it is a regular file (never read through a link)."""
    from agentos.run.oneshot import read_output

    return read_output(path, 1 << 20)


def _copy_regular(src: Path, dest: Path) -> None:
    """The regular files below ``src`` (links and caches left out: a link could point at
    a file of the host's that AgentOS would otherwise copy)."""
    dest.mkdir(parents=True, exist_ok=True)
    for path in sorted(src.rglob("*")) if src.is_dir() else []:
        rel = path.relative_to(src)
        if path.is_symlink() or "__pycache__" in rel.parts or path.suffix == ".pyc":
            continue
        if path.is_dir():
            (dest / rel).mkdir(parents=True, exist_ok=True)
        elif path.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, dest / rel)


def _count_tests(path: Path) -> int:
    """Test functions at the top of the module and test methods of Test classes."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    except SyntaxError:
        return 0
    count = 0
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith(
            "test"
        ):
            count += 1
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            count += sum(
                isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name.startswith("test")
                for n in node.body
            )
    return count


def _tree_sha(root: Path) -> str:
    """sha256 over every file below ``root`` (its path and content), links included."""
    digest = hashlib.sha256()
    if not root.exists():
        return digest.hexdigest()
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if "__pycache__" in rel.split("/"):
            continue
        if path.is_symlink():
            digest.update(f"L {rel} {os.readlink(path)}\n".encode())
        elif path.is_file():
            digest.update(f"F {rel} {sha256_file(path)}\n".encode())
    return digest.hexdigest()
