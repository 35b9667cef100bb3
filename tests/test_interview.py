"""The interview engine: a labelled set of requests, determinism across processes, questions
that name the weak axis (and real paths from the knowledge store), proposed checks, the
CLI (JSON, text, interactive answers in a terminal) and an optional rewrite through a
loopback server speaking Ollama's /api/chat to the real ``ollama`` client."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import pty
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentos.interview import checks as interview_checks
from agentos.interview.engine import (
    AXES,
    SUCCESS_KINDS,
    UNCHECKED_SUCCESS,
    WEAK_BELOW,
    amend,
    interview,
    interview_in,
    with_rewrite,
)
from agentos.shared.text import words
from agentos.workspace.layout import Workspace
from agentos.workspace.settings import InterviewSettings

# --- the labelled set ---------------------------------------------------------------------
# Clear requests say what, where, within which limits and when it is done; vague ones do
# not. Each block was labelled before it was first scored.

# Written before the engine; the engine was then tuned on them.
DEV_CLEAR: list[tuple[str, str, str]] = [
    (
        "router-keyerror",
        "pass",
        "Fix the KeyError raised by route() in agentos/routing/router.py when the card list is"
        " empty: it should return an empty decision instead. Do not change the public"
        " signature. Done when tests/test_router.py passes.",
    ),
    (
        "hub-list-json",
        "pass",
        "Add a --json flag to `agentos hub list` in agentos/cli/hub.py that prints one JSON"
        " document with every installed version. Keep the table output unchanged. Done when"
        " `agentos hub list --json | python -m json.tool` exits 0.",
    ),
    (
        "rename-load-cfg",
        "pass",
        "Rename the function load_cfg to load_config in src/config.py and update every"
        " caller in src/. No behaviour change; all tests pass.",
    ),
    (
        "users-400",
        "pass",
        "The /api/users endpoint returns 500 when the email field is missing. It should"
        ' return 400 with {"error": "email is required"}. Fix it in app/views/users.py'
        " only, and add a regression test in tests/test_users.py.",
    ),
    (
        "drop-requests",
        "pass",
        "Remove the unused requests dependency from pyproject.toml; nothing imports it"
        " since we moved to httpx. Done when pip install -e . succeeds and the test suite"
        " passes. Don't touch other dependencies.",
    ),
    (
        "readme-install",
        "pass",
        "Write a README.md section 'Installation' explaining pip install agentos and the"
        " Python 3.11 requirement. Only edit README.md. README.md must contain the heading"
        " '## Installation'.",
    ),
    (
        "lexer-hang",
        "pass",
        "In parser/lexer.py, tokenize() hangs on input ending with a backslash (infinite"
        " loop at line 88). Make it raise LexError('unterminated escape') instead. Keep the"
        " token format unchanged; tests pass.",
    ),
    (
        "ci-pythons",
        "pass",
        "Migrate the CI workflow .github/workflows/ci.yml from Python 3.9 to 3.11 and 3.12."
        " Don't change the job names. Done when the workflow file validates with actionlint"
        " and lists both versions.",
    ),
    (
        "fs-typehints",
        "pass",
        "Add type hints to every function in agentos/shared/fs.py so that mypy --strict passes on"
        " that file. No runtime changes.",
    ),
    (
        "sync-logging",
        "pass",
        "Replace the print calls in scripts/sync.py with logging.getLogger(__name__) at"
        " INFO level. Output format must stay the same for the --quiet mode; ruff check"
        " passes.",
    ),
    (
        "kb-search-speed",
        "pass",
        "Speed up search() in kb/index.py: querying 10k documents takes 2.3 s now because"
        " it rescans the table; it should take under 200 ms by using the FTS5 index. Keep"
        " the result order identical; the benchmark benchmarks/search.py shows the figure.",
    ),
    (
        "parse-version-test",
        "pass",
        "Add a unit test for parse_version() in agentos/hub/store.py covering '1.2.3', '1.2'"
        " (invalid) and 'v1.2.3' (invalid). Only add tests/test_versions.py; don't change"
        " hub.py. Done when pytest tests/test_versions.py passes.",
    ),
    (
        "docs-cli",
        "pass",
        "Create docs/cli.md documenting every agentos command with its options. docs/cli.md"
        " must exist and tests/test_docs.py must pass. Don't modify the code.",
    ),
    (
        "receipts-verify",
        "pass",
        "Bug: `agentos receipts verify` exits 0 even when a receipt file was deleted from"
        " receipts/. Expected: exit 1 and the missing id printed. Fix in"
        " agentos/receipts.py; add a test that deletes one receipt.",
    ),
    (
        "extract-retry",
        "pass",
        "Extract the retry loop from Orchestrator.run in agentos/run/orchestrator.py into a"
        " function retry_agent(agent, failures). Pure refactor: behaviour and receipts"
        " unchanged, all existing tests green.",
    ),
    (
        "guardian-interval",
        "pass",
        "Change the default guardian interval from 60 to 30 seconds in agentos/workspace/layout.py"
        " (GuardianSettings.interval) and update the SPEC example. Nothing else changes;"
        " tests pass.",
    ),
    (
        "kb-empty-query",
        "pass",
        "Make `agentos kb search` treat an empty query as 'no results' instead of raising"
        ' an FTS5 syntax error: currently `agentos kb search ""` prints a traceback. Fix in'
        " agentos/knowledge/store.py, exit 0 with an empty list, add a test.",
    ),
    (
        "pydantic-2",
        "pass",
        "Upgrade pydantic from 1.10 to 2.x in pyproject.toml and fix the validators in"
        " models/user.py (validator -> field_validator). Keep the JSON output identical;"
        " the test suite passes.",
    ),
    (
        "max-diff-lines",
        "pass",
        "Implement the `max_diff_lines` check in agentos/gate/gate.py: fail when git"
        " diff --numstat against the base branch adds up to more than the limit. Don't"
        " change the other check kinds. Done when"
        " tests/test_stormbreaker.py::test_max_diff_lines passes.",
    ),
    (
        "delete-auth-v1",
        "pass",
        "Delete the deprecated module legacy/auth_v1.py and its imports in app/__init__.py;"
        " nothing outside app/ should change. Done when python -c 'import app' works and"
        " tests pass.",
    ),
    (
        "orders-pagination",
        "pass",
        "Add pagination to GET /api/orders in api/orders.py: accept ?page= and ?per_page="
        " (max 100), default 20. Existing clients without params must get the first 20."
        " Tests in tests/api/test_orders.py pass.",
    ),
    (
        "login-message",
        "pass",
        "The login form in web/templates/login.html shows no message when the password is"
        " wrong; users think the page froze. Show 'Wrong email or password' under the form."
        " Keep the layout; the Playwright test e2e/login.spec.ts passes.",
    ),
    (
        "bump-version",
        "pass",
        "Bump the version in pyproject.toml and agentos/__init__.py from 0.1.0 to 0.2.0 and"
        " add a 0.2.0 entry to CHANGES.md. Nothing else.",
    ),
    (
        "flaky-guardian-test",
        "pass",
        "Fix the flaky test test_guardian_restarts in tests/test_guardian.py: it sleeps 1 s"
        " and then asserts, which fails on slow CI. Replace the sleep with a wait on the"
        " condition. Don't change guardian code. Done when it passes 20 runs in a row.",
    ),
    (
        "runs-limit",
        "pass",
        "Add a `--limit N` option to `agentos runs list` (agentos/cli/runs.py) that shows"
        " the N most recent runs, default 20. Don't change the JSON field names; a test"
        " checks that --limit 2 prints 2 rows.",
    ),
    (
        "utcnow",
        "pass",
        "Convert utils/dates.py from datetime.utcnow() to datetime.now(timezone.utc)"
        " everywhere; utcnow is deprecated in 3.12 and warns in our logs. No change to the"
        " stored format; ruff check and pytest pass.",
    ),
    (
        "split-router",
        "pass",
        "Split agentos/routing/router.py (720 lines) into router.py and _scoring.py, moving"
        " score_card() and its helpers. Public imports from agentos.routing.router keep working."
        " Lint clean, tests pass.",
    ),
    (
        "dockerfile",
        "pass",
        "Add a Dockerfile at the repository root that builds the app on python:3.11-slim"
        " and runs `agentos mcp serve --http 0.0.0.0:8000`. Don't add dependencies. Done"
        " when docker build . succeeds.",
    ),
    (
        "card-ties",
        "pass",
        "sort_cards() in agentos/routing/cards.py orders ties by file modification time, so routing"
        " differs between machines. Order ties by card name instead. Add a test with two"
        " tied cards; no other change.",
    ),
    (
        "sigterm",
        "pass",
        "Handle SIGTERM in agentos/guardian/daemon.py: remove the pidfile and exit 0. Currently a"
        " killed daemon leaves guardian.pid behind and `guardian start` then refuses to"
        " start. Test: start, send SIGTERM, pidfile is gone.",
    ),
    (
        "contributing",
        "pass",
        "Add a CONTRIBUTING.md describing how to run the tests (pytest -q), the lint (ruff"
        " check .) and mypy. CONTRIBUTING.md must exist; don't touch code.",
    ),
    (
        "manifest-timeout",
        "pass",
        "Validate the `timeout` field in agentos/hub/manifest.py: reject values <= 0 or > 86400"
        " with 'timeout: must be between 1 and 86400'. Keep other fields as they are; tests"
        " pass.",
    ),
    (
        "signup-409",
        "pass",
        "When a user submits the signup form with an existing email, the server returns 500"
        " (IntegrityError: duplicate key value violates unique constraint"
        ' "users_email_key"). It should return 409 with the message \'email already'
        " registered'. Only change the signup handler; add a test for the duplicate case.",
    ),
    (
        "prices-backoff",
        "pass",
        "Add retry with exponential backoff (3 attempts, 1s/2s/4s) to fetch_prices() in"
        " services/prices.py for HTTP 502/503 only. Other errors still raise immediately."
        " Tests with a local HTTP stub pass.",
    ),
    (
        "export-csv",
        "pass",
        "Our nightly export job (jobs/export.py) writes CSV with ';' separators, but the"
        " finance team's importer expects ','. Switch to ',' and quote fields containing"
        " commas. Don't change the column order; the sample in"
        " tests/data/export_expected.csv must match byte for byte.",
    ),
    (
        "hostile-symlink",
        "pass",
        "In agentos/hub/store.py, install() accepts a tarball with a symlink pointing outside the"
        " package (../../etc/passwd) and extracts it. It must refuse such archives with"
        " HostileArchive and write nothing. Don't change the archive format.",
    ),
    (
        "ticket-empty-config",
        "pass",
        "Title: crash on empty config\nSteps: create an empty agentos.yaml, run `agentos"
        " status`.\nActual: TypeError: 'NoneType' object is not subscriptable in"
        " agentos/workspace/layout.py.\nExpected: defaults are used.\nAcceptance: a test with an"
        " empty agentos.yaml passes; no other settings behaviour changes.",
    ),
]

# The vague ones of the same block.
DEV_VAGUE: list[tuple[str, str, str]] = [
    ("make-it-better", "block", "make it better"),
    ("fix-the-bug", "block", "fix the bug"),
    ("improve-performance", "block", "improve performance"),
    ("clean-up", "block", "clean up the code"),
    ("refactor-everything", "block", "refactor everything"),
    ("app-broken", "block", "the app is broken, please fix"),
    ("some-tests", "block", "add some tests"),
    ("update-docs", "block", "update the docs"),
    ("ui-nicer", "block", "make the UI nicer"),
    ("optimize-stuff", "block", "optimize stuff"),
    ("login-issue", "block", "can you look into the login issue?"),
    ("doesnt-work", "block", "it doesn't work"),
    ("help", "block", "help"),
    ("the-thing", "block", "do the thing we talked about"),
    ("error-handling", "block", "improve error handling"),
    ("modernize", "block", "modernize the codebase"),
    ("warnings-stuff", "block", "fix all the warnings and stuff"),
    ("make-tests-pass", "block", "make the tests pass"),
    ("export-feature", "block", "add a feature for users to export data"),
    ("better-api-docs", "block", "write better documentation for the API"),
    ("speed-build", "block", "speed up the build"),
    ("cleaner-code", "block", "Refactor the code to be cleaner and more maintainable."),
    ("database-problem", "block", "There's a problem with the database, can you fix it?"),
    ("logging-everywhere", "block", "Add logging everywhere"),
    ("faster-reliable", "block", "make it faster and more reliable"),
    ("update-deps", "block", "Update dependencies"),
    ("fix-ci", "block", "Fix the CI"),
    ("auth", "block", "implement authentication"),
    (
        "router-slow-messy",
        "block",
        "Please improve the router, it's kind of slow and messy sometimes.",
    ),
    ("colors", "block", "Change the colors"),
    ("receipts-wrong", "block", "Something is wrong with receipts, look at it"),
    ("dark-mode", "block", "Add dark mode"),
    ("fix-router-tests", "block", "Fix the tests in tests/test_router.py"),
    ("cache-kb", "block", "Add a cache to agentos/knowledge/store.py"),
    ("improve-readme", "block", "Improve the README"),
    ("search-better", "block", "Make search better in kb"),
    ("errors-properly", "block", "Handle errors properly in the API so things don't crash"),
    ("rewrite-react", "block", "Rewrite the frontend in React"),
]

# Written after the first tuning, scored once (28/32 agreed), then tuned on.
HOLDOUT_CLEAR: list[tuple[str, str, str]] = [
    (
        "h-cards-message",
        "pass",
        "pytest tests/test_cards.py::test_lint_reports_unknown_field fails with"
        " AssertionError since commit 3f2a1c; the lint message changed from 'unknown field'"
        " to 'extra field'. Restore the old message in agentos/routing/cards.py; don't touch the"
        " tests.",
    ),
    (
        "h-gc-dry-run",
        "pass",
        "As an operator I want `agentos gc --dry-run` to list the worktrees and tmux"
        " sessions it would remove without removing anything. Add the flag in"
        " agentos/cli/runs.py; gc without the flag keeps its behaviour. Acceptance: a test"
        " creates an orphan worktree, runs gc --dry-run, and the worktree is still there.",
    ),
    (
        "h-snippet-cap",
        "pass",
        "Cap the knowledge store snippet at 300 characters in kb search output"
        " (agentos/knowledge/store.py, function snippet()). Longer snippets currently flood the"
        " terminal. JSON output keeps the full snippet. Test with a 1000-character line.",
    ),
    (
        "h-mcp-route-json",
        "pass",
        "The MCP tool route returns a Python repr instead of structured JSON (see"
        " agentos/mcp_server/server.py, route_tool). Return the decision as a dict matching the"
        " receipt schema; the MCP inspector should show the fields. Other tools stay as"
        " they are; tests/test_mcp.py passes.",
    ),
    (
        "h-check-timeout",
        "pass",
        "Set the default timeout for shell checks to 300 seconds in agentos/shared/checks.py"
        " (CheckSpec.timeout) - it is None today, so a hanging check blocks the gate"
        " forever. Keep explicit timeouts working. Add a test with a check that sleeps past"
        " a 1 second timeout and fails.",
    ),
    (
        "h-repo-flag",
        "pass",
        "Rename the CLI flag --repo to --target in agentos/cli/runs.py, keeping --repo as a"
        " hidden deprecated alias that prints a warning to stderr. Update docs/cli.md."
        " Tests for both spellings pass.",
    ),
    (
        "h-attach-tty",
        "pass",
        "On macOS, `agentos attach RUN` fails with 'open terminal failed: not a terminal'"
        " when stdout is piped. Detect a non-TTY stdout in agentos/run/sessions.py and exit 2"
        " with 'attach needs a terminal'. No change on Linux; add a test that pipes stdout.",
    ),
    (
        "h-route-bench",
        "pass",
        "Write benchmarks/route_bench.py that routes 1,000 requests against the bundled"
        " cards and prints requests per second and the ratio against a raw regex loop. No"
        " dependencies beyond the stdlib; the script must exit 0 in under 60 s.",
    ),
    (
        "h-users-404",
        "pass",
        "users-service: GET /v1/users/{id} returns 200 with null body when the user does"
        ' not exist. Return 404 with {"detail": "user not found"}. Only the handler in'
        " users/api.py changes; existing integration tests in tests/integration/ must pass"
        " plus a new 404 test.",
    ),
    (
        "h-receipts-index",
        "pass",
        "Add an index on receipts(run_id) in the state.db migrations (agentos/state/database.py) as"
        " a new named migration '0003_receipts_run_id'. Existing databases migrate in"
        " place; `agentos runs show` on 10k receipts should take under 100 ms.",
    ),
    (
        "h-csv-memory",
        "pass",
        "Lower the memory of the CSV import in importer/csv_loader.py: it reads the whole 2"
        " GB file with f.read() and gets OOM-killed on 4 GB machines. Stream it line by"
        " line with csv.reader. Output rows must be identical; peak memory under 200 MB on"
        " tests/data/big.csv.",
    ),
    (
        "h-config-docs",
        "pass",
        "Document the agentos.yaml keys in README.md under a new '## Configuration'"
        " heading: receipts.redact, interview.threshold, interview.floors, run.retries,"
        " guardian.*. Do not change code. README.md must contain '## Configuration'.",
    ),
    (
        "h-datepicker",
        "pass",
        "In frontend/src/components/DatePicker.tsx the calendar opens off-screen on mobile"
        " widths below 400px. Position it with the existing usePopover hook so it stays"
        " inside the viewport. Don't change the desktop layout; the Storybook story"
        " DatePicker.mobile renders without overflow.",
    ),
    (
        "h-pin-ruff",
        "pass",
        "Pin ruff to 0.6.x in pyproject.toml dev dependencies because 0.7 flags RUF022"
        " across the codebase and breaks CI. No other dependency changes; CI's lint job"
        " passes.",
    ),
    (
        "h-hub-verify-missing",
        "pass",
        "Make `agentos hub verify` also check that every active version's directory exists;"
        " today a deleted hub/<name>/<version>/ directory makes it crash with"
        " FileNotFoundError. Report it as drift and exit 1. Fix in agentos/hub/store.py with a"
        " test.",
    ),
]

# The vague ones of the same block.
HOLDOUT_VAGUE: list[tuple[str, str, str]] = [
    (
        "h-router-weird",
        "block",
        "The router is kind of weird with some requests, can you take a look?",
    ),
    ("h-pythonic", "block", "Refactor the hub module to be more pythonic"),
    ("h-timeouts-better", "block", "We should probably handle timeouts better in the orchestrator"),
    ("h-kb-smarter", "block", "Make the knowledge store smarter"),
    ("h-coverage", "block", "Improve test coverage"),
    ("h-memory-leak", "block", "Fix the memory leak"),
    ("h-tidy-cli", "block", "Tidy up the CLI output, it's a bit ugly"),
    ("h-windows", "block", "Add support for Windows"),
    ("h-guardian-robust", "block", "Can you make the guardian more robust?"),
    ("h-write-docs", "block", "Write docs"),
    ("h-build-failing", "block", "The build is failing, fix it ASAP"),
    ("h-clean-cli", "block", "Clean up agentos/cli/"),
    ("h-more-logging", "block", "Add more logging to the orchestrator so we can debug stuff"),
    ("h-py312", "block", "Port the project to Python 3.12"),
    ("h-receipts-discussed", "block", "Make the receipts thing work like we discussed yesterday"),
    ("h-readme-new-stuff", "block", "update the README with the new stuff"),
    ("h-db-slow", "block", "Please optimize the database queries, they're slow."),
]

# Written last and never tuned on: first scoring agreed 24/24.
FRESH_CLEAR: list[tuple[str, str, str]] = [
    (
        "f-go-shutdown",
        "pass",
        "In cmd/server/main.go the HTTP server ignores SIGINT and keeps connections open"
        " for 30 s. Call srv.Shutdown(ctx) with a 5 second timeout on SIGINT/SIGTERM. Don't"
        " change the routes; `go test ./...` passes.",
    ),
    (
        "f-alembic",
        "pass",
        "Add a NOT NULL constraint to orders.customer_id via a new Alembic migration in"
        " migrations/versions/. Backfill existing NULL rows with the 'unknown' customer (id"
        " 0) first. The migration must be reversible; alembic upgrade head and downgrade -1"
        " both succeed on a copy of prod.",
    ),
    (
        "f-format-price",
        "pass",
        "src/utils/format.ts formatPrice(1234.5) returns '1234.5' but should return"
        " '$1,234.50' for the en-US locale. Use Intl.NumberFormat. Keep the function"
        " signature; the jest tests in src/utils/format.test.ts pass.",
    ),
    (
        "f-terraform",
        "pass",
        "Terraform: the S3 bucket in infra/storage.tf is publicly readable. Add a"
        " aws_s3_bucket_public_access_block that blocks all public access. No other"
        " resources change; terraform plan shows exactly one resource to add.",
    ),
    (
        "f-paginate",
        "pass",
        "Fix the off-by-one in paginate() (lib/paging.py): page 2 repeats the last item of"
        " page 1. Page boundaries must not overlap; add a test with 45 items and page size"
        " 20 that checks every item appears once.",
    ),
    (
        "f-manifest-pydantic",
        "pass",
        "Replace the hand-written YAML parsing in agentos/hub/manifest.py with pydantic's"
        " model_validate on yaml.safe_load output. Error messages must keep the 'file:"
        " field: message' format; tests/test_manifest.py passes unchanged.",
    ),
    (
        "f-gunicorn",
        "pass",
        "Increase the gunicorn worker count from 2 to 4 in deploy/gunicorn.conf.py because"
        " p95 latency hits 2 s under load. Don't touch the timeout settings. Done when the"
        " load test in loadtest/k6.js reports p95 under 800 ms.",
    ),
    (
        "f-receipts-since",
        "pass",
        "Add a `--since DATE` filter to `agentos receipts list` in agentos/cli/receipts.py"
        " that keeps receipts created on or after DATE (ISO 8601). Invalid dates exit 2"
        " with 'since: not an ISO date'. Existing output unchanged without the flag; add"
        " tests.",
    ),
    (
        "f-backup",
        "pass",
        "The nightly backup script scripts/backup.sh exits 0 even when pg_dump fails, so we"
        " had two weeks of empty backups. Add set -euo pipefail and check the dump size is"
        " above 1 MB; exit 1 otherwise. Only this script changes.",
    ),
    (
        "f-react-hooks",
        "pass",
        "Convert the class-based React component src/components/Header.jsx to a function"
        " component with hooks. Same props, same rendered markup; the snapshot test"
        " Header.test.jsx passes without updating the snapshot.",
    ),
    (
        "f-router-prints",
        "pass",
        "Remove the print debugging left in agentos/routing/router.py (lines 40-60 print the scores"
        ' on every route). Nothing else changes; ruff check passes and `agentos route "fix'
        ' lint"` prints only the decision.',
    ),
    (
        "f-busy-timeout",
        "pass",
        "Make the SQLite connection in agentos/state/database.py use a 5000 ms busy timeout;"
        " concurrent `agentos run` calls currently fail with 'database is locked'. Keep WAL"
        " mode. Add a test that opens two connections and writes from both.",
    ),
]

# The vague ones of the same block.
FRESH_VAGUE: list[tuple[str, str, str]] = [
    ("g-payments-mess", "block", "The payments code is a mess, please sort it out"),
    ("g-backend-tests", "block", "Add some unit tests to the backend"),
    ("g-api-perf", "block", "Could you improve the performance of the API? Users are complaining."),
    ("g-new-design", "block", "Update the UI to match the new design"),
    ("g-caching", "block", "Implement caching"),
    ("g-friendly-errors", "block", "Make the error messages more user friendly"),
    ("g-deploy-broke", "block", "Something broke after the last deploy"),
    ("g-refactor-orch", "block", "Refactor agentos/run/orchestrator.py"),
    ("g-settings-page", "block", "Add a settings page"),
    ("g-cli-faster", "block", "Make the CLI faster"),
    ("g-failing-tests", "block", "Fix the failing tests"),
    ("g-new-api", "block", "Migrate to the new API version"),
]
LABELLED = DEV_CLEAR + DEV_VAGUE + HOLDOUT_CLEAR + HOLDOUT_VAGUE + FRESH_CLEAR + FRESH_VAGUE
DEFAULTS = InterviewSettings()


def _confusion(items: list[tuple[str, str, str]]) -> tuple[dict[str, int], list[str]]:
    counts = {"pass->pass": 0, "pass->block": 0, "block->pass": 0, "block->block": 0}
    wrong = []
    for ident, label, request in items:
        result = interview(request, DEFAULTS)
        got = "pass" if result.passed else "block"
        counts[f"{label}->{got}"] += 1
        if got != label:
            wrong.append(f"{ident}: labelled {label}, got {got} (ambiguity {result.ambiguity})")
    return counts, wrong


def test_the_labelled_set_is_large_and_balanced_enough_to_mean_something() -> None:
    ids = [ident for ident, _, _ in LABELLED]
    assert len(LABELLED) >= 60
    assert len(set(ids)) == len(ids)
    clear = sum(1 for _, label, _ in LABELLED if label == "pass")
    assert 0.35 <= clear / len(LABELLED) <= 0.65


def test_labelled_requests_agree_with_their_labels_at_least_90_percent() -> None:
    counts, wrong = _confusion(LABELLED)
    agreement = (counts["pass->pass"] + counts["block->block"]) / len(LABELLED)
    print(
        f"\ninterview agreement {agreement:.3f} on {len(LABELLED)} requests; "
        f"label->verdict {counts}"
    )
    for name, items in (
        ("fresh (never tuned on)", FRESH_CLEAR + FRESH_VAGUE),
        ("holdout", HOLDOUT_CLEAR + HOLDOUT_VAGUE),
    ):
        sub, _ = _confusion(items)
        print(f"  {name}: {(sub['pass->pass'] + sub['block->block']) / len(items):.3f} {sub}")
    assert agreement >= 0.9, "\n".join(wrong)


def test_requests_never_tuned_on_agree_at_least_90_percent() -> None:
    counts, wrong = _confusion(FRESH_CLEAR + FRESH_VAGUE)
    assert (counts["pass->pass"] + counts["block->block"]) / len(
        FRESH_CLEAR + FRESH_VAGUE
    ) >= 0.9, "\n".join(wrong)


@pytest.mark.parametrize(
    ("request_text", "passed"),
    [
        ("make it better", False),
        ("fix the bug", False),
        ("refactor everything", False),
        ("Add a cache to agentos/knowledge/store.py", False),
        (DEV_CLEAR[0][2], True),
        (HOLDOUT_CLEAR[0][2], True),
    ],
    ids=[
        "make-it-better",
        "fix-the-bug",
        "refactor-everything",
        "what-and-where-only",
        "router-keyerror",
        "cards-message",
    ],
)
def test_canonical_requests_get_the_verdict_a_person_would_give(
    request_text: str, passed: bool
) -> None:
    assert interview(request_text, DEFAULTS).passed is passed


def test_the_clearest_request_scores_high_on_every_axis_and_the_vaguest_on_none() -> None:
    clear = interview(DEV_CLEAR[0][2], DEFAULTS)
    vague = interview("make it better", DEFAULTS)
    assert all(clear.axes[a] >= 0.7 for a in AXES), clear.axes
    assert all(vague.axes[a] <= 0.25 for a in AXES), vague.axes
    assert clear.ambiguity < 0.1 < 0.9 < vague.ambiguity


def test_a_whole_interview_document_for_a_vague_request() -> None:
    assert interview("make it better", DEFAULTS).as_dict() == {
        "request": "make it better",
        "passed": False,
        "read_only": False,
        "ambiguity": 0.925,
        "threshold": 0.4,
        "axes": {"goal": 0.25, "constraints": 0.0, "scope": 0.0, "context": 0.0, "success": 0.0},
        "weights": {
            "goal": 0.3,
            "constraints": 0.15,
            "scope": 0.2,
            "context": 0.15,
            "success": 0.2,
        },
        "floors": {"goal": 0.5, "constraints": 0.0, "scope": 0.0, "context": 0.0, "success": 0.0},
        "reasons": [
            "ambiguity 0.925 is over the threshold 0.4",
            "goal 0.250 is under its floor 0.5",
        ],
        "questions": [
            {
                "axis": "goal",
                "text": "What does “it” refer to in “make it better”? Name the "
                "thing to change and what should be different "
                "afterwards.",
            },
            {
                "axis": "constraints",
                "text": "What must stay as it is (public API, output "
                "format, other files, dependencies), and within "
                "which limits (versions, size, time)?",
            },
            {
                "axis": "scope",
                "text": "Which files, modules or functions should change? Name "
                "a path or a symbol (a function, class or command).",
            },
            {
                "axis": "context",
                "text": "Why is this needed, and how does it behave today? A "
                "sentence of background (who needs it, what it "
                "replaces) is enough.",
            },
            {
                "axis": "success",
                "text": "How will we know it is done? Name a check: tests "
                "that must pass, a command and its expected output "
                "or exit code, a status code, or a file that must "
                "exist.",
            },
        ],
        "proposed_checks": [],
        "evidence": {
            "goal": ["action: make", "vague: better"],
            "constraints": [],
            "scope": [],
            "context": [],
            "success": [],
        },
        "rewrite": None,
        "rewrite_error": None,
        "named": [],
        "test_changes": None,
    }


def test_an_empty_request_is_bad_input() -> None:
    from agentos.errors import BadInput

    with pytest.raises(BadInput, match="request: the request is empty"):
        interview("   \n", DEFAULTS)


# --- determinism --------------------------------------------------------------------------

_SCORE_ALL = """\
import json, sys
from agentos.interview.engine import interview
from agentos.workspace.settings import InterviewSettings
requests = json.load(sys.stdin)
print(json.dumps([interview(r, InterviewSettings()).as_dict() for r in requests],
                 sort_keys=True))
