"""`FileVersions` (mcpcache/server/files.py): a file's hash, read again only when its stat moved.

What must hold: the version is always the hash of the file's current bytes, whatever was done to it (an
edit of the same size, its mtime put back, a rename over it, an edit within one tick of the filesystem's
clock); the stamps only spare the read of a file that has settled and not moved. Real files on the test's
filesystem; the clock the stamps are compared to is injected, so "settled" is decided, not waited for.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import fastmcp
import pytest
import xxhash

from mcpcache.demo.notebooks import generate_notebook
from mcpcache.demo.server import build_demo_server
from mcpcache.protocol import META_KEY
from mcpcache.server import FileVersions


class Clock:
    """Wall-clock time, plus an offset the test moves."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset


def digest(path: Path) -> str:
    return xxhash.xxh3_128_hexdigest(path.read_bytes())


def rewrite_in_place(path: Path, data: bytes) -> None:
    """Another program's edit: the same inode, written over."""
    with path.open("r+b") as handle:
        handle.write(data)
        handle.truncate()


def test_a_settled_file_is_hashed_once_until_it_moves(tmp_path: Path) -> None:
    path = tmp_path / "a.ipynb"
    path.write_bytes(b'{"cells": []}')
    clock = Clock()
    versions = FileVersions(clock=clock)
    clock.offset = 10.0  # the file changed long before it is checked: settled
    assert versions.of_path(path) == digest(path)
    assert versions.of_path(path) == digest(path)
    assert versions.reads == 1
    # The same size, its mtime put back as it was: the ctime moved, and the bytes are read again. (The clock
    # said "settled" without waiting; the file's real stamps need one tick of the kernel's clock to move.)
    time.sleep(0.05)
    before = path.stat()
    rewrite_in_place(path, b'{"cells": [1]}'[: before.st_size])
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert path.stat().st_size == before.st_size
    assert path.stat().st_mtime_ns == before.st_mtime_ns
    assert versions.of_path(path) == digest(path)
    assert versions.reads == 2


def test_a_file_changed_within_the_settling_time_is_hashed_on_every_call(tmp_path: Path) -> None:
    """Two edits of the same size within one tick of the filesystem's clock can leave every stamp as it was;
    so a file changed that recently is never answered from its stamps."""
    path = tmp_path / "a.ipynb"
    versions = FileVersions(settle_s=60)  # the real clock: the file changes now, and a minute is "recent"
    for text in (b"first edition", b"other edition", b"third edition"):
        if path.exists():
            rewrite_in_place(path, text)
        else:
            path.write_bytes(text)
        assert versions.of_path(path) == xxhash.xxh3_128_hexdigest(text)
        assert versions.of_path(path) == xxhash.xxh3_128_hexdigest(text)
    assert versions.reads == 6


def test_the_settling_time_follows_the_stamps_a_filesystem_keeps() -> None:
    versions = FileVersions()

    def stamped(mtime_ns: int, ctime_ns: int) -> os.stat_result:
        # (mode, ino, dev, nlink, uid, gid, size, atime, mtime, ctime) and the float and ns fields after them
        fields = (0o100644, 1, 1, 1, 0, 0, 10, 0, mtime_ns // 10**9, ctime_ns // 10**9)
        return os.stat_result((*fields, 0.0, mtime_ns / 1e9, ctime_ns / 1e9, 0, mtime_ns, ctime_ns))

    assert versions._settling(stamped(1_700_000_000_123_456_789, 1_700_000_000_123_456_789)) == 0.1
    assert versions._settling(stamped(1_700_000_000_000_000_000, 1_700_000_004_000_000_000)) == 2.0  # FAT-like
    assert versions._settling(stamped(1_700_000_000_000_000_000, 1_700_000_004_500_000_000)) == 0.1
    assert FileVersions(settle_s=5)._settling(stamped(1, 1)) == 5


def test_a_file_renamed_over_is_another_file(tmp_path: Path) -> None:
    path = tmp_path / "a.ipynb"
    path.write_bytes(b"first edition")
    clock = Clock()
    clock.offset = 10.0
    versions = FileVersions(clock=clock)
    assert versions.of_path(path) == digest(path)
    replacement = tmp_path / ".a.ipynb.tmp"
    replacement.write_bytes(b"other edition")
    stamps = path.stat()
    os.utime(replacement, ns=(stamps.st_atime_ns, stamps.st_mtime_ns))
    os.replace(replacement, path)
    assert versions.of_path(path) == xxhash.xxh3_128_hexdigest(b"other edition")


def test_trust_stat_false_reads_every_time(tmp_path: Path) -> None:
    path = tmp_path / "a.ipynb"
    path.write_bytes(b"x" * 10_000_000)  # larger than one read: hashed in chunks, as the whole would be
    clock = Clock()
    clock.offset = 10.0
    versions = FileVersions(clock=clock, trust_stat=False)
    assert versions.of_path(path) == digest(path)
    assert versions.of_path(path) == digest(path)
    assert versions.reads == 2


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="settle_s"):
        FileVersions(settle_s=-1)
    with pytest.raises(ValueError, match="max_files"):
        FileVersions(max_files=0)


@pytest.mark.anyio
async def test_the_demo_validator_sees_an_edit_of_the_same_size_by_another_program(tmp_path: Path) -> None:
    generate_notebook(tmp_path / "a.ipynb", 6, seed=1)
    server = build_demo_server(tmp_path, validator=True)
    async with fastmcp.Client(server) as client:
        full = await client.call_tool_mcp("read_notebook", {"path": "a.ipynb"})
        tag = (full.meta or {})[META_KEY]["etag"]
        again = await client.call_tool_mcp("read_notebook", {"path": "a.ipynb"}, meta={META_KEY: {"etag": tag}})
        assert (again.meta or {})[META_KEY].get("notModified") is True
        path = tmp_path / "a.ipynb"
        data = path.read_bytes()
        stamps = path.stat()
        edited = data.replace(b"import", b"IMPORT", 1)
        assert edited != data
        assert len(edited) == len(data)
        rewrite_in_place(path, edited)
        os.utime(path, ns=(stamps.st_atime_ns, stamps.st_mtime_ns))
        changed = await client.call_tool_mcp("read_notebook", {"path": "a.ipynb"}, meta={META_KEY: {"etag": tag}})
    assert (changed.meta or {})[META_KEY].get("notModified") is not True
    assert (changed.meta or {})[META_KEY]["etag"] != tag
