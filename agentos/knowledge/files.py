"""Which files the knowledge store reads: walking directories and telling text from binary.

A walk skips version-control and tool directories (``.git``, ``.agentos``,
``node_modules``, caches), virtual environments (``.venv``, ``site-packages``, any
directory holding ``pyvenv.cfg``), symbolic links, files with a binary extension, files
over ``MAX_FILE_BYTES`` and names that are not UTF-8 (the index keeps names as text, and
such a name has no text form to store, search or print). Only ``stat`` is called here: no
file content is read.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from agentos.errors import BadInput

MAX_FILE_BYTES = 1_048_576
SNIFF_BYTES = 8192

SKIP_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        ".agentos",
        "node_modules",
        "__pycache__",
        ".venv",
        "venv",
        "site-packages",
        "dist-packages",
        ".tox",
        ".nox",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".cache",
        ".idea",
        ".eggs",
        "__pypackages__",
    }
)
BINARY_SUFFIXES = frozenset(
    """
.png .jpg .jpeg .gif .bmp .ico .webp .tif .tiff .psd .svgz .pdf .zip .gz .tgz .bz2 .xz .zst
.7z .rar .tar .whl .egg .jar .war .so .dylib .dll .exe .o .a .lib .obj .pyc .pyo .pyd .class
.wasm .woff .woff2 .ttf .otf .eot .mp3 .mp4 .m4a .wav .ogg .flac .aif .aiff .aifc .au .mov
.avi .mkv .webm .db .sqlite .sqlite3 .pkl .pickle .pck .npy .npz .parquet .bin .dat .iso .dmg
.xcf .blend .fbx .glb
""".split()
)


@dataclass(frozen=True)
class FileEntry:
    path: str  # absolute, resolved
    label: str  # the path below the directory it was found from: indexed as text
    size: int
    mtime_ns: int


def wanted_name(name: str) -> bool:
    return os.path.splitext(name)[1].lower() not in BINARY_SUFFIXES


def is_utf8(name: str) -> bool:
    """Whether a name read from the file system is UTF-8 (Python hands other bytes over as
    lone surrogates, which no UTF-8 text, database or terminal takes)."""
    if name.isascii():
        return True
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def git_ignored(root: Path) -> frozenset[str]:
    """What git ignores below ``root`` when it lies in a repository: paths relative to it,
    directories ending in '/'. Empty outside a repository, or when git is not there."""
    try:
        out = subprocess.run(
            [
                "git",
                "-C",
                str(root),
                "ls-files",
                "--others",
                "--ignored",
                "--exclude-standard",
                "--directory",
                "-z",
            ],
            capture_output=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return frozenset()
    if out.returncode != 0:
        return frozenset()
    return frozenset(p for p in os.fsdecode(out.stdout).split("\0") if p)


def _refuse_non_utf8(path: Path) -> None:
    if not is_utf8(str(path)):
        shown = os.fsencode(path).decode("utf-8", "backslashreplace")
        raise BadInput("the name is not UTF-8: the knowledge store keeps names as text", file=shown)


def walk(root: Path) -> Iterator[FileEntry]:
    """Every file under ``root`` worth reading, in a stable order; ``root`` is resolved.
    In a git repository, what its .gitignore files exclude is left out. A ``root`` whose
    name is not UTF-8 is :class:`BadInput`; such names below it are skipped."""
    _refuse_non_utf8(root)
    ignored = git_ignored(root)
    stack = [(str(root), "")]
    while stack:
        directory, prefix = stack.pop()
        try:
            with os.scandir(directory) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            continue  # unreadable or vanished directory: nothing to index there
        subdirs = []
        if any(e.name == "pyvenv.cfg" for e in entries) and prefix:
            continue  # a virtual environment
        for entry in entries:
            if not is_utf8(entry.path):
                continue
            try:
                if entry.is_symlink():
                    continue
                if entry.is_dir():
                    rel_dir = f"{prefix}{entry.name}/"
                    if entry.name not in SKIP_DIRS and rel_dir not in ignored:
                        subdirs.append((entry.path, rel_dir))
                elif entry.is_file() and wanted_name(entry.name):
                    if prefix + entry.name in ignored:
                        continue
                    st = entry.stat()
                    if st.st_size <= MAX_FILE_BYTES:
                        yield FileEntry(entry.path, prefix + entry.name, st.st_size, st.st_mtime_ns)
            except OSError:
                continue  # vanished between listing and stat
        stack.extend(reversed(subdirs))


def entry_for(path: Path) -> FileEntry | None:
    """The entry of a single file given by name, or None when it is not worth reading
    (:class:`BadInput` when its name is not UTF-8)."""
    _refuse_non_utf8(path)
    try:
        st = path.stat()
    except OSError:
        return None
    if not wanted_name(path.name) or st.st_size > MAX_FILE_BYTES:
        return None
    return FileEntry(str(path), path.name, st.st_size, st.st_mtime_ns)


def decode(data: bytes) -> str | None:
    """The text of a file, or None when it looks binary (a NUL byte near the start)."""
    if b"\0" in data[:SNIFF_BYTES]:
        return None
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    text = data.decode("utf-8", errors="replace")
    if "\r" in text:
        text = text.replace("\r\n", "\n")
    return text
