"""Receipts: readable files, one hash chain, concurrent writers, tampering found by id."""

from __future__ import annotations

import errno
import fcntl
import hashlib
import hmac
import itertools
import json
import locale
import math
import os
import random
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import CliRunner, make_repo, needs_tmux, write_package

from agentos.errors import BadInput, NotFound
from agentos.hub.store import Hub
from agentos.receipts import (
    HEAD_FILE,
    ChainReport,
    ParsedReceipt,
    export_key,
    import_key,
    list_receipts,
    load_receipt,
    parse_receipt,
    read_receipt,
    receipt_id,
    redact,
    rekey,
    verify_chain,
    verify_receipts,
    write_receipt,
)
from agentos.receipts.format import parse_fields, render, render_fields
from agentos.run.orchestrator import start_run
from agentos.workspace.layout import Workspace, init_workspace

TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")
SHA = re.compile(r"\b[0-9a-f]{64}\b")


def blank(text: str) -> str:
    return SHA.sub("<sha256>", TIME.sub("<time>", text))


def chain(ws: Workspace, n: int) -> list[str]:
    return [
        write_receipt(
            ws,
            "gate",
            {"check": f"check {i}", "passed": i % 2 == 0},
            run_id="run-1" if i % 3 == 0 else None,
        ).id
        for i in range(n)
    ]


# --- one receipt --------------------------------------------------------------------------


def test_a_receipt_is_readable_key_value_text(ws: Workspace) -> None:
    receipt = write_receipt(
        ws,
        "gate",
        {
            "passed": False,
            "checks": [
                {"name": "tests", "exit": 1, "output": "FAILED test_a\nFAILED test_b"},
                {"name": "lint", "exit": 0, "files": []},
            ],
            "summary": {"failed": 1, "took": 2.5, "note": None},
            "tags": ["a", "b: c"],  # quoted: unquoted, it would read back as a mapping
            "empty": {},
        },
        run_id="20261122-ab12",
        request="make the tests pass",
    )
    assert receipt.path == ws.receipts_dir / "00000001.txt"
    assert (
        blank(receipt.path.read_text())
        == """\
receipt: 00000001
kind: gate
time: <time>
run: 20261122-ab12
request: make the tests pass
passed: false
checks:
  - name: tests
    exit: 1
    output: |
      FAILED test_a
      FAILED test_b
  - name: lint
    exit: 0
    files: []
summary:
  failed: 1
  took: 2.5
  note: null
tags:
  - a
  - "b: c"
empty: {}
signed_from: 00000001
previous: none
sha256: <sha256>
mac: <sha256>
"""
    )
    assert receipt.sha256 == load_receipt(ws, receipt.id).sha256
    assert (receipt.kind, receipt.run_id) == ("gate", "20261122-ab12")
    assert TIME.fullmatch(receipt.time)


def test_requests_are_written_verbatim_and_control_characters_escaped(ws: Workspace) -> None:
    plain = write_receipt(ws, "route", {}, request='fix: the "parser" # now')
    assert '\nrequest: fix: the "parser" # now\n' in plain.path.read_text()
    lines = write_receipt(ws, "route", {}, request="first line\nsecond line")
    assert "\nrequest: |\n  first line\n  second line\n" in lines.path.read_text()
    hostile = write_receipt(ws, "route", {}, request="ok\x1b[2J\rhidden ")
    assert '\nrequest: "ok\\u001b[2J\\rhidden "\n' in hostile.path.read_text()


def test_redaction_keeps_only_the_requests_sha256(ws: Workspace) -> None:
    ws.settings_file.write_text("receipts: {redact: true}\n")
    ws = Workspace(ws.root)
    receipt = write_receipt(ws, "route", {"decision": "route"}, request="secret plan")
    text = receipt.path.read_text()
    assert "secret" not in text
    assert f"\nrequest_sha256: {hashlib.sha256(b'secret plan').hexdigest()}\n" in text


def gone(text: str) -> str:
    return f"[redacted: {len(text)} characters]"


def test_redaction_hides_output_and_free_text_holding_a_word_of_the_request() -> None:
    # Words of four characters or more, lowercased, a path's parts, dots stripped off a
    # word's ends: lint, upgrade, xenial, ab.cd, src/quixotic/module.py, quixotic, module.
    request = "Fix lint in src/Quixotic/module.py, upgrade Xenial; see ab.cd."
    fields = {
        "decision": "route",
        "agent": "quixotic-fixer",
        "message": "Quixotic parser fixed",
        "summary": "fix: all green",
        "reason": "lint failed",
        "detail": "see ab.cd now",
        "named": "a venial slip",
        "paths": ["src/quixotic/util.py", "README.md", ""],
        "output": "",
        "tail": ["line one", "line two"],
        "exit": 1,
        "checks": [
            {
                "name": "upgrade done",
                "command": "pytest -k quixotic",
                "output": "ok",
                "passed": True,
            }
        ],
        "evidence": {"line": "quixotic at line 3", "note": "nothing here"},
    }
    assert redact(fields, request) == {
        "decision": "route",
        "agent": "quixotic-fixer",  # not free text: an agent's or a card's name
        "message": gone("Quixotic parser fixed"),
        "summary": "fix: all green",  # fix: shorter than four characters
        "reason": gone("lint failed"),
        "detail": gone("see ab.cd now"),
        "named": "a venial slip",
        "paths": [gone("src/quixotic/util.py"), "README.md", ""],
        "output": "",
        "tail": [gone("line one"), gone("line two")],
        "exit": 1,
        "checks": [
            {
                "name": gone("upgrade done"),
                "command": "pytest -k quixotic",
                "output": gone("ok"),
                "passed": True,
            }
        ],
        "evidence": {"line": gone("quixotic at line 3"), "note": "nothing here"},
    }
    # Without a request (a receipt of no run) only output is redacted.
    assert redact({"output": "abc", "message": "xxxx marks"}, None) == {
        "output": gone("abc"),
        "message": "xxxx marks",
    }


def test_fields_are_redacted_against_the_request_or_the_runs_request_it_is_about(
    ws: Workspace,
) -> None:
    ws.settings_file.write_text("receipts: {redact: true}\n")
    ws = Workspace(ws.root)
    fields = {"message": "quixotic parser fixed", "output": "ok"}
    kept = {"message": "quixotic parser fixed", "output": gone("ok")}
    hidden = {"message": gone("quixotic parser fixed"), "output": gone("ok")}

    def written(**kw: str) -> dict[str, object]:
        return load_receipt(ws, write_receipt(ws, "note", fields, **kw).id).fields

    assert written(request="fix quixotic") == hidden
    assert written(request="fix quixotic", about="other words") == hidden
    assert written(about="fix quixotic") == hidden
    assert written(request="other words", about="fix quixotic") == kept
    assert written() == kept


def test_a_receipts_kind_must_be_a_lowercase_word(ws: Workspace) -> None:
    with pytest.raises(BadInput) as refused:
        write_receipt(ws, "Gate check", {})
    assert (str(refused.value), refused.value.field) == (
        "kind: 'Gate check' must be lowercase letters, digits and '-'",
        "kind",
    )
    assert list_receipts(ws) == []


def test_a_receipt_records_the_utc_time_it_was_written_to_the_microsecond(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    def now() -> str:
        ns = time.time_ns()
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ns // 10**9)) + (
            f".{ns // 1000 % 10**6:06d}Z"
        )

    monkeypatch.setenv("TZ", "XYZ-14")  # local time 14 hours ahead of UTC
    time.tzset()
    try:
        before = now()
        written = write_receipt(ws, "note", {})
        after = now()
    finally:
        monkeypatch.undo()
        time.tzset()
    assert before <= written.time <= after
    assert load_receipt(ws, written.id).time == written.time


@pytest.mark.parametrize(
    "fields",
    [{"sha256": "x"}, {"previous": "x"}, {"receipt": 1}, {"bad key": 1}],
    ids=["sha256", "previous", "receipt", "space"],
)
def test_reserved_or_odd_field_names_are_refused(ws: Workspace, fields: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="reserved or not a plain name"):
        write_receipt(ws, "gate", fields)
    assert list_receipts(ws) == []


def test_ids_sort_in_chain_order_and_each_links_to_the_one_before(ws: Workspace) -> None:
    ids = chain(ws, 12)
    assert ids == [receipt_id(i) for i in range(1, 13)] == sorted(ids)
    for before, after in itertools.pairwise(ids):
        before_sha = load_receipt(ws, before).sha256
        assert f"\nprevious: {before} {before_sha}\n" in read_receipt(ws, after)
    assert verify_chain(ws) == []


def test_list_filters_by_run_and_show_accepts_short_ids(ws: Workspace) -> None:
    chain(ws, 7)
    assert [r.id for r in list_receipts(ws, run_id="run-1")] == ["00000001", "00000004", "00000007"]
    assert read_receipt(ws, "4") == read_receipt(ws, "00000004") == read_receipt(ws, "00000004.txt")
    with pytest.raises(NotFound, match="no receipt 00000099"):
        read_receipt(ws, "99")


def test_receipts_cli_list_show_verify(cli: CliRunner, ws: Workspace) -> None:
    chain(ws, 3)
    listing = json.loads(cli("receipts", "list", "--json").stdout)["receipts"]
    assert [(r["id"], r["kind"], r["run_id"]) for r in listing] == [
        ("00000001", "gate", "run-1"),
        ("00000002", "gate", None),
        ("00000003", "gate", None),
    ]
    assert (
        json.loads(cli("receipts", "list", "--last", "1", "--json").stdout)["receipts"][0]["id"]
        == "00000003"
    )
    shown = cli("receipts", "show", "2")
    assert shown.returncode == 0 and shown.stdout == read_receipt(ws, "2")
    missing = cli("receipts", "show", "42")
    assert (missing.returncode, missing.stdout) == (2, "")
    assert missing.stderr == f"error: id: no receipt 00000042 in {ws.receipts_dir}\n"
    ok = cli("receipts", "verify")
    assert (ok.returncode, ok.stdout) == (0, "receipts verified: 3 receipts, chain intact\n")


def test_receipts_list_json_names_each_receipts_id_kind_time_run_and_file(
    cli: CliRunner, ws: Workspace
) -> None:
    written = [
        write_receipt(ws, "gate", {}, run_id="run-X"),
        write_receipt(ws, "route", {}),
        write_receipt(ws, "run", {}, run_id="run-X"),
    ]

    def listed(*args: str) -> Any:
        return json.loads(cli("receipts", "list", *args, "--json").stdout)

    assert listed() == {
        "receipts": [
            {"id": r.id, "kind": r.kind, "time": r.time, "run_id": r.run_id, "path": str(r.path)}
            for r in written
        ]
    }
    assert [r["id"] for r in listed("--run", "run-X")["receipts"]] == ["00000001", "00000003"]


def test_receipts_in_the_state_table_are_listed_shown_and_parsed_as_files_are(
    cli: CliRunner, ws: Workspace, pg_server: Any, pg_url: str
) -> None:
    written = [
        write_receipt(ws, "gate", {"n": 1}, run_id="run-1", request="make it pass"),
        write_receipt(ws, "route", {"n": 2}),
        write_receipt(ws, "run", {"n": 3}, run_id="run-1"),
    ]
    text = read_receipt(ws, "2")

    assert [r.as_dict() for r in list_receipts(ws)] == [
        {"id": r.id, "kind": r.kind, "time": r.time, "run_id": r.run_id, "path": None}
        for r in written
    ]
    assert [r.id for r in list_receipts(ws, run_id="run-1")] == ["00000001", "00000003"]
    assert text.startswith(f"receipt: 00000002\nkind: route\ntime: {written[1].time}\nn: 2\n")
    assert load_receipt(ws, "00000001").as_dict() == {
        **parse_receipt(read_receipt(ws, "1")).as_dict(),
        "id": "00000001",
        "path": None,
        "kind": "gate",
        "run": "run-1",
        "request": "make it pass",
        "fields": {"n": 1},
    }
    # A byte that is not UTF-8 put in the table is read as U+FFFD, not a crash.
    pg_server.sql(
        "UPDATE receipts SET text = text || '\\xff'::bytea WHERE seq = 2", database="agentos_shared"
    )
    assert read_receipt(ws, "2") == text + "\ufffd"