"""


def test_the_same_requests_get_the_same_scores_in_other_processes() -> None:
    requests = [request for _, _, request in LABELLED]
    here = json.dumps([interview(r, DEFAULTS).as_dict() for r in requests], sort_keys=True)
    for seed in ("0", "1", "4242"):  # set and dict orders differ between these seeds
        out = subprocess.run(
            [sys.executable, "-c", _SCORE_ALL],
            input=json.dumps(requests),
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
            env={**os.environ, "PYTHONHASHSEED": seed},
        )
        assert out.stdout.strip() == here


def test_scores_are_rounded_so_they_print_the_same_everywhere() -> None:
    for _, _, request in LABELLED:
        result = interview(request, DEFAULTS)
        for value in (*result.axes.values(), result.ambiguity):
            assert 0.0 <= value <= 1.0
            assert round(value, 3) == value


def test_the_cli_gives_the_same_json_twice(cli: Any) -> None:
    first = cli("interview", DEV_CLEAR[3][2], "--json")
    second = cli("interview", DEV_CLEAR[3][2], "--json")
    assert first.returncode == second.returncode == 0
    assert first.stdout == second.stdout


# --- questions ----------------------------------------------------------------------------


def test_each_question_names_one_weak_axis_and_every_weak_axis_gets_one() -> None:
    for ident, _, request in LABELLED:
        result = interview(request, DEFAULTS)
        if result.passed:
            assert result.questions == [], ident
            continue
        asked = [q.axis for q in result.questions]
        weak = [a for a in AXES if result.axes[a] < result.floors[a] or result.axes[a] < WEAK_BELOW]
        assert asked == (weak or asked[:1]), ident
        assert len(set(asked)) == len(asked), ident
        assert len({q.text for q in result.questions}) == len(asked), ident


@pytest.mark.parametrize(
    ("request_text", "axis", "says"),
    [
        ("make it better", "goal", "“make it better”"),
        ("optimize stuff", "goal", "“stuff”"),
        ("Please improve the router, it's kind of slow and messy sometimes.", "goal", "“messy”"),
        ("clean up the code", "scope", "“the code” is not a scope"),
        (
            "Please improve the router, it's kind of slow and messy sometimes.",
            "scope",
            "You mention “router”",
        ),
        (
            "Add a cache to agentos/knowledge/store.py",
            "constraints",
            "Besides agentos/knowledge/store.py",
        ),
        ("the app is broken, please fix", "context", "what did you expect instead"),
        ("add a feature for users to export data", "context", "Why is this needed"),
        ("improve performance", "success", "target"),
        ("add some tests", "success", "which tests must pass"),
    ],
    ids=[
        "goal-pronoun",
        "goal-stuff",
        "goal-vague-words",
        "scope-everything",
        "scope-area",
        "constraints-named-file",
        "context-bug",
        "context-feature",
        "success-speed",
        "success-tests",
    ],
)
def test_questions_are_specific_to_what_the_request_lacks(
    request_text: str, axis: str, says: str
) -> None:
    questions = {q.axis: q.text for q in interview(request_text, DEFAULTS).questions}
    assert says in questions[axis]


def _file_finder(root: Path) -> Any:
    """Candidates from real files: those whose name shares a word with the request."""

    def candidates(request: str) -> list[str]:
        asked = set(words(request))
        return sorted(
            str(p.relative_to(root)) for p in root.rglob("*.py") if asked & set(words(p.stem))
        )

    return candidates


def test_the_scope_question_names_candidate_paths(tmp_path: Path) -> None:
    for rel in ("src/router.py", "src/billing.py", "tests/test_router.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("# code\n")
    result = interview("Make the router faster", DEFAULTS, candidates=_file_finder(tmp_path))
    scope = next(q.text for q in result.questions if q.axis == "scope")
    assert scope == (
        "You mention “router”: which files or modules should change? "
        "Candidates: src/router.py, tests/test_router.py."
    )


def test_candidates_are_not_looked_up_when_scope_is_clear(tmp_path: Path) -> None:
    calls: list[str] = []

    def candidates(request: str) -> list[str]:
        calls.append(request)
        return ["src/router.py"]

    interview("Add a cache to agentos/knowledge/store.py", DEFAULTS, candidates=candidates)
    assert calls == []


@pytest.mark.skipif(
    importlib.util.find_spec("agentos.knowledge.store") is None,
    reason="the knowledge store is not built yet",
)
def test_candidates_from_the_knowledge_store_are_real_indexed_paths(
    ws: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentos.knowledge.store import open_store

    repo = tmp_path / "shop"
    (repo / "shop").mkdir(parents=True)
    (repo / "shop/router.py").write_text('def route(request):\n    """The router."""\n')
    (repo / "shop/billing.py").write_text("def invoice(order):\n    return order.total\n")
    with open_store(ws) as store:
        store.add([repo])
    monkeypatch.chdir(repo)  # candidates below the current directory are shown relative
    result = interview_in(ws, "make the router faster")
    scope = next(q.text for q in result.questions if q.axis == "scope")
    assert scope == (
        "You mention “router”: which files or modules should change? Candidates: shop/router.py."
    )
    assert (repo / "shop/router.py").is_file()


@pytest.mark.skipif(
    importlib.util.find_spec("agentos.knowledge.store") is None
    or importlib.util.find_spec("agentos.cli.kb") is None,
    reason="the knowledge store and `agentos kb` are not built yet",
)
def test_with_a_knowledge_store_the_scope_question_names_real_paths(
    cli: Any, ws: Workspace, tmp_path: Path
) -> None:
    repo = tmp_path / "shop"
    files = {
        "shop/router.py": 'def route(request):\n    """Route a request to a handler; the '
        'router is slow on long paths."""\n',
        "shop/billing.py": "def invoice(order):\n    return order.total\n",
        "docs/intro.md": "# Shop\n\nA small shop.\n",
    }
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    added = cli("kb", "add", str(repo))
    assert added.returncode == 0, added.stderr
    out = cli("interview", "make the router faster", "--json", "--no-input")
    assert out.returncode == 1, out.stderr
    scope = next(q["text"] for q in json.loads(out.stdout)["questions"] if q["axis"] == "scope")
    named = scope.split("Candidates: ", 1)[1].rstrip(".").split(", ")
    assert any(p.endswith("router.py") for p in named)
    for p in named:
        assert Path(p).is_file() or (repo / p).is_file() or (ws.root / p).is_file(), p


