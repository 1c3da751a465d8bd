"""The dense tables behind the memo of 0/1 tails (``tails.memo_binary``): kept in this
process, or shared with the other processes of the host through files mapped in memory.

Why shared: the chunks of one replay meet nearly the same tails, whichever process runs
them. On a 134 x 500 board two processes with tables of their own computed 97,506 tails
between them, and 50,273-51,252 sharing them (``benchmarks/shared_tails.py``); a prefork
worker with N children computes them N times. With
``share(directory)`` a table is also a file of that directory, mapped into every process that
meets it: a process looks a tail up in its own copy, then in the file, and computes it only
if neither has it, so a tail computed by one process is read by the others.

A cell holds the bits of its value XOR ``MISSING`` (the bits of a quiet NaN): a zero cell,
as a new file or a fresh allocation holds, reads as NaN, which the memo takes for "not
computed yet"; any value is stored exactly. A process may compute a tail another is
computing at the same time: both write the same bits (a tail's number does not depend on
what it was computed with: ``tests/engine/test_tail_memo.py``), each an aligned 8-byte store.

Trust and bounds: the directory is this user's alone (created 0700, refused otherwise), its
files are opened without following links and must be this user's; tables live in a
subdirectory named by a hash of the engine's source and numpy's and scipy's versions, so a
table written by other code is never read (without the source to hash, nothing is shared).
A file's pages are reserved when it is created (a write to a mapped page of a full tmpfs
would kill the process), and the files are deleted once they hold more than ``cap_bytes``
(the processes keep what they have mapped). Any error while creating or mapping a file gives
a table of this process instead: sharing saves time, never changes a number.
"""

from __future__ import annotations

import hashlib
import logging
import mmap
import os
import shutil
import stat
import threading
import time
from importlib import metadata
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)

MISSING = np.uint64(0x7FF8000000000000)
"""XORed into every cell: a zero cell decodes to a quiet NaN, "not computed yet"."""
CHECK_EVERY = 32
"""A process adds up the shared files' sizes after every this many files it created."""
STALE_SECONDS = 3600.0
"""Another version's subdirectory untouched this long is deleted when a process starts sharing."""