def test_files_in_the_receipts_folder_not_named_like_a_receipt_are_not_listed(
    ws: Workspace,
) -> None:
    chain(ws, 2)
    for name in ("1.txt", "000000003.txt", "00000004.txt.tmp", "notes.txt"):
        (ws.receipts_dir / name).write_text("receipt: 00000009\nkind: odd\ntime: t\n")
    assert [r.id for r in list_receipts(ws)] == ["00000001", "00000002"]
    shutil.rmtree(ws.receipts_dir)
    assert list_receipts(ws) == []


@pytest.mark.parametrize(
    ("edit", "header"),
    [
        ((b"kind: gate\n", b"kind: gate \n"), ("gate ", "<time>", "run-X")),
        ((b"kind: gate\n", b"kind: gate: edited\n"), ("gate: edited", "<time>", "run-X")),
        ((b"kind: gate\n", b"kind: g\xffte\n"), ("g\ufffdte", "<time>", "run-X")),
        ((b"run: run-X\n", b"run: run-X\nkind: other\n"), ("gate", "<time>", "run-X")),
        ((b"run: run-X\n", b"note: \xff\nrun: run-Y\n"), ("gate", "<time>", None)),
        ((b"kind: gate\n", b""), ("?", "<time>", "run-X")),
        ((b"\ntime: ", b"\nwhen: "), ("gate", "?", None)),
        ((b"receipt: 00000001\nkind: gate\ntime: ", b"time: "), ("?", "<time>", "run-X")),
    ],
    ids=[
        "trailing-space",
        "colon-in-value",
        "not-utf-8",
        "kind-twice",
        "run-after-a-field",
        "no-kind",
        "no-time",
        "no-kind-no-time",
    ],
)
def test_receipts_list_reads_a_header_edited_by_hand_as_show_does(
    ws: Workspace, edit: tuple[bytes, bytes], header: tuple[str, str, str | None]
) -> None:
    receipt = write_receipt(ws, "gate", {"note": "ok"}, run_id="run-X")
    receipt.path.write_bytes(receipt.path.read_bytes().replace(*edit, 1))
    (listed,) = list_receipts(ws)
    parsed = load_receipt(ws, "1")
    expected = tuple(receipt.time if v == "<time>" else v for v in header)
    assert (listed.kind, listed.time, listed.run_id) == expected
    assert (parsed.kind, parsed.time, parsed.run_id) == expected
    assert parsed.id == "00000001"  # the file's name where its receipt line is gone


@pytest.mark.parametrize("rid", ["0", "00000000.txt", "abc", "", "4x"])
def test_an_id_that_is_not_a_receipts_is_named_so_in_one_line(
    cli: CliRunner, ws: Workspace, rid: str
) -> None:
    chain(ws, 1)
    shown = cli("receipts", "show", rid)
    assert (shown.returncode, shown.stdout) == (2, "")
    assert shown.stderr == f"error: id: {rid!r} is not a receipt id (like 00000042)\n"


def test_receipts_are_read_as_utf_8_whatever_the_locale(ws: Workspace) -> None:
    write_receipt(ws, "note", {"said": "déjà vu"}, request="café ☕")
    before = locale.setlocale(locale.LC_CTYPE)
    locale.setlocale(locale.LC_CTYPE, "C")  # ASCII: é would read as two U+FFFD
    try:
        text, parsed = read_receipt(ws, "1"), load_receipt(ws, "1")
    finally:
        locale.setlocale(locale.LC_CTYPE, before)
    assert "\nrequest: café ☕\nsaid: déjà vu\n" in text
    assert (parsed.request, parsed.fields, parsed.text) == ("café ☕", {"said": "déjà vu"}, text)


def test_a_receipt_file_with_bytes_that_are_not_utf_8_is_read_with_u_fffd(
    ws: Workspace,
) -> None:
    receipt = write_receipt(ws, "note", {"said": "ok"})
    receipt.path.write_bytes(receipt.path.read_bytes().replace(b"said: ok", b"said: o\xff"))
    text = read_receipt(ws, "1")
    assert "\nsaid: o\ufffd\n" in text
    assert load_receipt(ws, "1").fields == {"said": "o\ufffd"}


# --- crashes and a missing head -----------------------------------------------------------


def test_a_writer_that_crashed_before_moving_the_head_does_not_fork_the_chain(
    ws: Workspace,
) -> None:
    chain(ws, 3)
    stale = (ws.receipts_dir / HEAD_FILE).read_text()
    chain(ws, 1)
    (ws.receipts_dir / HEAD_FILE).write_text(stale)  # as if the 4th writer died after linking
    new = write_receipt(ws, "gate", {"after": "crash"})
    assert new.id == "00000005"
    assert verify_chain(ws) == []


def test_a_lost_head_is_rebuilt_from_the_files_by_the_next_writer(ws: Workspace) -> None:
    chain(ws, 3)
    (ws.receipts_dir / HEAD_FILE).unlink()
    assert verify_chain(ws) == [
        "00000003: the chain's head (.head) is missing or unreadable, so the newest "
        "receipts cannot be checked"
    ]
    assert write_receipt(ws, "gate", {}).id == "00000004"
    assert verify_chain(ws) == []


@pytest.mark.parametrize(
    "spoil",
    [
        lambda record: record.replace(record.split()[1], b"\xff"),
        lambda record: record.replace(b"00000003", b"three"),
    ],
    ids=["not-ascii", "an-id-that-is-not-digits"],
)
def test_a_head_spoilt_is_unreadable_and_rebuilt_by_the_next_writer(
    ws: Workspace, spoil: Callable[[bytes], bytes]
) -> None:
    chain(ws, 3)
    head = ws.receipts_dir / HEAD_FILE
    head.write_bytes(spoil(head.read_bytes()))
    assert verify_chain(ws) == [
        "00000003: the chain's head (.head) is missing or unreadable, so the newest "
        "receipts cannot be checked"
    ]
    assert write_receipt(ws, "gate", {}).id == "00000004"
    assert verify_chain(ws) == []


def test_only_the_first_256_bytes_of_the_head_are_read(ws: Workspace) -> None:
    """AgentOS writes 74 (an id, a sha256); what lies beyond 256 bytes is never read."""
    chain(ws, 3)
    head = ws.receipts_dir / HEAD_FILE
    record = head.read_bytes().rstrip(b"\n")
    head.write_bytes(record.ljust(256) + b"junk\n")
    assert verify_chain(ws) == []


@pytest.mark.parametrize("sign", [True, False], ids=["signed", "signing-off"])
def test_the_receipt_after_a_deleted_newest_one_takes_the_next_id_not_its(
    ws: Workspace, sign: bool
) -> None:
    """The head (and the anchor, when receipts are signed), not the files, says which
    receipt was written last."""
    ws.settings_file.write_text(
        f"run: {{guardian: false}}\nreceipts: {{sign: {str(sign).lower()}}}\n"
    )
    ws = Workspace(ws.root)
    chain(ws, 3)
    _r(ws, 3).unlink()
    assert write_receipt(ws, "gate", {}).id == "00000004"
    assert verify_chain(ws) == ["00000003: missing (deleted or renamed)"]


def test_a_lost_head_is_rebuilt_from_the_newest_file_not_the_first_gap(ws: Workspace) -> None:
    """Signing off, so that no anchor says where the chain ends either."""
    ws.settings_file.write_text("run: {guardian: false}\nreceipts: {sign: false}\n")
    ws = Workspace(ws.root)
    chain(ws, 3)
    _r(ws, 2).unlink()
    (ws.receipts_dir / HEAD_FILE).unlink()
    assert write_receipt(ws, "gate", {}).id == "00000004"
    assert verify_chain(ws) == ["00000002: missing (deleted or renamed)"]