def test_answers_appended_to_a_blocked_request_can_make_it_pass() -> None:
    first = interview("add some tests", DEFAULTS)
    answers = {
        "constraints": "Only add tests/test_config.py; do not change app/config.py.",
        "scope": "parse_config() in app/config.py.",
        "context": "parse_config() has no tests and broke twice last month.",
        "success": "Done when pytest tests/test_config.py passes.",
    }
    assert [q.axis for q in first.questions] == list(answers)
    again = interview(amend(first.request, answers), DEFAULTS)
    assert again.passed, again.as_dict()
    assert again.request.startswith("add some tests\nOnly add tests/test_config.py;")


# --- settings -----------------------------------------------------------------------------


def _settings(ws: Workspace, interview_settings: dict[str, Any]) -> None:
    ws.settings_file.write_text(yaml.safe_dump({"interview": interview_settings}))


@pytest.mark.parametrize(
    ("settings", "request_text", "code"),
    [
        ({"threshold": 0.8}, "add some tests", 0),
        ({"threshold": 0.1}, DEV_CLEAR[2][2], 1),
        ({"floors": {"success": 0.9}}, DEV_CLEAR[22][2], 1),
        (
            {"weights": {"goal": 1, "constraints": 0, "scope": 0, "context": 0, "success": 0}},
            "Add dark mode",
            0,
        ),
    ],
    ids=["lenient-threshold", "strict-threshold", "success-floor", "goal-only-weights"],
)
def test_threshold_floors_and_weights_come_from_agentos_yaml(
    cli: Any, ws: Workspace, settings: dict[str, Any], request_text: str, code: int
) -> None:
    _settings(ws, settings)
    out = cli("interview", request_text, "--json")
    assert out.returncode == code, out.stdout + out.stderr
    doc = json.loads(out.stdout)
    assert doc["passed"] is (code == 0)
    if "floors" in settings:
        assert doc["reasons"] == ["success 0.000 is under its floor 0.9"]
        assert [q["axis"] for q in doc["questions"]] == ["context", "success"]


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"threshold": 2},
            "agentos.yaml: interview.threshold: Input should be less than or equal to 1",
        ),
        ({"rewrite_modle": "x"}, "agentos.yaml: interview.rewrite_modle: unknown field"),
    ],
    ids=["threshold-out-of-range", "unknown-field"],
)
def test_bad_interview_settings_are_one_line_errors(
    cli: Any, ws: Workspace, settings: dict[str, Any], message: str
) -> None:
    _settings(ws, settings)
    out = cli("interview", "make it better")
    assert out.returncode == 2
    assert out.stderr.strip() == f"error: {ws.settings_file.parent}/{message}"


