"""Reading a file another process writes: a consistent private copy, taken between two commits.

DuckDB lets one process hold a file read-write, and then keeps read-only openers out. A writer
(`Store` opened for writing) therefore takes an exclusive `flock` on a small side file,
a small lock file (`lock_path`: in the temporary folder), around every statement, commit, checkpoint, open and close; the body of a
`transaction()` runs without it (uncommitted rows live in the writer's memory; its COMMIT takes
it again). A reader that finds the file held takes the same lock shared only while it copies the
database and its `.wal` into a private folder (a reflink where the file system has them), then
opens the copy read-only: DuckDB replays the copied log in memory, so the reader sees every row
committed by the writer's last flush and nothing half-written. The reader waits at most one of
the writer's statements, the writer at most one copy. docs/ARCHITECTURE.md, "Many processes,
one file", has the measurements.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from llmscope.store.errors import StoreError

# How long a reader waits for the writer's current statement before it gives up.
SNAPSHOT_WAIT_S = float(os.environ.get("LLMSCOPE_SNAPSHOT_WAIT", "60"))
_FICLONE = 0x40049409  # linux/fs.h: share the extents of a file (btrfs, XFS); EOPNOTSUPP elsewhere


def lock_path(db: str) -> str:
    """The lock file of database `db` (which must exist): in the temporary folder, named after
    the file's device and inode, so that nothing but the database lies beside it and every
    path to the file (a symlink, a hard link) finds the same lock. A reader and a writer that
    disagree on it (another $TMPDIR) fail safe: the lock file does not name the writer, and the
    reader is refused as before (`take_snapshot`)."""
    st = os.stat(db)
    folder = Path(tempfile.gettempdir()) / "llmscope-snapshot-locks"
    if not folder.is_dir():
        folder.mkdir(mode=0o777, exist_ok=True)
        with contextlib.suppress(OSError):
            folder.chmod(0o1777)  # shared by every user, like /tmp itself
    return str(folder / f"{st.st_dev}-{st.st_ino}.lock")


def _open_lock(db: str) -> int:
    path = lock_path(db)
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except PermissionError:
        return os.open(path, os.O_RDONLY)  # another user's lock file: enough to read


class WriterLock:
    """A `Store`'s thread lock; for a writer also the exclusive hold of the lock file
    while a thread of this process is inside it (outside a transaction's body)."""

    def __init__(self, db: str | None) -> None:
        self._rlock = threading.RLock()
        self._depth = 0
        self._fd: int | None = None
        if db is not None:
            try:
                self._fd = os.open(lock_path(db), os.O_RDWR | os.O_CREAT, 0o666)
            except OSError:  # no lock: readers are refused, as for any other writer
                self._fd = None
        self._held = False
        self._paused = False
        self.waited_s = 0.0  # time spent waiting for readers' copies (bench/readers.py)

    def __enter__(self) -> WriterLock:
        self._rlock.acquire()
        self._depth += 1
        if self._depth == 1 and not self._paused:
            self._take()
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if self._depth == 1:
                self._drop()
        finally:
            self._depth -= 1
            self._rlock.release()

    def _take(self) -> None:
        if self._fd is not None and not self._held:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # a reader is copying the file: wait for its copy
                t = time.perf_counter()
                fcntl.flock(self._fd, fcntl.LOCK_EX)
                self.waited_s += time.perf_counter() - t
            self._held = True

    def _drop(self) -> None:
        if self._fd is not None and self._held:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            self._held = False

    def pause(self) -> None:
        """Inside a transaction's body (the thread lock kept): readers may copy meanwhile."""
        self._paused = True
        self._drop()

    def resume(self) -> None:
        """Before the transaction's COMMIT or ROLLBACK."""
        self._paused = False
        self._take()

    def claim(self) -> None:
        """Say in the lock file that this process writes the file (after DuckDB gave it the
        file's write lock, inside the exclusive hold): a reader copies only a file whose DuckDB
        lock holder is the process named there, so a writer that does not take this lock (plain
        `duckdb`, another tool) keeps readers out as before instead of handing them a torn copy."""
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, f"{os.getpid()}\n".encode(), 0)

    def close(self) -> None:
        if self._fd is not None:
            self._drop()
            os.close(self._fd)
            self._fd = None


def _copy(src: str, dst: str) -> None:
    """Copy one file: a reflink where the file system shares extents, else the bytes."""
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        try:
            fcntl.ioctl(fout.fileno(), _FICLONE, fin.fileno())
            return
        except OSError as e:
            if e.errno not in (
                errno.EOPNOTSUPP,
                errno.ENOTTY,
                errno.EXDEV,
                errno.EINVAL,
                errno.EBADF,
            ):
                raise
        shutil.copyfileobj(fin, fout, 1 << 20)


def _remove_orphans() -> None:
    """Remove the copies of readers that were killed before they could (their PID is gone)."""
    try:
        found = list(Path(tempfile.gettempdir()).glob("llmscope-snapshot-*-*"))
    except OSError:
        return
    for folder in found:
        try:
            pid = int(folder.name.split("-")[2])
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
        except (ValueError, IndexError, OSError):
            continue


class NotOurWriter(Exception):
    """The process holding the file does not take the snapshot lock: no copy can be trusted."""


def take_snapshot(db: str, holder_pid: int | None) -> tuple[Path, dict[str, Any]]:
    """Copy `db` and its `.wal` into a new private folder while no writer statement runs.

    `holder_pid`: the process DuckDB names as the file's writer; NotOurWriter unless that is
    the process the lock file names (`WriterLock.claim`).

    Returns the copy's path (inside the folder; the caller removes the folder) and what was
    measured: `wait_s` (for the writer's statement), `copy_s` (the writer's longest wait) and
    `bytes`. Raises StoreError when the writer does not let go within SNAPSHOT_WAIT_S."""
    _remove_orphans()
    folder = Path(tempfile.mkdtemp(prefix=f"llmscope-snapshot-{os.getpid()}-"))
    copy = folder / Path(db).name
    try:
        fd = _open_lock(db)
    except OSError as e:
        shutil.rmtree(folder, ignore_errors=True)
        raise StoreError(
            f"cannot read {db} while it is written: cannot open {lock_path(db)} ({e})"
        ) from e
    try:
        t0 = time.monotonic()
        delay = 0.002
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() - t0 > SNAPSHOT_WAIT_S:
                    raise StoreError(
                        f"cannot read {db}: its writer held it for more than {SNAPSHOT_WAIT_S:g}s "
                        f"($LLMSCOPE_SNAPSHOT_WAIT); try again"
                    ) from None
                time.sleep(
                    delay
                )  # the writer's one statement; polled so a stopped writer cannot hang us
                delay = min(delay * 2, 0.05)
        t1 = time.monotonic()
        try:
            named = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            if holder_pid is None or named != str(holder_pid):
                raise NotOurWriter(named)
            _copy(db, str(copy))
            size = copy.stat().st_size
            if os.path.exists(db + ".wal"):
                _copy(db + ".wal", str(copy) + ".wal")
                size += os.path.getsize(str(copy) + ".wal")
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
        t2 = time.monotonic()
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    finally:
        os.close(fd)
    return copy, {"wait_s": t1 - t0, "copy_s": t2 - t1, "bytes": size}