def test_receipts_are_written_on_a_file_system_without_hard_links(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """There a hard link fails (EPERM, as on FAT): each receipt is renamed into place under
    the chain's lock, and the first signed write still makes the key."""

    def no_hard_links(*_args: object, **_kwargs: object) -> None:
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_hard_links)
    assert chain(ws, 3) == ["00000001", "00000002", "00000003"]
    assert verify_chain(ws) == []
    assert sorted(p.name for p in ws.receipts_dir.iterdir()) == [
        HEAD_FILE,
        "00000001.txt",
        "00000002.txt",
        "00000003.txt",
    ]
    assert (ws.state_dir / KEY).stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize(
    "where", ["a file without a name", "no O_TMPFILE", "no /proc", "a /proc that lies"]
)
def test_receipts_are_written_whether_a_file_can_be_made_without_a_name_or_not(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """A receipt is written as a file without a name (O_TMPFILE) and linked through
    /proc/self/fd; where the file system has no such file, or /proc is not mounted, it is
    written to a temporary name and linked from there. Either way the same chain, and no
    temporary file left."""
    real_open, real_link = os.open, os.link
    named: list[str] = []

    def open_(path: str, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & os.O_TMPFILE == os.O_TMPFILE and where == "no O_TMPFILE":
            raise OSError(errno.EOPNOTSUPP, "Operation not supported")
        if flags & os.O_CREAT:
            named.append(os.fspath(path))
        return real_open(path, flags, *args, **kwargs)

    first = ws.receipts_dir / "00000001.txt"

    def link(src: str, *args: Any, **kwargs: Any) -> None:
        if str(src).startswith("/proc/") and where == "no /proc":
            raise OSError(errno.ENOENT, "No such file or directory")
        if str(src).startswith("/proc/") and where == "a /proc that lies" and first.exists():
            src = str(first)  # what a /proc of someone else's could link instead
        real_link(src, *args, **kwargs)

    monkeypatch.setattr(os, "open", open_)
    monkeypatch.setattr(os, "link", link)
    assert chain(ws, 3) == ["00000001", "00000002", "00000003"]
    assert verify_chain(ws) == []
    assert sorted(p.name for p in ws.receipts_dir.iterdir()) == [
        HEAD_FILE,
        "00000001.txt",
        "00000002.txt",
        "00000003.txt",
    ]
    temporary = [n for n in named if re.fullmatch(r"\.\d{8}\.\d+\.[0-9a-f]{8}\.tmp", n)]
    expected = {"a file without a name": 0, "a /proc that lies": 2}.get(where, 3)
    assert len(temporary) == expected


def test_a_lost_head_and_a_lost_key_are_both_named_the_head_first(ws: Workspace) -> None:
    chain(ws, 3)
    (ws.receipts_dir / HEAD_FILE).unlink()
    (ws.state_dir / "receipts.key").unlink()
    assert verify_chain(ws) == [
        "00000003: the chain's head (.head) is missing or unreadable, so the newest "
        "receipts cannot be checked",
        _key_missing(),
    ]


def test_a_head_naming_a_receipt_beyond_the_newest_is_named_among_the_workspaces_problems(
    ws: Workspace,
) -> None:
    chain(ws, 3)
    (ws.receipts_dir / HEAD_FILE).write_text(f"00000009 {'a' * 64}\n")
    _edit(_r(ws, 1))
    (ws.state_dir / "receipts.key").unlink()
    assert verify_chain(ws) == [
        _key_missing(),
        "00000009: the chain's head (.head) names a receipt beyond the newest there is (00000003)",
        "00000001: changed after it was written (content does not match its sha256)",
    ]
    # With no receipt left at all, the head names one beyond none.
    for seq in (1, 2, 3):
        _r(ws, seq).unlink()
    assert verify_receipts(ws, hashes_only=True).problems == (
        "00000009: the chain's head (.head) names a receipt beyond the newest there is (none)",
    )


def _forge_the_anchor(ws: Workspace) -> None:
    """Change the last digit of the anchor's signature."""
    path = ws.state_dir / "receipts.anchor"
    text = path.read_text()
    path.write_text(text[:-2] + ("1" if text[-2] == "0" else "0") + "\n")


@pytest.mark.parametrize("anchor", ["lost", "forged"])
def test_the_anchors_problem_comes_before_a_head_naming_a_receipt_beyond_the_newest(
    ws: Workspace, anchor: str
) -> None:
    chain(ws, 3)
    (ws.receipts_dir / HEAD_FILE).write_text(f"00000009 {'a' * 64}\n")
    path = ws.state_dir / "receipts.anchor"
    if anchor == "lost":
        path.unlink()
    else:
        _forge_the_anchor(ws)
    problem = {
        "lost": "AgentOS's record of the newest receipt (.agentos/receipts.anchor) is missing: "
        "receipts removed from the chain's end cannot be told",
        "forged": "AgentOS's record of the newest receipt (.agentos/receipts.anchor) is forged "
        "(its signature does not match the key): receipts removed from the chain's end cannot "
        "be told",
    }[anchor]
    assert verify_chain(ws) == [
        problem,
        "00000009: the chain's head (.head) names a receipt beyond the newest there is (00000003)",
    ]


def test_a_receipts_folder_removed_whole_is_named_with_the_receipts_agentos_wrote(
    ws: Workspace,
) -> None:
    chain(ws, 3)
    shutil.rmtree(ws.receipts_dir)
    assert verify_receipts(ws).as_dict() == {
        "ok": False,
        "receipts": 0,
        "macs_checked": True,
        "problems": [f"{ws.receipts_dir}: missing, but AgentOS wrote 3 receipts there"],
        "notes": [],
    }
    # Without the key, the anchor cannot be trusted: nothing says receipts were there.
    assert verify_receipts(ws, hashes_only=True).as_dict() == {
        "ok": True,
        "receipts": 0,
        "macs_checked": False,
        "problems": [],
        "notes": [HASHES_ONLY.removeprefix("note: ").rstrip("\n")],
    }
    _forge_the_anchor(ws)  # a forged anchor says nothing
    assert verify_receipts(ws).problems == ()


def test_verify_reads_the_chain_while_another_reader_holds_it(ws: Workspace) -> None:
    """Readers share the chain's lock (writers take it alone): a second verify never waits
    for the first."""
    chain(ws, 2)
    done: list[ChainReport] = []
    with (ws.receipts_dir / HEAD_FILE).open("rb") as head:
        fcntl.flock(head, fcntl.LOCK_SH)  # as a verify in progress holds it
        reader = threading.Thread(target=lambda: done.append(verify_receipts(ws)), daemon=True)
        reader.start()
        reader.join(timeout=30)
    assert [report.ok for report in done] == [True]


def test_a_writer_waits_while_a_verify_holds_the_chain(ws: Workspace) -> None:
    """Writers take the chain's lock alone."""
    chain(ws, 1)
    written: list[str] = []
    with (ws.receipts_dir / HEAD_FILE).open("rb") as head:
        fcntl.flock(head, fcntl.LOCK_SH)  # as a verify in progress holds it
        writer = threading.Thread(
            target=lambda: written.append(write_receipt(ws, "gate", {}).id), daemon=True
        )
        writer.start()
        writer.join(timeout=1)  # what must not happen: a bounded wait
        assert written == []
    writer.join(timeout=30)
    assert written == ["00000002"]


def test_a_head_that_cannot_be_opened_leaves_no_descriptor_open(ws: Workspace) -> None:
    chain(ws, 1)
    head = ws.receipts_dir / HEAD_FILE
    head.unlink()
    head.symlink_to(HEAD_FILE)  # a link to itself: ELOOP
    before = sorted(os.listdir("/proc/self/fd"))
    with pytest.raises(OSError) as err:
        write_receipt(ws, "gate", {})
    assert err.value.errno == errno.ELOOP
    assert sorted(os.listdir("/proc/self/fd")) == before


def test_the_first_receipt_must_link_to_the_start(ws: Workspace) -> None:
    chain(ws, 3)
    text = _r(ws, 1).read_text()
    mac = text.splitlines()[-1]
    content = re.sub(r"\nprevious: none\n", "\nprevious: 00000000 forged\n", text)
    content = content[: content.index("sha256: ")]
    digest = hashlib.sha256(content.encode()).hexdigest()
    _r(ws, 1).write_text(content + f"sha256: {digest}\n{mac}\n")
    assert verify_chain(ws) == [
        "00000001: does not follow the start: one of them was changed, or receipts were reordered",
        "00000001: its signature does not match the workspace's key: forged, or rewritten "
        "with recomputed hashes",
        "00000002: does not follow 00000001: one of them was changed, or receipts were reordered",
    ]


def test_hashes_only_reads_no_key_even_where_there_is_one(ws: Workspace) -> None:
    chain(ws, 2)
    _edit_and_rehash_keeping_the_mac(_r(ws, 1))  # a bad mac, which only the key could tell
    _edit_and_rehash_keeping_the_mac(_r(ws, 2))
    (ws.receipts_dir / HEAD_FILE).write_text(f"00000002 {load_receipt(ws, '2').sha256}\n")
    report = verify_receipts(ws, hashes_only=True)
    assert (report.macs_checked, report.notes) == (
        False,
        (HASHES_ONLY.removeprefix("note: ").rstrip("\n"),),
    )
    assert report.problems == (
        "00000002: does not follow 00000001: one of them was changed, or receipts were reordered",
    )


# --- tampering ----------------------------------------------------------------------------


def _edit(path: Path) -> None:
    path.write_text(path.read_text().replace("check ", "CHECK "))


def _edit_and_rehash(path: Path) -> None:
    """Edit a receipt and recompute its sha256; its signature cannot be made without the key,
    so it is either dropped or kept."""
    text = path.read_text().replace("check ", "CHECK ")
    body = text[: text.rindex("sha256: ")]
    path.write_text(body + f"sha256: {hashlib.sha256(body.encode()).hexdigest()}\n")


def _edit_and_rehash_keeping_the_mac(path: Path) -> None:
    mac = path.read_text().splitlines()[-1]
    _edit_and_rehash(path)
    path.write_text(path.read_text() + mac + "\n")


def _drop_the_previous_line_rehash_and_keep_the_mac(path: Path) -> None:
    text = path.read_text()
    mac = text.splitlines()[-1]
    body = re.sub(r"\nprevious: [^\n]*", "", text[: text.rindex("sha256: ")])
    path.write_text(body + f"sha256: {hashlib.sha256(body.encode()).hexdigest()}\n{mac}\n")


def _rewrite(path: Path, old: str, new: str) -> None:
    """Replace ``old`` by ``new`` in a receipt, recompute its sha256 and keep its mac."""
    text = path.read_text()
    mac = text.splitlines()[-1]
    body = text[: text.rindex("sha256: ")].replace(old, new)
    path.write_text(body + f"sha256: {hashlib.sha256(body.encode()).hexdigest()}\n{mac}\n")


def _rewrite_bytes(path: Path, old: bytes, new: bytes) -> None:
    """:func:`_rewrite` of bytes that need not be UTF-8."""
    data = path.read_bytes()
    mac = data.splitlines()[-1]
    body = data[: data.rindex(b"sha256: ")].replace(old, new)
    path.write_bytes(body + f"sha256: {hashlib.sha256(body).hexdigest()}\n".encode() + mac + b"\n")


def _swap(a: Path, b: Path) -> None:
    tmp = a.with_suffix(".swap")
    a.rename(tmp)
    b.rename(a)
    tmp.rename(b)


def _edit_and_delete(edited: Path, deleted: Path) -> None:
    _edit(edited)
    deleted.unlink()


def _r(ws: Workspace, n: int) -> Path:
    return ws.receipts_dir / f"{receipt_id(n)}.txt"


_STRIPPED = (
    "{}: carries no signature, though receipts here are signed from 00000001 on: its mac was "
    "stripped, or it was written outside AgentOS"
)

TAMPER: list[tuple[str, Callable[[Workspace], object], list[str]]] = [
    (
        "edit-middle",
        lambda ws: _edit(_r(ws, 5)),
        ["00000005: changed after it was written (content does not match its sha256)"],
    ),
    (
        "edit-first",
        lambda ws: _edit(_r(ws, 1)),
        ["00000001: changed after it was written (content does not match its sha256)"],
    ),
    (
        "edit-last",
        lambda ws: _edit(_r(ws, 10)),
        ["00000010: changed after it was written (content does not match its sha256)"],
    ),
    (
        "edit-and-rehash-middle",
        lambda ws: _edit_and_rehash(_r(ws, 5)),
        [
            _STRIPPED.format("00000005"),
            "00000006: does not follow 00000005: one of them was changed, or receipts were "
            "reordered",
        ],
    ),
    (
        "edit-and-rehash-middle-keeping-its-mac",
        lambda ws: _edit_and_rehash_keeping_the_mac(_r(ws, 5)),
        [
            "00000005: its signature does not match the workspace's key: forged, or rewritten "
            "with recomputed hashes",
            "00000006: does not follow 00000005: one of them was changed, or receipts were "
            "reordered",
        ],
    ),
    (
        "edit-and-rehash-last",
        lambda ws: _edit_and_rehash(_r(ws, 10)),
        [
            _STRIPPED.format("00000010"),
            "00000010: changed after it was written (the chain's head records another sha256)",
            "00000010: changed after it was written (AgentOS's record of the newest receipt "
            "holds another sha256)",
        ],
    ),
    (
        "truncate",
        lambda ws: _r(ws, 3).write_text("receipt: 00000003\n"),
        ["00000003: changed after it was written (its closing sha256 line is gone)"],
    ),
    ("delete-middle", lambda ws: _r(ws, 5).unlink(), ["00000005: missing (deleted or renamed)"]),
    ("delete-first", lambda ws: _r(ws, 1).unlink(), ["00000001: missing (deleted or renamed)"]),
    (
        "delete-last",
        lambda ws: _r(ws, 10).unlink(),
        ["00000010: missing: removed from the chain's end (AgentOS last wrote 00000010)"],
    ),
    (
        "swap-two",
        lambda ws: _swap(_r(ws, 4), _r(ws, 5)),
        [
            "00000004: the file holds receipt '00000005': receipts were moved or reordered",
            "00000004: does not follow 00000003: one of them was changed, or receipts were "
            "reordered",
            "00000005: the file holds receipt '00000004': receipts were moved or reordered",
            "00000005: does not follow 00000004: one of them was changed, or receipts were "
            "reordered",
            "00000006: does not follow 00000005: one of them was changed, or receipts were "
            "reordered",
        ],
    ),
    (
        "truncate-last",
        lambda ws: _r(ws, 10).write_text("receipt: 00000010\n"),
        [
            "00000010: changed after it was written (its closing sha256 line is gone)",
            "00000010: changed after it was written (the chain's head records another sha256)",
            "00000010: changed after it was written (AgentOS's record of the newest receipt "
            "holds another sha256)",
        ],
    ),
    (
        "edit-middle-and-delete-last",
        lambda ws: _edit_and_delete(_r(ws, 5), _r(ws, 10)),
        [
            "00000005: changed after it was written (content does not match its sha256)",
            "00000010: missing: removed from the chain's end (AgentOS last wrote 00000010)",
        ],
    ),
    (
        "drop-the-previous-line",
        lambda ws: _r(ws, 2).write_text(re.sub(r"\nprevious: [^\n]*", "", _r(ws, 2).read_text())),
        [
            "00000002: changed after it was written (content does not match its sha256)",
            "00000002: changed after it was written (its previous line is gone)",
        ],
    ),
    (
        # Its mac covers the sha256, so a rehashed receipt keeping it is named twice.
        "a-signed-from-line-naming-no-receipt",
        lambda ws: _rewrite(_r(ws, 2), "signed_from: 00000001\n", "signed_from: soon\n"),
        [
            "00000002: its signed_from line ('soon') names no receipt: written outside AgentOS",
            "00000002: its signature does not match the workspace's key: forged, or rewritten "
            "with recomputed hashes",
            "00000003: does not follow 00000002: one of them was changed, or receipts were "
            "reordered",
        ],
    ),
    (
        "a-signed-from-line-naming-receipt-zero",
        lambda ws: _rewrite(_r(ws, 2), "signed_from: 00000001\n", "signed_from: 00000000\n"),
        [
            "00000002: its signed_from line ('00000000') names no receipt: written outside AgentOS",
            "00000002: its signature does not match the workspace's key: forged, or rewritten "
            "with recomputed hashes",
            "00000003: does not follow 00000002: one of them was changed, or receipts were "
            "reordered",
        ],
    ),
    (
        "a-signed-from-line-naming-a-receipt-without-its-zeros",
        lambda ws: _rewrite(_r(ws, 2), "signed_from: 00000001\n", "signed_from: 1\n"),
        [
            "00000002: its signed_from line ('1') names no receipt: written outside AgentOS",
            "00000002: its signature does not match the workspace's key: forged, or rewritten "
            "with recomputed hashes",
            "00000003: does not follow 00000002: one of them was changed, or receipts were "
            "reordered",
        ],
    ),
    (
        "a-signed-from-line-that-is-not-utf-8",
        lambda ws: _rewrite_bytes(_r(ws, 2), b"signed_from: 00000001\n", b"signed_from: \xff\n"),
        [
            "00000002: its signed_from line ('\ufffd') names no receipt: written outside AgentOS",
            "00000002: its signature does not match the workspace's key: forged, or rewritten "
            "with recomputed hashes",
            "00000003: does not follow 00000002: one of them was changed, or receipts were "
            "reordered",
        ],
    ),
    (
        # Its sha256 line alone, naming the sha256 of nothing, which is right: the content
        # above it is empty, not changed.
        "emptied-but-for-a-sha256-line",
        lambda ws: _r(ws, 5).write_text(f"sha256: {hashlib.sha256(b'').hexdigest()}\n"),
        [
            "00000005: the file holds receipt '': receipts were moved or reordered",
            "00000005: changed after it was written (its previous line is gone)",
            "00000006: does not follow 00000005: one of them was changed, or receipts were "
            "reordered",
        ],
    ),
    (
        # Not intact: judged for that alone, not for the mac its new sha256 cannot match.
        "drop-the-previous-line-rehashed-keeping-the-mac",
        lambda ws: _drop_the_previous_line_rehash_and_keep_the_mac(_r(ws, 2)),
        [
            "00000002: changed after it was written (its previous line is gone)",
            "00000003: does not follow 00000002: one of them was changed, or receipts were "
            "reordered",
        ],
    ),
    (
        "edit-and-strip-the-mac",
        lambda ws: _r(ws, 5).write_text(
            re.sub(r"mac: \w+\n", "", _r(ws, 5).read_text()).replace("check ", "CHECK ")
        ),
        ["00000005: changed after it was written (content does not match its sha256)"],
    ),
    (
        "a-first-line-that-is-not-utf-8",
        lambda ws: _r(ws, 4).write_bytes(
            _r(ws, 4).read_bytes().replace(b"receipt: 00000004", b"receipt: \xff0000004")
        ),
        [
            "00000004: changed after it was written (content does not match its sha256)",
            "00000004: the file holds receipt '\ufffd0000004': receipts were moved or reordered",
        ],
    ),
    (
        "move-to-the-end",
        lambda ws: _r(ws, 3).rename(_r(ws, 11)),
        [
            "00000003: missing (deleted or renamed)",
            "00000011: the file holds receipt '00000003': receipts were moved or reordered",
            "00000011: does not follow 00000010: one of them was changed, or receipts were "
            "reordered",
        ],
    ),
]


@pytest.mark.parametrize(
    ("tamper", "expected"), [t[1:] for t in TAMPER], ids=[t[0] for t in TAMPER]
)
def test_verify_names_each_tampered_receipt(
    ws: Workspace, tamper: Callable[[Workspace], None], expected: list[str]
) -> None:
    chain(ws, 10)
    assert verify_chain(ws) == []
    tamper(ws)
    assert verify_chain(ws) == expected


# --- forgeries: the chain is keyed ----------------------------------------------------------


def _forge_next(ws: Workspace, seq: int, previous: str, body: str = "decision: route\n") -> Path:
    """A receipt made as AgentOS makes one (header, link, sha256), by someone without the key."""
    rid = receipt_id(seq)
    content = (
        f"receipt: {rid}\nkind: route\ntime: 2026-11-23T00:00:00.000000Z\n{body}"
        f"previous: {previous}\n"
    )
    path = _r(ws, seq)
    path.write_text(content + f"sha256: {hashlib.sha256(content.encode()).hexdigest()}\n")
    return path


def test_a_well_chained_receipt_appended_without_the_key_is_named(ws: Workspace) -> None:
    chain(ws, 5)
    last = load_receipt(ws, "5")
    _forge_next(ws, 6, f"00000005 {last.sha256}")
    assert verify_chain(ws) == [_STRIPPED.format("00000006")]
    # Even with the head moved to it, and a mac line copied from another receipt.
    forged = load_receipt(ws, "6")
    (ws.receipts_dir / HEAD_FILE).write_text(f"00000006 {forged.sha256}\n")
    _r(ws, 6).write_text(forged.text + f"mac: {last.mac}\n")
    assert verify_chain(ws) == [
        "00000006: its signature does not match the workspace's key: forged, or rewritten "
        "with recomputed hashes"
    ]


def test_receipts_removed_from_the_end_with_the_head_rewritten_are_named(ws: Workspace) -> None:
    chain(ws, 8)
    for seq in (7, 8):
        _r(ws, seq).unlink()
    six = load_receipt(ws, "6")
    (ws.receipts_dir / HEAD_FILE).write_text(f"00000006 {six.sha256}\n")
    assert verify_chain(ws) == [
        "00000007: missing: removed from the chain's end (AgentOS last wrote 00000008)",
        "00000008: missing: removed from the chain's end (AgentOS last wrote 00000008)",
    ]
    # The record outside the receipts folder is signed: rewriting it is seen too.
    anchor = ws.state_dir / "receipts.anchor"
    anchor.write_text(f"00000006 {six.sha256} {'0' * 64}\n")
    assert verify_chain(ws) == [
        "AgentOS's record of the newest receipt (.agentos/receipts.anchor) is forged (its "
        "signature does not match the key): receipts removed from the chain's end cannot be told"
    ]


def test_receipts_cut_from_the_end_stay_named_after_the_next_receipt(ws: Workspace) -> None:
    chain(ws, 5)
    for seq in (4, 5):
        _r(ws, seq).unlink()
    (ws.receipts_dir / HEAD_FILE).unlink()
    assert write_receipt(ws, "gate", {}).id == "00000006"  # never reuses a removed id
    assert verify_chain(ws) == [
        "00000004: missing (deleted or renamed)",
        "00000005: missing (deleted or renamed)",
    ]


@pytest.mark.parametrize("what", ["fifo", "directory", "dangling link"])
def test_a_receipt_that_is_not_a_file_never_hangs_or_crashes(ws: Workspace, what: str) -> None:
    chain(ws, 3)
    path = _r(ws, 4)
    {"fifo": os.mkfifo, "directory": os.mkdir, "dangling link": lambda p: p.symlink_to("nowhere")}[
        what
    ](path)
    assert verify_chain(ws) == [
        "00000004: changed after it was written (its closing sha256 line is gone)"
    ]
    assert write_receipt(ws, "gate", {}).id == "00000005"
    # read as empty: the next receipt links to the sha256 of nothing
    empty = hashlib.sha256(b"").hexdigest()
    assert f"\nprevious: 00000004 {empty}\n" in _r(ws, 5).read_text()


def test_a_receipt_replaced_by_a_link_to_its_own_bytes_is_not_followed(
    ws: Workspace, tmp_path: Path
) -> None:
    """A link is not a receipt, whatever it points at (``O_NOFOLLOW``)."""
    chain(ws, 3)
    copy = tmp_path / "copy.txt"
    copy.write_bytes(_r(ws, 2).read_bytes())
    _r(ws, 2).unlink()
    _r(ws, 2).symlink_to(copy)
    assert verify_chain(ws) == [
        "00000002: changed after it was written (its closing sha256 line is gone)"
    ]


def test_a_tail_rewritten_with_recomputed_hashes_is_named(ws: Workspace) -> None:
    chain(ws, 6)
    previous = f"00000003 {load_receipt(ws, '3').sha256}"
    for seq in (4, 5, 6):
        path = _forge_next(ws, seq, previous, body="decision: forged\n")
        previous = f"{receipt_id(seq)} {load_receipt(ws, str(seq)).sha256}"
    (ws.receipts_dir / HEAD_FILE).write_text(previous + "\n")
    assert path.read_text().count("forged") == 1
    assert verify_chain(ws) == [
        *(_STRIPPED.format(f"0000000{seq}") for seq in (4, 5, 6)),
        "00000006: changed after it was written (AgentOS's record of the newest receipt "
        "holds another sha256)",
    ]


# --- signing: downgrades, a lost key, rekey, another writer, signing off ------------------

KEY = "receipts.key"
ANCHOR = "receipts.anchor"


def _problems(*lines: str) -> str:
    return "".join(f"problem: {line}\n" for line in lines)


def _key_missing() -> str:
    return (
        "the receipts key (.agentos/receipts.key) is missing, but receipts here are signed: "
        "restore it from a backup or `agentos receipts key import FILE` (`agentos receipts "
        "verify --hashes-only` checks all else without it)"
    )


ANCHOR_MISSING = (
    "AgentOS's record of the newest receipt (.agentos/receipts.anchor) is missing: receipts "
    "removed from the chain's end cannot be told"
)
HASHES_ONLY = (
    "note: hashes only: MACs and the anchor were not checked (no key was read); hashes, links "
    "and signed_from lines were\n"
)


def _downgrade(ws: Workspace) -> None:
    """What issue 32 found: strip the mac line from every receipt, edit the bodies, recompute
    the sha256 chain and .head, delete the key and the anchor."""
    previous = "none"
    for info in list_receipts(ws):
        text = info.path.read_text()
        content = text[: text.index("sha256: ")].replace("check ", "FORGED ")
        content = re.sub(r"\nprevious: [^\n]*\n\Z", f"\nprevious: {previous}\n", content)
        digest = hashlib.sha256(content.encode()).hexdigest()
        info.path.write_text(content + f"sha256: {digest}\n")
        previous = f"{info.id} {digest}"
    (ws.receipts_dir / HEAD_FILE).write_text(previous + "\n")
    (ws.state_dir / KEY).unlink()
    (ws.state_dir / ANCHOR).unlink()


def test_a_downgrade_with_macs_stripped_and_key_and_anchor_deleted_fails_verify(
    cli: CliRunner, ws: Workspace
) -> None:
    chain(ws, 3)
    _downgrade(ws)
    assert "FORGED 0" in _r(ws, 1).read_text() and "mac: " not in _r(ws, 3).read_text()
    result = cli("receipts", "verify")
    assert (result.returncode, result.stdout) == (
        1,
        _problems(
            _key_missing(),
            ANCHOR_MISSING,
            *(_STRIPPED.format(receipt_id(seq)) for seq in (1, 2, 3)),
        ),
    )
    # Without the key the verdict is the same: the receipts say that they were signed.
    hashes = cli("receipts", "verify", "--hashes-only")
    assert (hashes.returncode, hashes.stdout) == (
        1,
        _problems(*(_STRIPPED.format(receipt_id(seq)) for seq in (1, 2, 3))) + HASHES_ONLY,
    )
    # And the next write makes no new key that would bless the rewritten receipts.
    write = cli("route", "fix the lint errors")
    assert (write.returncode, write.stdout) == (2, "")
    assert write.stderr == (
        f"error: {ws.state_dir / KEY}: is missing, and this workspace's receipts were signed "
        "(receipt 00000003 is signed): restore it from a backup or `agentos receipts key "
        "import FILE`; `agentos receipts rekey --reason TEXT` starts a new key (none is made "
        "silently)\n"
    )
    assert not (ws.state_dir / KEY).exists() and len(list_receipts(ws)) == 3


@pytest.mark.parametrize("lost", ["key", "anchor"])
def test_a_missing_key_or_anchor_alone_is_named_by_verify(
    cli: CliRunner, ws: Workspace, lost: str
) -> None:
    chain(ws, 2)
    (ws.state_dir / {"key": KEY, "anchor": ANCHOR}[lost]).unlink()
    result = cli("receipts", "verify")
    expected = {"key": _key_missing(), "anchor": ANCHOR_MISSING}[lost]
    assert (result.returncode, result.stdout) == (1, _problems(expected))
    as_json = json.loads(cli("receipts", "verify", "--json").stdout)
    assert as_json == {
        "ok": False,
        "receipts": 2,
        "macs_checked": lost == "anchor",
        "problems": [expected],
        "notes": [],
    }


def test_the_write_after_a_lost_key_is_refused_until_rekey_which_says_so(
    cli: CliRunner, ws: Workspace
) -> None:
    chain(ws, 3)
    (ws.state_dir / KEY).unlink()
    refused = cli("route", "fix the lint errors")
    assert (refused.returncode, refused.stdout) == (2, "")
    assert refused.stderr == (
        f"error: {ws.state_dir / KEY}: is missing, and this workspace's receipts were signed "
        "(.agentos/receipts.anchor exists): restore it from a backup or `agentos receipts key "
        "import FILE`; `agentos receipts rekey --reason TEXT` starts a new key (none is made "
        "silently)\n"
    )
    assert len(list_receipts(ws)) == 3 and not (ws.state_dir / KEY).exists()

    done = cli("receipts", "rekey", "--reason", "the laptop's disk died")
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == (
        "new receipts key: it signs from receipt 00000004 (kind rekey) on\n"
        "receipts 00000001-00000003 were signed with the previous key (lost): they verify by "
        "hash and link only\n"
    )
    rekeyed = load_receipt(ws, "4")
    assert (rekeyed.kind, rekeyed.signed_from, rekeyed.mac is not None) == (
        "rekey",
        "00000004",
        True,
    )
    assert rekeyed.fields == {
        "reason": "the laptop's disk died",
        "previous_key": "lost",
        "previously_signed": "00000001-00000003",
        "problems": [],
    }
    key = ws.state_dir / KEY
    assert key.stat().st_mode & 0o777 == 0o600 and key.read_text().endswith(" 4\n")
    verified = cli("receipts", "verify")
    assert (verified.returncode, verified.stdout) == (
        0,
        "receipts verified: 4 receipts, chain intact\n"
        "note: 00000001-00000003: signed with a previous key, not verifiable (the key was "
        "replaced by rekey 00000004; their hashes and links are checked)\n",
    )
    assert cli("route", "fix the lint errors").returncode == 0
    assert load_receipt(ws, "5").signed_from == "00000004"
    assert cli("receipts", "verify").returncode == 0
    # Those receipts are still pinned by the rekey receipt's signed link.
    _edit(_r(ws, 2))
    assert verify_chain(ws) == [
        "00000002: changed after it was written (content does not match its sha256)"
    ]


@pytest.mark.parametrize(
    ("count", "truncated", "signed"),
    [(1, None, "00000001"), (3, 3, "00000002")],
    ids=["only-the-first-receipt-signed", "the-newest-unreadable"],
)
def test_a_lost_key_and_anchor_are_not_replaced_silently_while_a_signed_receipt_is_left(
    ws: Workspace, count: int, truncated: int | None, signed: str
) -> None:
    """The receipts are looked back through for a signed one down to the first, passing over
    one whose closing lines are gone."""
    chain(ws, count)
    if truncated is not None:
        _r(ws, truncated).write_text(f"receipt: {receipt_id(truncated)}\n")
    (ws.state_dir / KEY).unlink()
    (ws.state_dir / ANCHOR).unlink()
    with pytest.raises(BadInput) as err:
        write_receipt(ws, "gate", {})
    assert f"(receipt {signed} is signed)" in str(err.value)
    assert len(list_receipts(ws)) == count and not (ws.state_dir / KEY).exists()


def test_a_file_named_00000000_is_no_sign_that_receipts_were_signed(ws: Workspace) -> None:
    """Looking back for a signed receipt stops at receipt 1: ids start there."""
    ws.settings_file.write_text("run: {guardian: false}\nreceipts: {sign: false}\n")
    chain(Workspace(ws.root), 2)
    body = "receipt: 00000000\nsigned_from: 00000000\nprevious: none\n"
    sha = hashlib.sha256(body.encode()).hexdigest()
    _r(ws, 0).write_text(f"{body}sha256: {sha}\nmac: {'0' * 64}\n")
    ws.settings_file.write_text("run: {guardian: false}\n")
    ws = Workspace(ws.root)
    assert write_receipt(ws, "gate", {}).id == "00000003"
    assert load_receipt(ws, "3").signed_from == "00000003"


def test_one_receipt_signed_with_a_lost_key_is_named_alone_not_as_a_span(
    cli: CliRunner, ws: Workspace
) -> None:
    chain(ws, 1)
    (ws.state_dir / KEY).unlink()
    assert cli("receipts", "rekey", "--reason", "lost").returncode == 0
    assert verify_receipts(ws).notes == (
        "00000001: signed with a previous key, not verifiable (the key was replaced by rekey "
        "00000002; their hashes and links are checked)",
    )


def test_rekey_replaces_a_valid_key_only_with_force(cli: CliRunner, ws: Workspace) -> None:
    chain(ws, 2)
    before = (ws.state_dir / KEY).read_text()
    refused = cli("receipts", "rekey", "--reason", "it leaked")
    assert (refused.returncode, refused.stderr) == (
        2,
        f"error: {ws.state_dir / KEY}: holds a valid key: `receipts rekey` starts a new one when "
        "it is lost or unreadable; --force replaces it (receipts it signed then verify by hash "
        "and link only)\n",
    )
    assert (ws.state_dir / KEY).read_text() == before
    done = json.loads(cli("receipts", "rekey", "--reason", "it leaked", "--force", "--json").stdout)
    assert done == {
        "receipt": "00000003",
        "signed_from": "00000003",
        "previous_key": "replaced",
        "previously_signed": "00000001-00000002",
        "problems": [],
    }
    assert (ws.state_dir / KEY).read_text() != before
    assert verify_chain(ws) == []


@pytest.mark.parametrize(
    ("before", "how", "signed"),
    [("garbage\n", "unreadable", "00000001"), (None, "lost", "00000001"), ("", "lost", None)],
    ids=["unreadable", "lost-after-one-receipt", "never-signed"],
)
def test_rekey_says_what_became_of_the_key_and_which_receipts_it_signed(
    ws: Workspace, before: str | None, how: str, signed: str | None
) -> None:
    if signed is not None:
        write_receipt(ws, "note", {})
        if before is None:
            (ws.state_dir / KEY).unlink()
        else:
            (ws.state_dir / KEY).write_text(before)
    rid = receipt_id(2 if signed else 1)
    with pytest.raises(BadInput) as refused:
        rekey(ws, " \n")
    done = rekey(ws, " why \n")
    assert (str(refused.value), refused.value.field) == (
        "reason: must say why the key is replaced",
        "reason",
    )
    assert done.as_dict() == {
        "receipt": rid,
        "signed_from": rid,
        "previous_key": how,
        "previously_signed": signed,
        "problems": [],
    }
    written = load_receipt(ws, rid)
    assert (written.kind, written.signed_from, written.fields) == (
        "rekey",
        rid,
        {"reason": "why", "previous_key": how, "previously_signed": signed, "problems": []},
    )
    assert verify_chain(ws) == []


def test_rekey_called_without_force_keeps_a_valid_key(ws: Workspace) -> None:
    chain(ws, 1)
    before = (ws.state_dir / KEY).read_text()
    with pytest.raises(BadInput, match="holds a valid key"):
        rekey(ws, "why")
    assert (ws.state_dir / KEY).read_text() == before
    assert len(list_receipts(ws)) == 1


def test_a_rekey_waits_while_a_verify_holds_the_chain(ws: Workspace) -> None:
    chain(ws, 1)
    (ws.state_dir / KEY).unlink()
    done: list[str] = []
    with (ws.receipts_dir / HEAD_FILE).open("rb") as head:
        fcntl.flock(head, fcntl.LOCK_SH)  # as a verify in progress holds it
        rekeying = threading.Thread(
            target=lambda: done.append(rekey(ws, "lost").receipt.id), daemon=True
        )
        rekeying.start()
        rekeying.join(timeout=1)  # what must not happen: a bounded wait
        assert done == []
    rekeying.join(timeout=30)
    assert done == ["00000002"]


def test_the_receipt_after_a_newest_one_forged_with_its_head_removed_links_to_the_forgery(
    ws: Workspace,
) -> None:
    """The chain goes on from the newest receipt as it is on disk; the anchor is taken
    instead only where receipts it names are gone from the end."""
    chain(ws, 2)
    _edit_and_rehash_keeping_the_mac(_r(ws, 2))
    (ws.receipts_dir / HEAD_FILE).unlink()
    write_receipt(ws, "note", {})
    assert load_receipt(ws, "3").previous == f"00000002 {load_receipt(ws, '2').sha256}"
    assert verify_chain(ws) == [
        "00000002: its signature does not match the workspace's key: forged, or rewritten "
        "with recomputed hashes"
    ]


def test_a_key_replaced_by_hand_without_a_rekey_receipt_fails_verify(ws: Workspace) -> None:
    chain(ws, 2)
    (ws.state_dir / KEY).write_text(f"{'ab' * 32} 3\n")
    assert verify_chain(ws) == [
        "AgentOS's record of the newest receipt (.agentos/receipts.anchor) is forged (its "
        "signature does not match the key): receipts removed from the chain's end cannot be told",
        *(
            f"{rid}: signed with another key than the workspace's, and 00000003, where its key "
            "begins, is no rekey receipt: forged, or the key was replaced by hand"
            for rid in ("00000001", "00000002")
        ),
    ]


def test_a_receipt_signed_with_another_key_is_named_so_before_its_head_problem(
    ws: Workspace,
) -> None:
    chain(ws, 2)
    (ws.state_dir / KEY).write_text(f"{'ab' * 32} 3\n")
    (ws.receipts_dir / HEAD_FILE).write_text(f"00000002 {'a' * 64}\n")
    other = (
        "{}: signed with another key than the workspace's, and 00000003, where its key "
        "begins, is no rekey receipt: forged, or the key was replaced by hand"
    )
    assert verify_chain(ws) == [
        "AgentOS's record of the newest receipt (.agentos/receipts.anchor) is forged (its "
        "signature does not match the key): receipts removed from the chain's end cannot be told",
        other.format("00000001"),
        other.format("00000002"),
        "00000002: changed after it was written (the chain's head records another sha256)",
    ]


def test_an_exported_key_imported_into_a_copy_lets_it_verify_macs_and_write(
    cli: CliRunner, ws: Workspace, tmp_path: Path
) -> None:
    chain(ws, 3)
    exported = tmp_path / "receipts.key"
    out = cli("receipts", "key", "export", "--out", str(exported))
    assert (out.returncode, out.stdout) == (0, f"receipts key written to {exported} (mode 0600)\n")
    assert exported.stat().st_mode & 0o777 == 0o600
    assert exported.read_text() == (ws.state_dir / KEY).read_text()
    printed = cli("receipts", "key", "export")
    assert printed.stdout == exported.read_text()

    copy = tmp_path / "copy"  # another machine: the chain, and none of the first one's state
    init_workspace(copy)
    shutil.copytree(ws.receipts_dir, copy / "receipts", dirs_exist_ok=True)
    other = Workspace(copy)
    no_key = cli("receipts", "verify", workspace=copy)
    assert (no_key.returncode, no_key.stdout) == (1, _problems(_key_missing(), ANCHOR_MISSING))
    hashes = cli("receipts", "verify", "--hashes-only", workspace=copy)
    assert (hashes.returncode, hashes.stdout) == (
        0,
        "receipts verified: 3 receipts, chain intact\n" + HASHES_ONLY,
    )

    imported = cli("receipts", "key", "import", str(exported), workspace=copy)
    assert (imported.returncode, imported.stdout) == (
        0,
        f"receipts key imported into {other.state_dir / KEY} (first signed 00000001; it signs "
        "receipt 00000003)\n",
    )
    assert (other.state_dir / KEY).stat().st_mode & 0o777 == 0o600
    again = cli("receipts", "key", "import", str(exported), workspace=copy)
    assert again.stdout == f"{other.state_dir / KEY}: already this key\n"
    verified = cli("receipts", "verify", workspace=copy)
    assert (verified.returncode, verified.stdout) == (
        0,
        "receipts verified: 3 receipts, chain intact\n",
    )
    # The copy writes to the chain with the same key, and checks MACs: a forgery is named.
    assert write_receipt(other, "gate", {"check": "check by a second writer"}).id == "00000004"
    assert load_receipt(other, "4").signed_from == "00000001"
    _edit_and_rehash_keeping_the_mac(other.receipts_dir / "00000004.txt")
    assert verify_chain(other) == [
        "00000004: its signature does not match the workspace's key: forged, or rewritten "
        "with recomputed hashes",
        "00000004: changed after it was written (the chain's head records another sha256)",
        "00000004: changed after it was written (AgentOS's record of the newest receipt "
        "holds another sha256)",
    ]


def test_a_key_import_says_what_it_did_as_a_dict(ws: Workspace, tmp_path: Path) -> None:
    chain(ws, 3)
    exported = tmp_path / "receipts.key"
    export_key(ws, exported)
    copy = Workspace(init_workspace(tmp_path / "copy")[0].root)
    shutil.copytree(ws.receipts_dir, copy.receipts_dir, dirs_exist_ok=True)
    assert import_key(copy, exported).as_dict() == {
        "path": str(copy.state_dir / KEY),
        "first_signed": "00000001",
        "changed": True,
        "checked": "00000003",
    }
    assert import_key(copy, exported).as_dict() == {
        "path": str(copy.state_dir / KEY),
        "first_signed": "00000001",
        "changed": False,
        "checked": None,
    }
    empty = Workspace(init_workspace(tmp_path / "empty")[0].root)
    assert import_key(empty, exported).as_dict() == {
        "path": str(empty.state_dir / KEY),
        "first_signed": "00000001",
        "changed": True,
        "checked": None,
    }
    assert not (empty.state_dir / ANCHOR).exists()  # no receipt to anchor


def _key_file(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_a_key_file_is_read_up_to_4096_bytes(ws: Workspace, tmp_path: Path) -> None:
    chain(ws, 1)
    key = (ws.state_dir / KEY).read_text().strip()  # "HEX 1", no newline
    (ws.state_dir / KEY).unlink()
    full = _key_file(tmp_path / "full", key.rjust(4096))
    assert import_key(ws, full).changed is True
    (ws.state_dir / KEY).unlink()
    for source in (_key_file(tmp_path / "long", key.rjust(4097)), Path("/dev/zero")):
        with pytest.raises(BadInput) as err:
            import_key(ws, source)
        assert str(err.value).startswith(f"{source}: is not a receipts key")


def test_a_key_import_replaces_an_unreadable_key_and_another_only_with_force(
    ws: Workspace, tmp_path: Path
) -> None:
    chain(ws, 1)
    exported = tmp_path / "exported.key"
    export_key(ws, exported)
    (ws.state_dir / KEY).write_text("spoilt\n")
    assert import_key(ws, exported).changed is True  # restored, no --force needed
    other = _key_file(tmp_path / "other.key", f"{'cd' * 32} 1\n")
    with pytest.raises(BadInput, match="holds another key"):
        import_key(ws, other)
    assert (ws.state_dir / KEY).read_text() == exported.read_text()
    assert import_key(ws, other, force=True).changed is True
    assert (ws.state_dir / KEY).read_text() == other.read_text()


def test_a_key_is_checked_against_the_first_receipt_it_signed(
    ws: Workspace, tmp_path: Path
) -> None:
    chain(ws, 1)
    (ws.state_dir / KEY).unlink()
    other = _key_file(tmp_path / "other.key", f"{'cd' * 32} 1\n")
    with pytest.raises(BadInput, match="receipt 00000001's signature does not match it"):
        import_key(ws, other)


def test_a_key_import_waits_while_a_verify_holds_the_chain(ws: Workspace, tmp_path: Path) -> None:
    chain(ws, 1)
    exported = tmp_path / "exported.key"
    export_key(ws, exported)
    (ws.state_dir / KEY).unlink()
    done: list[bool] = []
    with (ws.receipts_dir / HEAD_FILE).open("rb") as head:
        fcntl.flock(head, fcntl.LOCK_SH)  # as a verify in progress holds it
        importer = threading.Thread(
            target=lambda: done.append(import_key(ws, exported).changed), daemon=True
        )
        importer.start()
        importer.join(timeout=1)  # what must not happen: a bounded wait
        assert done == []
    importer.join(timeout=30)
    assert done == [True]


def test_a_key_export_to_a_place_that_cannot_be_written_is_one_line(
    ws: Workspace, tmp_path: Path
) -> None:
    chain(ws, 1)
    out = tmp_path / "missing" / "receipts.key"
    with pytest.raises(BadInput) as err:
        export_key(ws, out)
    assert str(err.value) == f"{out}: cannot be written: No such file or directory"


def test_key_import_and_export_refuse_what_they_should_in_one_line(
    cli: CliRunner, ws: Workspace, tmp_path: Path
) -> None:
    chain(ws, 2)
    junk = tmp_path / "junk"
    junk.write_text("not a key\n")
    other = tmp_path / "other.key"
    other.write_text(f"{'cd' * 32} 1\n")
    exported = tmp_path / "exported.key"
    assert cli("receipts", "key", "export", "--out", str(exported)).returncode == 0
    key_file = ws.state_dir / KEY
    cases = [
        (
            ("import", str(junk)),
            f"{junk}: is not a receipts key (64 hex digits and the first receipt it signed, as "
            "`agentos receipts key export` writes it)",
        ),
        (("import", str(tmp_path / "nowhere")), f"{tmp_path / 'nowhere'}: cannot be read: "),
        (
            ("import", str(other)),
            f"{key_file}: holds another key: --force replaces it (receipts it signed then fail "
            "verify)",
        ),
        (("export", "--out", str(junk)), f"{junk}: exists: remove it or choose another --out"),
    ]
    for args, message in cases:
        result = cli("receipts", "key", *args)
        assert (result.returncode, result.stdout) == (2, ""), args
        assert result.stderr.startswith(f"error: {message}"), result.stderr
        assert result.stderr.count("\n") == 1, result.stderr
    assert cli("receipts", "key", "export", "--out", str(exported)).returncode == 0  # same key
    # Another workspace's key does not sign this chain: refused even where there is no key.
    key_file.unlink()
    wrong = cli("receipts", "key", "import", str(other))
    assert (wrong.returncode, wrong.stderr) == (
        2,
        f"error: {other}: does not sign this workspace's receipts (receipt 00000002's "
        "signature does not match it: another workspace's key?): --force imports it anyway\n",
    )
    assert cli("receipts", "key", "import", str(exported)).returncode == 0
    assert verify_chain(ws) == []
    key_file.unlink()
    no_key = cli("receipts", "key", "export")
    assert (no_key.returncode, no_key.stderr) == (
        2,
        f"error: {key_file}: is missing: there is no key to export (the first signed receipt "
        "makes it)\n",
    )


@pytest.mark.parametrize(
    "spoilt",
    ["empty", "a folder", "not ascii", "no first receipt", "not hex", "a word more"],
)
def test_a_key_file_that_holds_no_key_stops_the_next_write_naming_it(
    ws: Workspace, spoilt: str
) -> None:
    """Whatever the key file holds that is not a key, the next write is refused saying so:
    never a crash, and never taken for a missing key."""
    chain(ws, 1)
    path = ws.state_dir / KEY
    secret, first = path.read_text().split()
    path.unlink()
    held = {
        "empty": b"",
        "not ascii": f"\xff{secret} {first}\n".encode("latin-1"),
        "no first receipt": f"{secret} one\n".encode(),
        "not hex": f"{'zz' * 32} {first}\n".encode(),
        "a word more": f"{secret} {first} {first}\n".encode(),
    }
    if spoilt == "a folder":
        path.mkdir()
    else:
        path.write_bytes(held[spoilt])
    with pytest.raises(BadInput) as err:
        write_receipt(ws, "gate", {})
    assert str(err.value) == (
        f"{path}: is not a receipts key: restore it from a backup or `agentos receipts key "
        "import FILE` (or start a new one with `agentos receipts rekey --reason TEXT`)"
    )
    assert len(list_receipts(ws)) == 1


@pytest.mark.parametrize(
    "spoilt", ["not ascii", "a word more", "an id that is not digits", "a short sha256"]
)
def test_an_anchor_that_is_not_an_id_a_sha256_and_its_mac_is_named_forged(
    ws: Workspace, spoilt: str
) -> None:
    """Even signed with the workspace's key, an anchor of other words is no record of the
    newest receipt; it is never a crash (a mac that is not ASCII raised TypeError)."""
    chain(ws, 3)
    path = ws.state_dir / ANCHOR
    rid, digest, mac = path.read_text().split()
    secret = bytes.fromhex((ws.state_dir / KEY).read_text().split()[0])

    def signed(rid: str, digest: str) -> str:
        mac = hmac.new(secret, f"anchor {rid} {digest}".encode(), hashlib.sha256).hexdigest()
        return f"{rid} {digest} {mac}\n"

    path.write_bytes(
        {
            "not ascii": f"{rid} {digest} {mac}\xff\n".encode("latin-1"),
            "a word more": f"{rid} {digest} {mac} more\n".encode(),
            "an id that is not digits": signed("three", digest).encode(),
            "a short sha256": signed(rid, digest[:63]).encode(),
        }[spoilt]
    )
    assert verify_chain(ws) == [
        "AgentOS's record of the newest receipt (.agentos/receipts.anchor) is forged (its "
        "signature does not match the key): receipts removed from the chain's end cannot be "
        "told"
    ]
    assert write_receipt(ws, "gate", {}).id == "00000004"  # the next write signs it anew
    assert verify_chain(ws) == []


def test_hashes_only_without_a_key_says_macs_were_not_checked(
    cli: CliRunner, ws: Workspace
) -> None:
    chain(ws, 2)
    (ws.state_dir / KEY).unlink()
    result = cli("receipts", "verify", "--hashes-only")
    assert (result.returncode, result.stdout) == (
        0,
        "receipts verified: 2 receipts, chain intact\n" + HASHES_ONLY,
    )
    as_json = json.loads(cli("receipts", "verify", "--hashes-only", "--json").stdout)
    assert (as_json["ok"], as_json["macs_checked"]) == (True, False)
    assert as_json["notes"] == [HASHES_ONLY.removeprefix("note: ").rstrip("\n")]


def _old_chain(ws: Workspace, count: int, key: bytes | None) -> None:
    """Receipts as older AgentOS versions wrote them: before signing (no key, no anchor, no
    mac), or the first signing version's (a mac and an anchor, no signed_from line)."""
    previous = "none"
    for seq in range(1, count + 1):
        rid = receipt_id(seq)
        content = (
            f"receipt: {rid}\nkind: gate\ntime: 2026-11-01T00:00:00.000000Z\n"
            f"check: check {seq}\nprevious: {previous}\n"
        )
        digest = hashlib.sha256(content.encode()).hexdigest()
        mac = ""
        if key is not None:
            mac = f"mac: {hmac.new(key, f'{rid} {digest}'.encode(), 'sha256').hexdigest()}\n"
        _r(ws, seq).write_text(content + f"sha256: {digest}\n" + mac)
        previous = f"{rid} {digest}"
    (ws.receipts_dir / HEAD_FILE).write_text(previous + "\n")
    if key is not None:
        (ws.state_dir / KEY).write_text(f"{key.hex()} 1\n")
        rid, digest = previous.split()
        anchor_mac = hmac.new(key, f"anchor {rid} {digest}".encode(), "sha256").hexdigest()
        (ws.state_dir / ANCHOR).write_text(f"{previous} {anchor_mac}\n")


def test_a_chain_written_before_signing_still_verifies_and_its_next_write_makes_the_key(
    cli: CliRunner, ws: Workspace
) -> None:
    _old_chain(ws, 3, key=None)
    result = cli("receipts", "verify")
    assert (result.returncode, result.stdout) == (
        0,
        "receipts verified: 3 receipts, chain intact\n",
    )
    assert not (ws.state_dir / KEY).exists()
    assert write_receipt(ws, "gate", {"after": "upgrade"}).id == "00000004"
    assert load_receipt(ws, "4").signed_from == "00000004"
    assert (ws.state_dir / KEY).stat().st_mode & 0o777 == 0o600
    assert verify_chain(ws) == []
    # From there on, a receipt in the old unsigned form is a stripped or forged one.
    _forge_next(ws, 5, f"00000004 {load_receipt(ws, '4').sha256}")
    assert verify_chain(ws) == [
        "00000005: carries no signature, though receipts here are signed from 00000004 on: its "
        "mac was stripped, or it was written outside AgentOS"
    ]


def test_a_chain_of_the_first_signing_version_verifies_and_its_stripped_macs_are_named(
    ws: Workspace,
) -> None:
    secret = bytes(range(32))
    _old_chain(ws, 3, key=secret)
    assert verify_chain(ws) == []
    assert write_receipt(ws, "gate", {}).id == "00000004"
    assert load_receipt(ws, "4").signed_from == "00000001"
    assert verify_chain(ws) == []
    # Its older receipts carry no signed_from, but the newer ones say signing began at 1.
    text = _r(ws, 2).read_text()
    _r(ws, 2).write_text(text[: text.index("mac: ")])
    (ws.state_dir / KEY).unlink()
    (ws.state_dir / ANCHOR).unlink()
    assert verify_receipts(ws, hashes_only=True).problems == (_STRIPPED.format("00000002"),)


def test_macs_stripped_from_a_chain_of_the_first_signing_version_are_named_by_its_key(
    ws: Workspace,
) -> None:
    """No receipt says where signing began: the key does (its first receipt, 1 here)."""
    _old_chain(ws, 3, key=bytes(range(32)))
    for seq in (1, 2):
        text = _r(ws, seq).read_text()
        _r(ws, seq).write_text(text[: text.index("mac: ")])
    assert verify_chain(ws) == [_STRIPPED.format("00000001"), _STRIPPED.format("00000002")]


def test_a_rekey_after_receipts_written_with_signing_off_notes_no_previous_key(
    cli: CliRunner, ws: Workspace
) -> None:
    ws.settings_file.write_text("run: {guardian: false}\nreceipts: {sign: false}\n")
    chain(Workspace(ws.root), 2)
    ws.settings_file.write_text("run: {guardian: false}\n")
    assert cli("receipts", "rekey", "--reason", "signing from now on").returncode == 0
    report = verify_receipts(Workspace(ws.root))
    assert (report.problems, report.notes) == (
        (),
        ("2 receipts written with signing off: no mac, only hashes and links",),
    )


def test_signing_off_writes_unsigned_receipts_that_verify_and_verify_says_so(
    cli: CliRunner, ws: Workspace
) -> None:
    ws.settings_file.write_text("run: {guardian: false}\nreceipts: {sign: false}\n")
    ws = Workspace(ws.root)
    chain(ws, 2)
    parsed = load_receipt(ws, "2")
    assert (parsed.signed_from, parsed.mac) == ("off", None)
    assert not (ws.state_dir / KEY).exists() and not (ws.state_dir / ANCHOR).exists()
    result = cli("receipts", "verify")
    assert (result.returncode, result.stdout) == (
        0,
        "receipts verified: 2 receipts, chain intact\n"
        "note: signing is off (agentos.yaml: receipts: {sign: false}): new receipts carry no "
        "mac, and only their hashes and links are checked\n"
        "note: 2 receipts written with signing off: no mac, only hashes and links\n",
    )
    refused = cli("receipts", "rekey", "--reason", "why not")
    assert (refused.returncode, refused.stderr) == (
        2,
        f"error: {ws.settings_file}: receipts.sign: is false: receipts are not signed here, so "
        "there is no key to replace\n",
    )
    # Turned on again: the workspace was never signed, so its first key is made.
    ws.settings_file.write_text("run: {guardian: false}\n")
    ws = Workspace(ws.root)
    assert write_receipt(ws, "gate", {}).id == "00000003"
    assert load_receipt(ws, "3").signed_from == "00000003"
    assert verify_receipts(ws).notes == (
        "2 receipts written with signing off: no mac, only hashes and links",
    )
    # Signed, then off, with the key gone meanwhile: turned on again, no key is made silently.
    ws.settings_file.write_text("run: {guardian: false}\nreceipts: {sign: false}\n")
    ws = Workspace(ws.root)
    (ws.state_dir / KEY).unlink()
    (ws.state_dir / ANCHOR).unlink()
    assert write_receipt(ws, "gate", {}).id == "00000004"
    ws.settings_file.write_text("run: {guardian: false}\n")
    ws = Workspace(ws.root)
    with pytest.raises(BadInput, match=r"\(receipt 00000003 is signed\)"):
        write_receipt(ws, "gate", {})


def test_a_bad_sign_setting_is_one_line_naming_file_and_field(
    cli: CliRunner, ws: Workspace
) -> None:
    ws.settings_file.write_text("receipts: {sign: maybe}\n")
    result = cli("receipts", "verify")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        f"error: {ws.settings_file}: receipts.sign: Input should be a valid boolean, unable to "
        "interpret input\n"
    )


def test_a_head_that_is_a_directory_is_one_line(cli: CliRunner, ws: Workspace) -> None:
    (ws.receipts_dir / HEAD_FILE).mkdir()
    result = cli("receipts", "verify")
    assert result.returncode == 2
    assert result.stderr == (
        f"error: {ws.receipts_dir / HEAD_FILE}: is a directory: it must be the chain's head "
        "file (remove it; the next receipt rebuilds it)\n"
    )


def _writer_script(ws: Workspace, count: int, tag: str) -> list[str]:
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from agentos.receipts import write_receipt\n"
        "from agentos.workspace.layout import Workspace\n"
        "ws = Workspace(Path(sys.argv[1]))\n"
        "for i in range(int(sys.argv[2])):\n"
        "    write_receipt(ws, 'route', {'writer': sys.argv[3], 'n': i}, request=f'req {i}')\n"
    )
    return [sys.executable, "-c", code, str(ws.root), str(count), tag]


@pytest.mark.slow
def test_four_concurrent_writers_make_one_chain_that_verifies_and_betrays_any_tampering(
    ws: Workspace, cli: CliRunner, tmp_path: Path
) -> None:
    writers = [
        subprocess.Popen(_writer_script(ws, 250, f"w{i}"), stderr=subprocess.PIPE, text=True)
        for i in range(4)
    ]
    for w in writers:
        _, err = w.communicate(timeout=300)
        assert w.returncode == 0, err
    found = list_receipts(ws)
    assert [r.id for r in found] == [receipt_id(i) for i in range(1, 1001)]
    texts = [r.path.read_text() for r in found]
    for tag in ("w0", "w1", "w2", "w3"):  # every writer's 250 receipts, each in its order
        ns = [int(t.split("\nn: ")[1].split("\n")[0]) for t in texts if f"writer: {tag}\n" in t]
        assert ns == list(range(250))
    assert not [p for p in ws.receipts_dir.iterdir() if p.name.endswith(".tmp")]
    result = cli("receipts", "verify")
    assert (result.returncode, result.stdout) == (
        0,
        "receipts verified: 1000 receipts, chain intact\n",
    )

    pristine = tmp_path / "pristine"
    shutil.copytree(ws.receipts_dir, pristine)
    cases: list[tuple[Callable[[], None], list[str]]] = [
        (lambda: _edit_text(_r(ws, 500)), ["00000500"]),
        (lambda: _r(ws, 733).unlink(), ["00000733"]),
        (lambda: _swap(_r(ws, 250), _r(ws, 251)), ["00000250", "00000251"]),
    ]
    for tamper, named in cases:
        shutil.rmtree(ws.receipts_dir)
        shutil.copytree(pristine, ws.receipts_dir)
        tamper()
        result = cli("receipts", "verify", "--json")
        assert result.returncode == 1
        problems = json.loads(result.stdout)["problems"]
        assert problems and all(any(n in p for p in problems) for n in named), problems
        assert "Traceback" not in result.stderr


def _edit_text(path: Path) -> None:
    path.write_text(path.read_text().replace("req ", "REQ "))


def test_verify_cli_exits_1_and_names_the_receipt(cli: CliRunner, ws: Workspace) -> None:
    chain(ws, 4)
    _edit(_r(ws, 2))
    result = cli("receipts", "verify")
    assert (result.returncode, result.stdout) == (
        1,
        "problem: 00000002: changed after it was written (content does not match its sha256)\n",
    )


def test_receipts_are_readable_by_others_like_any_file(ws: Workspace) -> None:
    old = os.umask(0o022)
    try:
        receipt = write_receipt(ws, "gate", {})
    finally:
        os.umask(old)
    assert receipt.path.stat().st_mode & 0o777 == 0o644
    assert (ws.receipts_dir / HEAD_FILE).stat().st_mode & 0o777 == 0o644


def test_a_bad_run_id_is_bad_input_not_a_traceback(cli: CliRunner) -> None:
    result = cli("route", "run the tests", "--run", "two words")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        "error: run id: 'two words' must be one word of letters, digits and ._:@+-\n"
    )