# --- proposed checks ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_text", "checks"),
    [
        (
            "Fix the parser so that all tests pass.",
            [{"name": "tests pass", "tests": []}],
        ),
        (
            "Tidy the imports in app/; ruff check passes.",
            [{"name": "lint clean", "run": "ruff check ."}],
        ),
        (
            "Rename the helpers. Lint clean, tests green.",
            [
                {"name": "lint clean", "run": "ruff check ."},
                {"name": "tests pass", "tests": []},
            ],
        ),
        (
            "Document the flags. README.md must exist.",
            [{"name": "README.md exists", "file_exists": "README.md"}],
        ),
        (
            "Create docs/cli.md documenting every command.",
            [{"name": "docs/cli.md exists", "file_exists": "docs/cli.md"}],
        ),
        (
            "Add a case. Done when pytest tests/test_x.py passes.",
            [{"name": "tests/test_x.py passes", "tests": ["tests/test_x.py"]}],
        ),
        (
            "Only change agentos/cli/ and README.md.",
            [
                {
                    "name": "changes stay in agentos/cli/, README.md",
                    "no_changes_outside": ["agentos/cli/**", "README.md"],
                }
            ],
        ),
        (
            "Fix it in app/views.py only.",
            [{"name": "changes stay in app/views.py", "no_changes_outside": ["app/views.py"]}],
        ),
        (
            "Keep the diff under 50 lines.",
            [{"name": "at most 50 changed lines", "max_diff_lines": 50}],
        ),
        (
            'README.md must contain "## Install (pip)".',
            [
                {
                    "name": 'README.md contains "## Install (pip)"',
                    "file_contains": {"path": "README.md", "pattern": r"## Install \(pip\)"},
                }
            ],
        ),
        ("Done when `make docs` exits 0.", [{"name": "make docs succeeds", "run": "make docs"}]),
        ("Write /etc/motd. /etc/motd must exist.", []),
        ("make it better", []),
    ],
    ids=[
        "tests-pass",
        "ruff-passes",
        "lint-clean",
        "must-exist",
        "create-file",
        "named-test-file",
        "only-change",
        "in-file-only",
        "diff-limit",
        "must-contain",
        "command-exits-0",
        "absolute-path-refused",
        "nothing-said",
    ],
)
def test_success_criteria_in_the_request_become_proposed_checks(
    request_text: str, checks: list[dict[str, Any]]
) -> None:
    found = interview(request_text, DEFAULTS).proposed_checks
    assert [
        c.model_dump(mode="json", exclude_none=True, exclude={"timeout"}) for c in found
    ] == checks


