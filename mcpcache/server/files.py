"""Versions of files, for validators: the hash of a file's bytes, read again only when its `stat` changed.

A validator names the version of what a tool reads (docs/server.md, "Validators"); for a file, the honest
version is a hash of its bytes, and reading and hashing a 5 MB notebook costs about 2 ms on every
conditional call. `FileVersions` keeps the hash it last computed for each file, with the file's identity
and change stamps (`st_dev`, `st_ino`, `st_size`, `st_mtime_ns`, `st_ctime_ns`), and returns it again
without reading while those are unchanged. The version it returns is always the hash of the bytes (never
the stamps themselves), so a tag does not change when a file is merely touched, and it is the same tag a
validator that always hashes would give.

When the stamps are not enough, and what is done about it:
- a file changed twice within one tick of the filesystem's clock keeps the same stamps (the kernel stamps
  files from a coarse clock, a few milliseconds; FAT-like filesystems to 2 s). A hash is reused only if the
  file's last change (mtime or ctime, whichever is later) was at least a settling time before the moment
  the file was hashed; a file changed more recently than that is read and hashed every time, until it has
  settled. The settling time is `settle_s` when given; by default 0.1 s for a file whose stamps have a
  fraction of a second (a filesystem that keeps them), and 2 s for one whose stamps are whole seconds;
- `touch -d` and `os.utime` can set mtime back, but not ctime, which any write moves: both are compared;
- a file replaced by a rename is another inode: compared too;
- NOT covered, so pass `trust_stat=False` (every call reads and hashes) for: network and FUSE filesystems
  whose attributes are cached by the client (NFS keeps them for up to `acregmax` seconds) or stamped by
  another machine's clock; files written through a shared `mmap` (mtime moves when the pages are written
  back, not when they change); a system clock stepped back by more than the settling time; and anything that
  rewrites a file's bytes underneath the filesystem (a block device, a restored disk image).
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import xxhash

__all__ = ["FileVersions"]

COARSE_SETTLE_S = 2.0
"""How long after its last change a file stamped in whole seconds is trusted to change its stamps with its
bytes (see the module docstring): the coarsest granularity of a common filesystem (FAT's 2 s)."""

FINE_SETTLE_S = 0.1
"""The same for a file whose stamps carry a fraction of a second: above the kernel's clock tick (1-10 ms)
and the granularity of any filesystem that keeps fractions (exFAT's 10 ms), with room to spare."""

_CHUNK = 4 << 20


@dataclass(frozen=True, slots=True)
class _Seen:
    stamps: tuple[int, int, int]
    """(st_size, st_mtime_ns, st_ctime_ns) when the file was hashed."""
    digest: str


class FileVersions:
    """The xxh3-128 hex digest of a file's bytes, reused while the file's stat is unchanged and settled.

    `of_fd(fd)` versions an open file (read from its start with `pread`, its offset untouched); `of_path`
    opens a path (following symbolic links; open it yourself, as the demo server does, to refuse them).
    Thread-safe: synchronous validators run in worker threads. `max_files` bounds how many files are
    remembered (least recently used first out). `settle_s`: the settling time (None: chosen by the file's
    stamps, see the module docstring). `trust_stat=False` hashes on every call (see the module docstring for
    when the stamps are not enough). `clock` is the wall clock file stamps are compared to.
    """

    def __init__(
        self,
        *,
        settle_s: float | None = None,
        max_files: int = 1024,
        trust_stat: bool = True,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if settle_s is not None and not settle_s >= 0:
            raise ValueError(f"settle_s must be >= 0, got {settle_s!r}")
        if max_files < 1:
            raise ValueError(f"max_files must be >= 1, got {max_files!r}")
        self.settle_s = settle_s
        self.max_files = max_files
        self.trust_stat = trust_stat
        self.clock = clock
        self.reads = 0
        """How many times a file was read and hashed (the rest were answered from the stamps)."""
        self._seen: OrderedDict[tuple[int, int], _Seen] = OrderedDict()
        self._lock = threading.Lock()

    def of_path(self, path: str | os.PathLike[str]) -> str:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            return self.of_fd(fd)
        finally:
            os.close(fd)

    def of_fd(self, fd: int, info: os.stat_result | None = None) -> str:
        """The version of the open file `fd`; `info`: its `os.fstat`, when the caller just took it."""
        before = info if info is not None else os.fstat(fd)
        checked_at = self.clock()
        identity, stamps = (before.st_dev, before.st_ino), _stamps(before)
        if self.trust_stat:
            with self._lock:
                seen = self._seen.get(identity)
                if seen is not None and seen.stamps == stamps:
                    self._seen.move_to_end(identity)
                    return seen.digest
        digest = _hash(fd)
        self.reads += 1
        after = os.fstat(fd)
        changed_ns = max(before.st_mtime_ns, before.st_ctime_ns)
        settled = checked_at - changed_ns / 1e9 >= self._settling(before)
        # Remembered only if nothing moved while it was read, and its last change is old enough that a
        # later one must move the stamps (see the module docstring).
        if self.trust_stat and settled and _stamps(after) == stamps and (after.st_dev, after.st_ino) == identity:
            with self._lock:
                self._seen[identity] = _Seen(stamps, digest)
                self._seen.move_to_end(identity)
                while len(self._seen) > self.max_files:
                    self._seen.popitem(last=False)
        return digest

    def _settling(self, info: os.stat_result) -> float:
        if self.settle_s is not None:
            return self.settle_s
        whole_seconds = info.st_mtime_ns % 1_000_000_000 == 0 and info.st_ctime_ns % 1_000_000_000 == 0
        return COARSE_SETTLE_S if whole_seconds else FINE_SETTLE_S


def _stamps(info: os.stat_result) -> tuple[int, int, int]:
    return (info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def _hash(fd: int) -> str:
    """xxh3-128 of the file's bytes from its start (what `xxhash.xxh3_128_hexdigest(f.read())` gives),
    read in chunks, so a large file is never held whole."""
    digest = xxhash.xxh3_128()
    offset = 0
    while chunk := os.pread(fd, _CHUNK, offset):
        digest.update(chunk)
        offset += len(chunk)
    return digest.hexdigest()