# --- reading receipts back: their fields, as they were written ----------------------------


def _rebuilt(parsed: ParsedReceipt) -> str:
    """The receipt's text, written again from its parsed parts alone."""
    lines = [f"receipt: {parsed.id}", f"kind: {parsed.kind}", f"time: {parsed.time}"]
    if parsed.run_id is not None:
        lines.append(f"run: {parsed.run_id}")
    if parsed.request_sha256 is not None:
        lines.append(f"request_sha256: {parsed.request_sha256}")
    elif parsed.request is not None:
        render("request", parsed.request, "", lines)
    lines += render_fields(parsed.fields)
    lines += [
        f"signed_from: {parsed.signed_from}",
        f"previous: {parsed.previous}",
        f"sha256: {parsed.sha256}",
        f"mac: {parsed.mac}",
    ]
    return "".join(f"{line}\n" for line in lines)


def _as_written(value: object) -> object:
    """What a value reads back as: tuples and sets become lists, keys strings."""
    if isinstance(value, dict):
        return {str(k): _as_written(v) for k, v in value.items()}
    if isinstance(value, set | frozenset):
        return [_as_written(v) for v in sorted(value, key=str)]
    if isinstance(value, list | tuple):
        return [_as_written(v) for v in value]
    return value


def _round_trip(ws: Workspace, kind: str, fields: dict[str, object], **kw: Any) -> ParsedReceipt:
    receipt = write_receipt(ws, kind, fields, **kw)
    parsed = load_receipt(ws, receipt.id)
    assert parsed.problem is None, parsed.problem
    assert _rebuilt(parsed) == parsed.text == receipt.path.read_text()
    assert parsed.fields == _as_written(fields)
    assert (parsed.id, parsed.kind, parsed.time, parsed.run_id, parsed.sha256) == (
        receipt.id,
        kind,
        receipt.time,
        receipt.run_id,
        receipt.sha256,
    )
    return parsed