# --- every credited criterion is a check --------------------------------------------------
# Success phrasings as people write them, each with the exact checks it must become. The
# success axis credits a criterion only through its check: with none, it counts at most
# UNCHECKED_SUCCESS, under WEAK_BELOW, and the evidence says what no check can hold.


def _tests(name: str, *paths: str) -> dict[str, Any]:
    """The repository's own test command: the whole suite, or the tests named."""
    return {"name": name, "tests": list(paths)}


def _has(path: str, text: str, pattern: str | None = None) -> dict[str, Any]:
    return {
        "name": f'{path} contains "{text}"',
        "file_contains": {"path": path, "pattern": pattern or text},
    }


def _lacks(path: str, text: str) -> dict[str, Any]:
    return {
        "name": f'{path} does not contain "{text}"',
        "run": f"test -f {path} && ! grep -qF -e {text} -- {path}",
    }


SUITE = _tests("tests pass")
TEST_PARSER = _tests("tests/test_parser.py passes", "tests/test_parser.py")
FIXED_TYPO = _has("CHANGES.md", "Fixed typo")
MAKE_DOCS = {"name": "make docs succeeds", "run": "make docs"}
AUTH_GONE = {"name": "legacy/auth_v1.py is gone", "run": "test ! -e legacy/auth_v1.py"}