def encode(values: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(values, dtype=np.float64).view(np.uint64) ^ MISSING


def decode(cells: np.ndarray) -> np.ndarray:
    return (cells ^ MISSING).view(np.float64)


ENGINE = Path(__file__).parent


def _fingerprint() -> str | None:
    """A hash of the engine's source and of numpy's and scipy's versions: what a table's numbers
    depend on. None without the source (an install of bytecode only): tables written by another
    version could not be told apart."""
    sources = sorted(ENGINE.glob("*.py"))
    if not sources:
        return None
    h = hashlib.sha256()
    for package in ("numpy", "scipy"):
        try:
            h.update(f"{package} {metadata.version(package)};".encode())
        except metadata.PackageNotFoundError:
            h.update(f"{package} -;".encode())
    for path in sources:
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


class _Shared:
    def __init__(self, directory: Path, cap_bytes: int):
        self.directory = directory
        self.cap_bytes = cap_bytes
        self.created = 0
        self.lock = threading.Lock()

    def table(self, key: tuple, k: int) -> np.ndarray | None:
        """The mapped table of ``key`` (created if no process has), or None on any error."""
        name = f"{k}-{hashlib.sha256(repr(key).encode()).hexdigest()[:32]}"
        size = (k + 1) * (k + 1) * 8
        try:
            fd = os.open(self.directory / name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            if st.st_uid != os.getuid() or not stat.S_ISREG(st.st_mode):
                return None
            if st.st_size < size or st.st_blocks * 512 < size:  # new, or another process is creating it
                os.posix_fallocate(fd, 0, size)  # every page reserved now, or an error now
                with self.lock:
                    self.created += 1
                    check = self.created % CHECK_EVERY == 0
                if check:
                    self.trim()
            mm = mmap.mmap(fd, size)
        except (OSError, ValueError):
            return None
        finally:
            os.close(fd)
        return np.frombuffer(mm, dtype=np.uint64).reshape(k + 1, k + 1)

    def usage(self) -> int:
        total = 0
        for entry in os.scandir(self.directory):
            try:
                total += entry.stat(follow_symlinks=False).st_blocks * 512
            except OSError:
                pass
        return total

    def trim(self) -> None:
        """Delete every file once they hold more than the cap: the processes that mapped them
        keep them until they let go, and the next tables start afresh."""
        try:
            if self.usage() <= self.cap_bytes:
                return
            for entry in os.scandir(self.directory):
                try:
                    os.unlink(entry.path)
                except OSError:
                    pass
        except OSError:
            log.warning("could not trim the shared tail tables in %s", self.directory, exc_info=True)


_shared: _Shared | None = None


def _private_root(root: Path) -> bool:
    """Create ``root`` 0700, or accept it only if it is a directory of this user that no one
    else may write or read."""
    try:
        root.mkdir(mode=0o700, parents=False, exist_ok=True)
        st = os.lstat(root)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o077


def _version_dir(root: Path) -> tuple[Path | None, str]:
    """``root``'s subdirectory for this engine version, created, or None and why not."""
    if not hasattr(os, "posix_fallocate"):  # pages could not be reserved: a full disk would kill
        return None, "this system has no posix_fallocate"
    if not _private_root(root):
        return None, f"{root} is not a directory of this user alone (0700)"
    version = _fingerprint()
    if version is None:
        return None, "the engine's source is not installed to tell versions apart"
    sub = root / version
    try:
        sub.mkdir(mode=0o700, exist_ok=True)
    except OSError as exc:
        return None, f"cannot create {sub}: {exc}"
    return sub, ""


def share(directory: str | Path | None, cap_bytes: int = 256 << 20) -> Path | None:
    """From now on, put this process's new tables in ``directory`` (None: in this process
    only). Returns the subdirectory used, or None when sharing is off or refused (logged:
    the directory is not this user's alone, or cannot be created)."""
    global _shared
    _shared = None
    if directory is None:
        return None
    root = Path(directory)
    sub, why = _version_dir(root)
    if sub is None:
        log.warning("tail tables are not shared: %s", why)
        return None
    for other in root.iterdir():  # other versions' tables, unused for an hour
        try:
            if other != sub and time.time() - other.lstat().st_mtime > STALE_SECONDS:
                shutil.rmtree(other, ignore_errors=True)
        except OSError:
            pass
    try:  # a cap the file system can hold: a tmpfs of 64 MB (Docker's /dev/shm) gets 32 MB
        fs = os.statvfs(sub)
        cap_bytes = min(cap_bytes, fs.f_blocks * fs.f_frsize // 2)
    except OSError:
        pass
    _shared = _Shared(sub, cap_bytes)
    _shared.trim()
    return sub


class Table:
    """One ``(k + 1) x (k + 1)`` table of the memo: this process's cells, read first, and the
    shared file's (or None), read only where this process's miss. Lookups stay in the
    process's own memory (its heap's huge pages): the same lookups made in the mapped file,
    4 kB pages touched at random, took a process about 4 % longer than computing every tail
    itself (half of the 134 x 500 board's chunks: 3.06 s of CPU against 2.93-2.96 s)."""

    __slots__ = ("cells", "shared")

    def __init__(self, cells: np.ndarray, shared: np.ndarray | None):
        self.cells = cells
        self.shared = shared

    @property
    def nbytes(self) -> int:
        return self.cells.nbytes

    def get(self, i: np.ndarray, j: np.ndarray) -> np.ndarray:
        """The values at ``(i, j)``, NaN where no process has stored one."""
        got = decode(self.cells[i, j])
        if self.shared is not None:
            miss = np.flatnonzero(np.isnan(got))
            if len(miss):
                found = self.shared[i[miss], j[miss]]
                self.cells[i[miss], j[miss]] = found
                got[miss] = decode(found)
        return got

    def put(self, i: np.ndarray, j: np.ndarray, values: np.ndarray) -> None:
        cells = encode(values)
        self.cells[i, j] = cells
        if self.shared is not None:
            self.shared[i, j] = cells


def new_table(key: tuple, k: int) -> Table:
    """The table ``key``, all missing in this process: backed by a shared file if sharing is
    on and the file could be mapped."""
    shared = _shared
    return Table(np.zeros((k + 1, k + 1), dtype=np.uint64), None if shared is None else shared.table(key, k))