HOSTILE = [
    "line one\nline two",
    "\nstarts with a newline\nand ends with two\n\n",
    "key: value",
    "a:",
    "- looks like an item",
    "| looks like a block",
    '"quoted"',
    "it's \"mixed\" 'quotes'",
    "  leading and trailing spaces  ",
    "\ttab first",
    "ends with a tab\t",
    "",
    " ",
    "42",
    "-7",
    "3.14",
    "1e+20",
    "inf",
    "nan",
    "00000042",
    "1.0.0",
    "null",
    "true",
    "false",
    "{}",
    "[]",
    "#not a comment",
    "naïve café — 日本語 — 😀 — مرحبا",
    "\u202eright-to-left override",
    "nul\x00bell\x07esc\x1b[31mred",
    "carriage\rreturn",
    "line\u2028separator and next\x85line",
    "C1 \x9b2J",
    "block with\n  indented lines\n- dashes\nkey: colons\n\n\nand gaps",
    "trailing space in a block \nline",
    "\\ backslash \\n not a newline",
    "x" * 5000,
]


@pytest.mark.parametrize("text", HOSTILE, ids=[f"hostile-{i}" for i in range(len(HOSTILE))])
def test_hostile_text_round_trips_as_a_field_an_item_a_key_and_the_request(
    ws: Workspace, text: str
) -> None:
    fields: dict[str, object] = {
        "value": text,
        "items": [text, {"inner": text}, [text]],
        "nested": {"deeper": {"list": [text, text]}},
        "keyed": {text: text},
    }
    parsed = _round_trip(ws, "gate", fields, run_id="run-1", request=text)
    assert parsed.request == text