CREDITED: list[tuple[str, str, list[dict[str, Any]]]] = [
    ("done-when-tests-pass", "Fix the parser; done when tests pass.", [SUITE]),
    ("all-tests-must-pass", "Fix the parser; all tests must pass.", [SUITE]),
    ("suite-passes", "Fix the parser so that the test suite passes.", [SUITE]),
    ("tests-are-green", "Fix the parser; the tests are green.", [SUITE]),
    ("tests-green", "Fix the parser; all tests green.", [SUITE]),
    ("pytest-passes", "Fix the parser; pytest passes.", [SUITE]),
    ("keep-passing", "Fix the parser; existing tests keep passing.", [SUITE]),
    ("no-test-fails", "Fix the parser; no test fails.", [SUITE]),
    ("pytest-in-backticks", "Fix the parser. Done when `pytest` passes.", [SUITE]),
    ("pytest-command-exits-0", "Fix the parser; `python -m pytest -q` exits 0.", [SUITE]),
    ("test-file-passes", "Fix parse(); done when tests/test_parser.py passes.", [TEST_PARSER]),
    ("test-file-must-pass", "Fix parse(); tests/test_parser.py must pass.", [TEST_PARSER]),
    ("pytest-test-file", "Fix parse(); pytest tests/test_parser.py passes.", [TEST_PARSER]),
    ("tests-in-file", "Fix parse(); the tests in tests/test_parser.py pass.", [TEST_PARSER]),
    (
        "two-test-files",
        "Fix parse(); tests/test_parser.py and tests/test_lexer.py pass.",
        [
            _tests(
                "tests/test_parser.py, tests/test_lexer.py pass",
                "tests/test_parser.py",
                "tests/test_lexer.py",
            )
        ],
    ),
    (
        "test-node-id",
        "Fix parse(); tests/test_parser.py::test_empty passes.",
        [_tests("tests/test_parser.py::test_empty passes", "tests/test_parser.py::test_empty")],
    ),
    (
        "pytest-file-in-backticks",
        "Fix parse(); `pytest tests/test_parser.py` passes.",
        [TEST_PARSER],
    ),
    (
        "test-directory",
        "Fix parse(); the integration tests in tests/integration/ must pass.",
        [_tests("tests/integration/ passes", "tests/integration/")],
    ),
    (
        "ruff-passes",
        "Tidy the imports in app/; ruff check passes.",
        [{"name": "lint clean", "run": "ruff check ."}],
    ),
    (
        "lint-is-clean",
        "Tidy the imports in app/; lint is clean.",
        [{"name": "lint clean", "run": "ruff check ."}],
    ),
    (
        "no-lint-errors",
        "Tidy the imports in app/; no lint errors.",
        [{"name": "lint clean", "run": "ruff check ."}],
    ),
    (
        "mypy-strict-passes",
        "Annotate app/db.py; mypy --strict passes.",
        [{"name": "types check", "run": "mypy --strict ."}],
    ),
    (
        "mypy-is-clean",
        "Annotate app/db.py; mypy is clean.",
        [{"name": "types check", "run": "mypy ."}],
    ),
    ("command-exits-0", "Fix the docs build; done when `make docs` exits 0.", [MAKE_DOCS]),
    ("command-succeeds", "Fix the docs build; `make docs` succeeds.", [MAKE_DOCS]),
    ("command-exit-code-0", "Fix the docs build; `make docs` must exit with code 0.", [MAKE_DOCS]),
    ("bare-make-target", "Fix the docs build; make docs exits 0.", [MAKE_DOCS]),
    (
        "command-works",
        "Fix the frontend build; `npm run build` works.",
        [{"name": "npm run build succeeds", "run": "npm run build"}],
    ),
    (
        "bare-pip-install",
        "Drop the unused requests dependency from pyproject.toml; pip install -e . succeeds.",
        [{"name": "pip install -e . succeeds", "run": "pip install -e ."}],
    ),
    (
        "bare-docker-build",
        "Add a Dockerfile for the app; docker build . succeeds.",
        [
            {"name": "Dockerfile exists", "file_exists": "Dockerfile"},
            {"name": "docker build . succeeds", "run": "docker build ."},
        ],
    ),
    (
        "command-within-a-time",
        "Speed up the benchmark; `python bench.py` exits 0 in under 60 s.",
        [{"name": "python bench.py succeeds", "run": "python bench.py", "timeout": 60.0}],
    ),
    (
        "command-prints",
        "Fix the greeting; `python -m app hello` prints 'Hello, world'.",
        [
            {
                "name": 'python -m app hello prints "Hello, world"',
                "run": "( python -m app hello ) 2>&1 | grep -F -e 'Hello, world'",
            }
        ],
    ),
    (
        "command-no-longer-prints",
        "Remove the debug output; `agentos route x` no longer prints 'DEBUG'.",
        [
            {
                "name": 'agentos route x does not print "DEBUG"',
                "run": "! ( agentos route x ) 2>&1 | grep -F -e DEBUG",
            }
        ],
    ),
    (
        "bare-python-c",
        "Fix the circular import; python -c 'import app' works.",
        [{"name": "python -c 'import app' succeeds", "run": "python -c 'import app'"}],
    ),
    (
        "go-test-keeps-its-dots",
        "Fix the Go server shutdown; `go test ./...` passes.",
        [{"name": "go test ./... succeeds", "run": "go test ./..."}],
    ),
    (
        "file-must-exist",
        "Document the flags; README.md must exist.",
        [{"name": "README.md exists", "file_exists": "README.md"}],
    ),
    (
        "create-file",
        "Create docs/cli.md documenting every command.",
        [{"name": "docs/cli.md exists", "file_exists": "docs/cli.md"}],
    ),
    (
        "must-exist-when-done",
        "create notes.txt in the repository root; notes.txt must exist when done",
        [{"name": "notes.txt exists", "file_exists": "notes.txt"}],
    ),
    (
        "file-is-created",
        "Write the changelog; CHANGES.md is created.",
        [{"name": "CHANGES.md exists", "file_exists": "CHANGES.md"}],
    ),
    (
        "file-should-exist",
        "Add the licence text; LICENSE should exist.",
        [{"name": "LICENSE exists", "file_exists": "LICENSE"}],
    ),
    ("file-is-gone", "Drop the old auth module; legacy/auth_v1.py is gone.", [AUTH_GONE]),
    (
        "file-no-longer-exists",
        "Drop the old auth module; legacy/auth_v1.py no longer exists.",
        [AUTH_GONE],
    ),
    ("delete-file", "Delete legacy/auth_v1.py and its imports.", [AUTH_GONE]),
    (
        "directory-must-not-exist",
        "Drop the old code; legacy/ must not exist.",
        [{"name": "legacy/ is gone", "run": "test ! -e legacy"}],
    ),
    (
        "issue-14-contains",
        "Add a changelog entry; done when CHANGES.md contains 'Fixed typo'.",
        [FIXED_TYPO],
    ),
    ("must-contain", "Add a changelog entry; CHANGES.md must contain 'Fixed typo'.", [FIXED_TYPO]),
    ("must-include", "Add a changelog entry; CHANGES.md must include 'Fixed typo'.", [FIXED_TYPO]),
    (
        "should-mention",
        "Add a changelog entry; CHANGES.md should mention 'Fixed typo'.",
        [FIXED_TYPO],
    ),
    ("appears-in", "Add a changelog entry; 'Fixed typo' appears in CHANGES.md.", [FIXED_TYPO]),
    ("says", "Add a changelog entry; CHANGES.md says 'Fixed typo'.", [FIXED_TYPO]),
    ("is-in", "Add a changelog entry; done when 'Fixed typo' is in CHANGES.md.", [FIXED_TYPO]),
    ("has-an-entry", "Add a changelog entry; CHANGES.md has an entry 'Fixed typo'.", [FIXED_TYPO]),
    (
        "must-be-listed-in",
        "Add a changelog entry; 'Fixed typo' must be listed in CHANGES.md.",
        [FIXED_TYPO],
    ),
    ("curly-quotes", "Add a changelog entry; CHANGES.md contains “Fixed typo”.", [FIXED_TYPO]),
    (
        "heading",
        "Document installation; README.md must contain the heading '## Installation'.",
        [_has("README.md", "## Installation")],
    ),
    (
        "metacharacters-escaped",
        'Document installation; README.md must contain "## Install (pip)".',
        [_has("README.md", "## Install (pip)", r"## Install \(pip\)")],
    ),
    (
        "command-in-a-file",
        "Document the init command; README.md lists `agentos init`.",
        [_has("README.md", "agentos init")],
    ),
    (
        "two-texts",
        "Update the changelog; the CHANGES.md file contains 'Fixed typo' and 'Added --json'.",
        [FIXED_TYPO, _has("CHANGES.md", "Added --json")],
    ),
    (
        "no-longer-mentions",
        "Drop the beta warning; README.md no longer mentions 'beta'.",
        [_lacks("README.md", "beta")],
    ),
    (
        "gone-from",
        "Drop the beta warning; 'beta' is gone from README.md.",
        [_lacks("README.md", "beta")],
    ),
    (
        "must-not-contain",
        "Resolve the leftovers; README.md must not contain 'TODO'.",
        [_lacks("README.md", "TODO")],
    ),
]

NOT_CHECKABLE: list[tuple[str, str, str]] = [
    ("status-code", "Fix the handler; it should return 404 for a missing user.", "404"),
    ("time-limit", "Make search faster: under 200 ms for 10k rows.", "200 ms"),
    ("ci", "Fix the pipeline; CI passes.", "CI runs elsewhere"),
    (
        "not-a-python-test",
        "Fix the login form; the Playwright test e2e/login.spec.ts passes.",
        "pytest, which cannot run e2e/login.spec.ts",
    ),
    (
        "conditional",
        "Fix the banner; `agentos hub list` exits 0 when no package is installed.",
        "a situation no check sets up",
    ),
    (
        "todays-behaviour",
        "Bug: `agentos receipts verify` exits 0 even when a receipt was deleted.",
        "today's behaviour",
    ),
    ("which-readme", "Update the docs; the README says 'hello'.", "which file: README.md"),
    (
        "command-must-fail",
        "Fix the crash; `agentos gc` exits 1 on a missing lock.",
        "say what must succeed",
    ),
    (
        "elsewhere",
        "Upgrade the schema; alembic upgrade head and downgrade -1 both succeed on a copy of prod.",
        "no check",
    ),
    ("works-on-mobile", "Fix the date picker; done when it works on mobile.", "no check"),
    ("renders", "Fix the layout; the page renders without overflow.", "no check"),
]


def _checks(result: Any) -> list[dict[str, Any]]:
    return [
        c.model_dump(mode="json", exclude_none=True, exclude={"timeout"})
        | ({"timeout": c.timeout} if c.timeout != 300 else {})
        for c in result.proposed_checks
    ]


@pytest.mark.parametrize(
    ("request_text", "checks"),
    [pytest.param(r, c, id=i) for i, r, c in CREDITED],
)
def test_each_success_phrasing_becomes_its_exact_checks_and_is_credited(
    request_text: str, checks: list[dict[str, Any]]
) -> None:
    result = interview(request_text, DEFAULTS)
    assert _checks(result) == checks
    assert result.axes["success"] >= WEAK_BELOW, result.evidence["success"]
    names = [c["name"] for c in checks if "no_changes_outside" not in c]
    assert f"checks: {', '.join(names)}" in result.evidence["success"]


@pytest.mark.parametrize(
    ("request_text", "why"),
    [pytest.param(r, w, id=i) for i, r, w in NOT_CHECKABLE],
)
def test_a_criterion_no_check_can_hold_is_not_credited_and_the_evidence_says_why(
    request_text: str, why: str
) -> None:
    result = interview(request_text, DEFAULTS)
    assert result.proposed_checks == []
    assert result.axes["success"] <= UNCHECKED_SUCCESS < WEAK_BELOW
    assert why in " ".join(result.evidence["success"])


def test_a_success_criterion_the_interview_credits_always_has_a_check() -> None:
    requests = [r for _, r, _ in CREDITED] + [r for _, r, _ in NOT_CHECKABLE]
    requests += [r for _, _, r in LABELLED]
    assert len(CREDITED) + len(NOT_CHECKABLE) >= 70
    for request in requests:
        result = interview(request, DEFAULTS)
        success_checks = [c for c in result.proposed_checks if c.kind in SUCCESS_KINDS]
        credited = result.axes["success"] > UNCHECKED_SUCCESS
        assert credited == bool(success_checks), (request, result.evidence["success"])


def test_a_criterion_that_describes_the_bug_is_not_proposed_as_a_check() -> None:
    # The bug report says the command exits 0 today; a check that it exits 0 would pass on
    # the broken code (the old engine proposed "agentos receipts verify succeeds" here).
    result = interview(DEV_CLEAR[13][2], DEFAULTS)
    assert result.passed
    assert result.proposed_checks == []
    assert "not checkable: `agentos receipts verify` exits 0 (it describes today's behaviour)" in (
        "; ".join(result.evidence["success"])
    )