def test_every_type_of_value_keeps_its_type(ws: Workspace) -> None:
    fields: dict[str, object] = {
        "none": None,
        "yes": True,
        "no": False,
        "zero": 0,
        "negative": -12,
        "big": 2**80,
        "float": 0.1,
        "whole_float": 2.0,
        "tiny": 5e-324,
        "huge": 1e300,
        "infinite": float("-inf"),
        "text": "plain words",
        "number_text": "2.0",
        "empty_map": {},
        "empty_list": [],
        "list_of_empties": [{}, [], "", None],
        "lists": [[1, [2, [3, []]]], [], ["a", ["b"]]],
        "maps_in_lists": [{"a": 1, "b": [{"c": None}]}, {"only": {}}],
        "tuple": (1, "two"),
        "set": {"b", "a"},
        "set_in_list": [{"y", "x"}],
        "block_in_list": ["one\ntwo", {"k": "three\nfour"}],
        "odd_keys": {"with space": 1, "colon: key": 2, "": 3, "1": 4, 'quote"key': 5},
    }
    parsed = _round_trip(ws, "run", fields)
    assert [type(parsed.fields[k]) for k in ("none", "yes", "zero", "float", "whole_float")] == [
        type(None),
        bool,
        int,
        float,
        float,
    ]
    nan = load_receipt(ws, write_receipt(ws, "run", {"nan": float("nan")}).id).fields["nan"]
    assert isinstance(nan, float) and math.isnan(nan)