def test_the_shell_checks_the_interview_writes_hold_only_when_their_criterion_does(
    tmp_path: Path,
) -> None:
    (tmp_path / "legacy").mkdir()
    (tmp_path / "legacy/auth_v1.py").write_text("SECRET = 1\n")
    (tmp_path / "README.md").write_text("# App\n\nStill in beta.\n")
    (tmp_path / "app.py").write_text("print('Hello, world')\n")
    request = (
        "Finish the release: legacy/auth_v1.py is gone, README.md must not mention 'beta',"
        " `python app.py` prints 'Hello, world' and `python app.py` no longer prints 'DEBUG'."
    )
    checks = interview(request, DEFAULTS).proposed_checks
    assert [c.name for c in checks] == [
        "legacy/auth_v1.py is gone",
        'README.md does not contain "beta"',
        'python app.py prints "Hello, world"',
        'python app.py does not print "DEBUG"',
    ]

    def passing() -> list[str]:
        env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
        return [
            c.name
            for c in checks
            if c.run is not None
            and subprocess.run(["bash", "-c", c.run], cwd=tmp_path, env=env).returncode == 0
        ]

    assert passing() == [
        'python app.py prints "Hello, world"',
        'python app.py does not print "DEBUG"',
    ]
    (tmp_path / "legacy/auth_v1.py").unlink()
    (tmp_path / "README.md").write_text("# App\n")
    (tmp_path / "app.py").write_text("print('Hello, world')\nprint('DEBUG: x')\n")
    assert passing() == [
        "legacy/auth_v1.py is gone",
        'README.md does not contain "beta"',
        'python app.py prints "Hello, world"',
    ]


def test_every_test_command_proposal_goes_through_one_function() -> None:
    # "tests pass" is the repository's own test command (a `tests` check, resolved per
    # repository at gate time); only _tests_check builds one, and nothing names pytest.
    tree = ast.parse(Path(interview_checks.__file__).read_text())
    builders = {
        fn.name
        for fn in ast.walk(tree)
        if isinstance(fn, ast.FunctionDef)
        for node in ast.walk(fn)
        if isinstance(node, ast.keyword) and node.arg == "tests"
    }
    assert builders == {"_tests_check"}
    for _, request, checks in CREDITED:
        for check in checks:
            assert "pytest" not in check.get("run", ""), request


# --- read-only requests -------------------------------------------------------------------

READ_ONLY: list[tuple[str, str]] = [
    ("run-and-report", "run the tests and report what fails"),
    ("which-fail", "which tests fail?"),
    ("review-and-list", "review src/api.py and list the problems"),
    ("explain", "explain how routing works"),
    ("summarise", "Summarise what agentos/routing/router.py does"),
    ("find-where", "Find where the retry limit is set"),
    ("tell-me", "Tell me which tests are slow"),
    ("show-me", "Show me which packages are installed"),
    ("why", "Why does route() raise KeyError for an empty card list?"),
    ("is-there", "Is there a test for parse_version()?"),
    ("how-does-with-a-verb", "How does the guardian decide to restart an agent?"),
    ("check-that", "Check that the tests pass"),
    ("check-whether", "Check whether `agentos gc` removes orphan worktrees"),
    ("negated-fix", "Don't fix anything, just list the failing tests"),
    ("without-changing", "Run ruff check and report the errors without changing any code"),
    ("audit", "Audit agentos/hub/store.py for unsafe archive extraction"),
    ("count", "Count the TODOs in agentos/"),
    ("profile", "Profile search() in agentos/knowledge/store.py and report where the time goes"),
    ("can-you-check", "Can you check why the build fails?"),
    ("vague", "look at stuff"),
]
CHANGES: list[tuple[str, str]] = [
    ("fix", "Fix the failing tests"),
    ("run-then-fix", "Run the tests and fix what fails"),
    ("check-then-fix", "Check the config loader and fix the KeyError"),
    ("run-a-formatter", "Run black on src/"),
    ("run-with-fix", "Run `ruff check --fix` on the repository"),
    ("run-migrations", "Run the migrations"),
    ("run-an-installer", "Run npm install and commit the lock file"),
    ("passive", "The parser should be fixed"),
    ("wanted", "I want the deprecated flags removed"),
    ("show-on-a-page", "Show 'Wrong email or password' under the login form"),
    ("review-then-rename", "Review src/api.py and rename load_cfg to load_config"),
    ("a-file-criterion", "List the new flag in README.md; README.md must contain '--json'"),
    ("run-until-it-passes", "Run the tests; done when tests pass"),
    ("make-sure", "Make sure the tests pass"),
    ("negated-then-change", "Don't change the API; add a --json flag to hub list"),
    ("investigate-and-fix", "Investigate the memory leak and fix it"),
    ("explain-in-a-comment", "Explain the regex in a comment above parse()"),
    ("question-then-order", "Why does route() raise KeyError? Fix it."),
    ("could-you-improve", "Could you improve the performance of the API? Users complain."),
]


@pytest.mark.parametrize("request_text", [pytest.param(r, id=i) for i, r in READ_ONLY])
def test_a_request_that_asks_for_an_answer_is_read_only(request_text: str) -> None:
    result = interview(request_text, DEFAULTS)
    assert result.read_only and result.as_dict()["read_only"] is True
    assert result.axes["constraints"] == 1.0
    assert result.evidence["constraints"][0].startswith("read-only: ")
    assert result.evidence["constraints"][0].endswith(" (nothing changes)")
    assert result.proposed_checks == []


@pytest.mark.parametrize("request_text", [pytest.param(r, id=i) for i, r in CHANGES])
def test_a_request_for_a_change_is_not_read_only_even_with_read_verbs(request_text: str) -> None:
    assert interview(request_text, DEFAULTS).read_only is False


@pytest.mark.parametrize("request_text", [pytest.param(r, id=i) for i, r in READ_ONLY])
def test_a_read_only_request_is_never_asked_which_files_to_change_or_what_must_stay(
    request_text: str,
) -> None:
    result = interview(request_text, DEFAULTS, candidates=lambda _: ["agentos/routing/router.py"])
    assert "constraints" not in result.weak
    for q in result.questions:
        assert "should change" not in q.text and "must stay" not in q.text, q.text


@pytest.mark.parametrize(
    ("request_text", "ambiguity", "passed"),
    [
        ("run the tests and report what fails", 0.335, True),
        ("which tests fail?", 0.37, True),
        ("review src/api.py and list the problems", 0.395, True),
        ("explain how routing works", 0.515, False),
        ("look at stuff", 0.795, False),
    ],
    ids=["run-and-report", "which-fail", "review-and-list", "explain", "look-at-stuff"],
)
def test_a_plain_read_only_request_passes_and_a_vague_one_stays_blocked(
    request_text: str, ambiguity: float, passed: bool
) -> None:
    result = interview(request_text, DEFAULTS)
    assert result.read_only
    assert (result.ambiguity, result.passed) == (ambiguity, passed)


def test_a_whole_interview_document_for_a_read_only_request() -> None:
    doc = interview("run the tests and report what fails", DEFAULTS).as_dict()
    assert {k: v for k, v in doc.items() if k not in ("weights", "floors")} == {
        "request": "run the tests and report what fails",
        "passed": True,
        "read_only": True,
        "ambiguity": 0.335,
        "threshold": 0.4,
        "axes": {"goal": 0.75, "constraints": 1.0, "scope": 0.7, "context": 0.4, "success": 0.45},
        "reasons": [],
        "questions": [],
        "proposed_checks": [],
        "evidence": {
            "goal": ["action: report what fails"],
            "constraints": ["read-only: run the tests, report what fails (nothing changes)"],
            "scope": ["areas: test, report", "target: the test suite"],
            "context": ["symptoms: fail", "reproduction: run"],
            "success": ["answer: run the tests, report what fails (an answer, not a check)"],
        },
        "rewrite": None,
        "rewrite_error": None,
        "named": [],
        "test_changes": None,
    }


def test_a_blocked_read_only_request_asks_where_to_look_and_what_to_report() -> None:
    result = interview(
        "explain how routing works", DEFAULTS, candidates=lambda _: ["agentos/routing/router.py"]
    )
    assert [q.as_dict() for q in result.questions] == [
        {
            "axis": "scope",
            "text": "You mention “routing”: which files or modules should be looked at? "
            "Candidates: agentos/routing/router.py.",
        },
        {
            "axis": "context",
            "text": "What prompted the question, and what will you do with the answer? A "
            "sentence of background is enough.",
        },
        {
            "axis": "success",
            "text": "What should the answer contain? Say what to report, e.g. “the failing "
            "tests with their errors” or “each problem with its file and line”.",
        },
    ]