def test_random_nested_fields_round_trip(ws: Workspace) -> None:
    rng = random.Random(1414)
    alphabet = "ab :-|\"'#\n\t\\{}[]é😀\x00\x1b\r\u2028 01.e"

    def text() -> str:
        return "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 12)))

    def value(depth: int) -> object:
        pick = rng.randrange(10 if depth < 4 else 6)
        if pick < 3:
            return text()
        if pick == 3:
            return rng.choice([None, True, False, 0, -1, 1.5, 10**20, "1", "-0"])
        if pick == 4:
            return "\n".join(text().replace("\n", "").rstrip() for _ in range(3))
        if pick == 5:
            return rng.uniform(-1e6, 1e6)
        if pick < 8:
            return [value(depth + 1) for _ in range(rng.randrange(0, 4))]
        return {text(): value(depth + 1) for _ in range(rng.randrange(0, 4))}

    for i in range(150):
        fields = {f"f{j}": value(0) for j in range(rng.randrange(1, 5))}
        _round_trip(ws, "gate", fields, run_id=f"run-{i}", request=text())


def test_a_value_is_written_the_plainest_way_that_reads_back_the_same() -> None:
    assert render_fields({"who": "Xavier"}) == ["who: Xavier"]
    assert render_fields({"out": "X\nY"}) == ["out: |", "  X", "  Y"]
    # Only control characters and line separators are escaped: cat shows the rest.
    assert render_fields({"said": '"déjà vu" ☕', "map": {"clé": "été\u2028"}}) == [
        'said: "\\"déjà vu\\" ☕"',
        "map:",
        '  "clé": "été\\u2028"',
    ]
    # A block keeps leading spaces, never trailing ones (cat would not show them), and its
    # empty lines are empty.
    blocks = {"out": "  indented\nline", "sp": "a \nb", "gap": "a\n\nb", "l": ["a\n\nb"]}
    assert render_fields(blocks) == [
        "out: |",
        "    indented",
        "  line",
        'sp: "a \\nb"',
        "gap: |",
        "  a",
        "",
        "  b",
        "l:",
        "  - |",
        "      a",
        "",
        "      b",
    ]


def test_a_string_is_written_by_the_same_rule_at_any_length_and_every_time() -> None:
    # The written form of a short string is kept from one receipt to the next (a long one is
    # not): either way, and the first time as after, a string is plain only when it reads
    # back as itself.
    for n in (199, 200, 201, 400):
        pad, digits = "x" * (n - 4), "4" * n
        fields = {
            "plain": f"{pad}okay",
            "number": digits,
            "spaced": f" {pad}abc",
            "items": [f"{pad}a: b", digits, f"{pad}okay", 7],
            "map": {f"{pad}k y": "v", f"{pad}key": "null"},
        }
        expected = [
            f"plain: {pad}okay",
            f'number: "{digits}"',
            f'spaced: " {pad}abc"',
            "items:",
            f'  - "{pad}a: b"',
            f'  - "{digits}"',
            f"  - {pad}okay",
            "  - 7",
            "map:",
            f'  "{pad}k y": v',
            f'  {pad}key: "null"',
        ]
        assert render_fields(fields) == expected
        assert render_fields(fields) == expected
        assert parse_fields(expected) == (fields, None)


def test_fields_alone_are_numbered_from_line_1() -> None:
    assert parse_fields(["ok: 1", "no colon"]) == (
        {"ok": 1},
        "line 2: expected 'key: value', found 'no colon'",
    )


def test_a_sets_items_are_written_sorted_by_their_text() -> None:
    words = {"delta", "alpha", "echo", "bravo", "golf", "charlie", "foxtrot", "hotel"}
    assert render_fields({"s": words, "n": {10, 9, 100}}) == [
        "s:",
        *(f"  - {w}" for w in sorted(words)),
        "n:",
        "  - 10",
        "  - 100",
        "  - 9",
    ]


def test_a_redacted_request_reads_back_as_its_sha256(ws: Workspace) -> None:
    ws.settings_file.write_text("receipts: {redact: true}\n")
    ws = Workspace(ws.root)
    parsed = _round_trip(ws, "route", {"decision": "route"}, request="secret plans")
    assert parsed.request is None
    assert parsed.request_sha256 == hashlib.sha256(b"secret plans").hexdigest()


@needs_tmux
def test_every_receipt_of_a_real_run_reads_back_to_what_was_written(
    ws: Workspace, tmp_path: Path, tmux_socket: str
) -> None:
    src = write_package(
        tmp_path / "pkg",
        name="scribe",
        files={"run.sh": "printf 'done\\n' > done.txt\n"},
        checks=[{"name": "wrote done.txt", "file_exists": "done.txt"}],
    )
    Hub(ws.hub_dir).install(str(src))
    (ws.cards_dir / "scribe.yaml").write_text(
        "id: scribe\nagent: scribe\ndescription: writes done.txt\ngroup: scribe\n"
        "triggers: {keywords: [scribe]}\n"
    )
    repo = make_repo(tmp_path / "repo")
    report = start_run(ws, "scribe: write done.txt; done when done.txt exists", repo, force=True)
    assert report.status == "succeeded", report.message
    write_receipt(ws, "run", {"status": "aborted", "by": "gc", "saved_commits": ["ab12"]})
    write_receipt(
        ws,
        "guardian",
        {
            "agent": "scribe@1.0.0",
            "session": "agentos-run-scribe",
            "action": "nudge",
            "ok": False,
            "health": "stuck",
            "reason": "no output for 301.2 s (stuck_after 300 s)",
            "output_age": 301.2,
            "quiet_for": 301.2,
            "restarts": 0,
            "policy": {"interval": 60.0, "stuck_after": 300.0, "nudge": "Are you stuck?"},
            "detail": "tmux could not type into the pane",
        },
        run_id=report.run_id,
    )

    kinds = []
    for info in list_receipts(ws):
        parsed = load_receipt(ws, info.id)
        assert parsed.problem is None, (info.id, parsed.problem)
        assert _rebuilt(parsed) == parsed.text, info.id
        assert (parsed.kind, parsed.run_id, parsed.time) == (info.kind, info.run_id, info.time)
        kinds.append(parsed.kind)
    assert {"interview", "route", "gate", "merge", "run", "guardian"} <= set(kinds)
    gate = next(load_receipt(ws, i.id) for i in list_receipts(ws) if i.kind == "gate")
    assert gate.fields["passed"] is True


def test_receipts_show_json_prints_the_parsed_fields_and_the_text(
    cli: CliRunner, ws: Workspace
) -> None:
    written = write_receipt(
        ws,
        "gate",
        {"passed": False, "checks": [{"name": "tests", "exit": 1, "tail": "FAILED\nx: y"}]},
        run_id="run-9",
        request="make it pass",
    )
    shown = cli("receipts", "show", "1", "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout) == {
        "id": "00000001",
        "path": str(written.path),
        "kind": "gate",
        "time": written.time,
        "run": "run-9",
        "request": "make it pass",
        "request_sha256": None,
        "fields": {
            "passed": False,
            "checks": [{"name": "tests", "exit": 1, "tail": "FAILED\nx: y"}],
        },
        "signed_from": "00000001",
        "previous": "none",
        "sha256": written.sha256,
        "mac": parse_receipt(written.path.read_text()).mac,
        "problem": None,
        "text": written.path.read_text(),
    }


HAND = "receipt: 00000001\nkind: gate\ntime: t\n"
DEEP = "".join(f"{'  ' * i}k{i}:\n" for i in range(600)) + f"{'  ' * 600}x: 1\n"


@pytest.mark.parametrize(
    ("text", "problem", "fields"),
    [
        ("", "line 1: the header has no receipt, kind, time", {}),
        (HAND, None, {}),
        (
            HAND + "ok: 1\nno colon here\n",
            "line 5: expected 'key: value', found 'no colon here'",
            {"ok": 1},
        ),
        (HAND + "x" * 50 + "\n", f"line 4: expected 'key: value', found '{'x' * 40}'", {}),
        (HAND + "a:b\n", "line 4: expected ': ' after the key 'a'", {}),
        (HAND + "a:\nb: 2\n", "line 5: expected the indented lines of a mapping or a list", {}),
        (HAND + "a: 1\n    b: 2\n", "line 5: more indented than the keys around it", {"a": 1}),
        (HAND + "l:\n  - 1\n  x: 2\n", "line 6: expected a list item ('- ')", {}),
        (HAND + "l:\n  -\nx: 1\n", "line 6: expected the items of a list in a list", {}),
        (HAND + '"open: 1\n', "line 4: a quoted key that does not end", {}),
        (HAND + "a: 1\n\nb: 2\n", "line 5: an empty line outside a | block", {"a": 1}),
        (HAND + DEEP, "nested too deeply to read", {}),
        ("\x00\xff\n\n\n- - -\n  :\n", "line 1: the header has no receipt, kind, time", {}),
    ],
    ids=[
        "empty",
        "no-fields",
        "no-colon",
        "long-line",
        "no-space",
        "no-children",
        "indent",
        "not-item",
        "no-items",
        "quote",
        "gap",
        "deep",
        "junk",
    ],
)
def test_a_receipt_edited_by_hand_is_read_as_far_as_it_goes_without_raising(
    text: str, problem: str | None, fields: dict[str, object]
) -> None:
    parsed = parse_receipt(text)
    assert (parsed.problem, parsed.fields) == (problem, fields)
    assert parsed.id == ("00000001" if text.startswith("receipt: ") else "?")


def test_random_bytes_never_make_the_parser_raise() -> None:
    rng = random.Random(7)
    pieces = [
        "receipt: 1\n",
        "kind: k\n",
        "time: t\n",
        "a:",
        " ",
        "  ",
        "- ",
        "-",
        "\n",
        '"',
        ":",
        "|",
        "x",
        "\\",
    ]
    for _ in range(2000):
        parse_receipt("".join(rng.choice(pieces) for _ in range(rng.randrange(0, 40))))


@pytest.mark.parametrize("planted", ["symlink", "hard link", "fifo"])
def test_the_anchor_is_rewritten_in_place_but_never_through_what_was_planted_there(
    ws: Workspace, tmp_path: Path, planted: str
) -> None:
    """The anchor is rewritten in place (no new file per receipt); a link or a FIFO left in
    its place is replaced, never written through or waited on, and the chain verifies."""
    chain(ws, 2)
    anchor = ws.state_dir / ANCHOR
    inode = anchor.stat().st_ino
    chain(ws, 1)
    assert anchor.stat().st_ino == inode  # in place
    outside = tmp_path / "outside.txt"
    outside.write_text("keep me\n")
    anchor.unlink()
    if planted == "symlink":
        anchor.symlink_to(outside)
    elif planted == "hard link":
        os.link(outside, anchor)
    else:
        os.mkfifo(anchor)
    written = write_receipt(ws, "note", {"n": 4})
    assert outside.read_text() == "keep me\n"
    assert not anchor.is_symlink() and anchor.is_file() and anchor.stat().st_nlink == 1
    assert anchor.read_text().split()[:2] == [written.id, written.sha256]
    assert verify_receipts(ws).ok