def test_the_cli_says_a_read_only_request_passes(cli: Any) -> None:
    out = cli("interview", "run the tests and report what fails", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert (doc["passed"], doc["read_only"], doc["proposed_checks"]) == (True, True, [])


# --- the CLI ------------------------------------------------------------------------------


def test_a_clear_request_passes_with_exit_0_and_json_on_stdout(cli: Any) -> None:
    out = cli("interview", DEV_CLEAR[0][2], "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["passed"] is True and doc["questions"] == [] and doc["reasons"] == []
    assert doc["proposed_checks"] == [
        {
            "name": "tests/test_router.py passes",
            "tests": ["tests/test_router.py"],
            "timeout": 300.0,
        }
    ]


def test_a_vague_request_is_blocked_with_exit_1_and_its_questions(cli: Any) -> None:
    out = cli("interview", "make it better", env={"COLUMNS": "100"})
    assert out.returncode == 1
    assert out.stderr == ""
    table_padding_removed = "\n".join(line.rstrip() for line in out.stdout.split("\n"))
    assert (
        table_padding_removed
        == """\
blocked: ambiguity 0.925 (threshold 0.4)
  ambiguity 0.925 is over the threshold 0.4
  goal 0.250 is under its floor 0.5
axis         score  floor  weight  found
goal         0.250  0.50   0.30    action: make; vague: better
constraints  0.000  0.00   0.15
scope        0.000  0.00   0.20
context      0.000  0.00   0.15
success      0.000  0.00   0.20
questions:
  goal: What does “it” refer to in “make it better”? Name the thing to change and what should be different afterwards.
  constraints: What must stay as it is (public API, output format, other files, dependencies), and within which limits (versions, size, time)?
  scope: Which files, modules or functions should change? Name a path or a symbol (a function, class or command).
  context: Why is this needed, and how does it behave today? A sentence of background (who needs it, what it replaces) is enough.
  success: How will we know it is done? Name a check: tests that must pass, a command and its expected output or exit code, a status code, or a file that must exist.
"""  # noqa: E501  (the exact output, one line per question)
    )


def test_an_empty_request_is_a_one_line_error_with_exit_2(cli: Any) -> None:
    out = cli("interview", "  ")
    assert out.returncode == 2
    assert out.stdout == ""
    assert out.stderr == "error: request: the request is empty: say what should be done\n"


def test_interview_has_help(cli: Any) -> None:
    out = cli("interview", "--help")
    assert out.returncode == 0
    for option in ("--json", "--no-input", "REQUEST"):
        assert option in out.stdout


# --- interactive answers in a terminal ----------------------------------------------------


class _Terminal:
    """The CLI in a real pseudo-terminal: stdin and stdout are a TTY."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        master, slave = pty.openpty()
        self.proc = subprocess.Popen(
            argv,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            close_fds=True,
            env={**os.environ, "COLUMNS": "120", **(env or {})},
        )
        os.close(slave)
        self.master = master
        self.seen = b""

    def read_until(self, needle: str, timeout: float = 60) -> str:
        want = needle.encode()
        deadline = time.monotonic() + timeout
        while want not in self.seen:
            left = deadline - time.monotonic()
            if left <= 0 or not self._read(left):
                raise AssertionError(f"never saw {needle!r}; got {self.seen.decode()!r}")
        before, _, self.seen = self.seen.partition(want)
        return before.decode()

    def _read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.master], [], [], timeout)
        if not ready:
            return False
        try:
            chunk = os.read(self.master, 4096)
        except OSError:  # EIO: the child closed the terminal
            return False
        self.seen += chunk
        return bool(chunk)

    def send(self, line: str) -> None:
        os.write(self.master, line.encode() + b"\n")

    def finish(self) -> tuple[int, str]:
        while self._read(60):
            pass
        code = self.proc.wait(timeout=60)
        os.close(self.master)
        return code, self.seen.decode()


def test_in_a_terminal_the_questions_are_asked_and_the_answers_scored_again(ws: Workspace) -> None:
    term = _Terminal(
        [
            sys.executable,
            "-m",
            "agentos",
            "--workspace",
            str(ws.root),
            "interview",
            "add some tests",
        ]
    )
    answers = [
        ("constraints", "Only add tests/test_config.py; do not change app/config.py."),
        ("scope", "parse_config() in app/config.py."),
        ("context", "parse_config() has no tests and broke twice last month."),
        ("success", "Done when pytest tests/test_config.py passes."),
    ]
    term.read_until("blocked")
    for axis, answer in answers:
        term.read_until(f"{axis}: ")
        term.read_until("> ")
        term.send(answer)
    code, rest = term.finish()
    assert code == 0, rest
    assert "passed" in rest
    assert "tests/test_config.py passes" in rest  # the proposed check from the answers


def test_empty_answers_end_the_conversation_and_the_request_stays_blocked(ws: Workspace) -> None:
    term = _Terminal(
        [sys.executable, "-m", "agentos", "--workspace", str(ws.root), "interview", "fix the bug"]
    )
    for _ in range(4):  # constraints, scope, context, success
        term.read_until("> ")
        term.send("")
    code, rest = term.finish()
    assert code == 1
    assert "blocked" in rest


def test_no_input_never_asks_even_in_a_terminal(ws: Workspace) -> None:
    term = _Terminal(
        [
            sys.executable,
            "-m",
            "agentos",
            "--workspace",
            str(ws.root),
            "interview",
            "fix the bug",
            "--no-input",
        ]
    )
    code, out = term.finish()
    assert code == 1
    assert "questions:" in out
    assert "> " not in out


# --- a rewrite through Ollama (a loopback server speaking /api/chat) ----------------------


class _FakeOllama(ThreadingHTTPServer):
    reply = "Fix <which bug> in <file>; done when <test> passes."

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _OllamaHandler)
        self.chats: list[dict[str, Any]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _OllamaHandler(BaseHTTPRequestHandler):
    server: _FakeOllama

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path != "/api/chat":
            self.send_error(404)
            return
        self.server.chats.append(body)
        data = json.dumps(
            {
                "model": body["model"],
                "created_at": "2026-01-01T00:00:00Z",
                "message": {"role": "assistant", "content": self.server.reply},
                "done": True,
                "done_reason": "stop",
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def ollama() -> Iterator[_FakeOllama]:
    server = _FakeOllama()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join()


def test_a_configured_model_proposes_a_rewrite_and_the_score_stays_the_same(
    ollama: _FakeOllama,
) -> None:
    settings = InterviewSettings(rewrite_model="qwen2.5-coder:7b")
    plain = interview("fix the bug", settings)
    rewritten = with_rewrite(plain, settings, host=ollama.url)
    assert rewritten.rewrite == _FakeOllama.reply
    assert {**rewritten.as_dict(), "rewrite": None} == plain.as_dict()
    (chat,) = ollama.chats
    assert chat["model"] == "qwen2.5-coder:7b"
    assert "fix the bug" in chat["messages"][-1]["content"]
    assert "scope: Which files" in chat["messages"][-1]["content"]


def test_a_passing_request_asks_no_model(ollama: _FakeOllama) -> None:
    settings = InterviewSettings(rewrite_model="qwen2.5-coder:7b")
    result = with_rewrite(interview(DEV_CLEAR[0][2], settings), settings, host=ollama.url)
    assert result.rewrite is None
    assert ollama.chats == []


def test_the_cli_shows_the_rewrite_from_the_configured_model(
    cli: Any, ws: Workspace, ollama: _FakeOllama
) -> None:
    _settings(ws, {"rewrite_model": "qwen2.5-coder:7b"})
    out = cli("interview", "fix the bug", "--json", env={"OLLAMA_HOST": ollama.url})
    assert out.returncode == 1, out.stderr
    doc = json.loads(out.stdout)
    assert doc["rewrite"] == _FakeOllama.reply
    assert doc["rewrite_error"] is None
    assert doc["ambiguity"] == interview("fix the bug", DEFAULTS).ambiguity


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_unreachable_model_leaves_a_note_and_the_same_verdict(ws: Workspace) -> None:
    _settings(ws, {"rewrite_model": "qwen2.5-coder:7b"})
    os.environ["OLLAMA_HOST"] = f"http://127.0.0.1:{_closed_port()}"
    try:
        result = interview_in(Workspace(ws.root), "fix the bug")
    finally:
        del os.environ["OLLAMA_HOST"]
    assert result.rewrite is None
    assert result.rewrite_error is not None
    assert result.rewrite_error.startswith(
        "interview.rewrite_model: no rewrite from Ollama model qwen2.5-coder:7b"
    )
    assert result.passed is False
    assert result.axes == interview("fix the bug", DEFAULTS).axes


def test_in_a_terminal_the_proposed_rewrite_can_be_taken_and_is_scored_like_any_request(
    ws: Workspace, ollama: _FakeOllama
) -> None:
    ollama.reply = DEV_CLEAR[0][2]
    _settings(ws, {"rewrite_model": "qwen2.5-coder:7b"})
    term = _Terminal(
        [sys.executable, "-m", "agentos", "--workspace", str(ws.root), "interview", "fix the bug"],
        env={"OLLAMA_HOST": ollama.url},
    )
    shown = term.read_until("Use the proposed rewrite as the request? [y/N]")
    assert "proposed rewrite:" in shown
    term.send("y")
    code, rest = term.finish()
    assert code == 0, rest
    assert "passed" in rest
    assert len(ollama.chats) == 1  # the rewrite passed, so no second rewrite was asked


@pytest.mark.parametrize(
    ("request_text", "allowed"),
    [
        ("Update the tests for the new API in src/api.py", {"paths": []}),
        ("Refactor parse_date in src/dates.py and update its tests", {"paths": []}),
        (
            "Fix the bug in src/i18n.py and its test in tests/test_i18n.py",
            {"paths": ["tests/test_i18n.py"]},
        ),
        ("Change tests/test_api.py to expect a 404 from /users", {"paths": ["tests/test_api.py"]}),
        ("Fix the failing test in tests/test_x.py; done when tests pass", None),
        ("Fix the bug in app.py without changing the tests", None),
        ("Fix the bug in app.py. Do not update the tests.", None),
        ("fix the test in tests/test_x.py", None),
    ],
    ids=[
        "update-the-tests",
        "and-update-its-tests",
        "and-its-test-in-a-file",
        "change-a-test-file",
        "fix-the-failing-test",
        "without-changing",
        "do-not-update",
        "fix-the-test-reads-make-it-pass",
    ],
)
def test_a_request_allows_test_changes_only_when_it_asks_for_them(
    request_text: str, allowed: dict[str, list[str]] | None
) -> None:
    asked = interview(request_text, DEFAULTS).test_changes
    assert (None if asked is None else {"paths": list(asked.paths)}) == allowed


def test_a_request_names_its_paths_and_symbols_for_the_gates_known_failures() -> None:
    result = interview("Fix parse_date in src/dates.py; done when tests pass", DEFAULTS)
    assert result.named == ["parse_date", "src/dates.py"]
