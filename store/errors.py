"""The store's errors, and DuckDB's errors explained for the user.

A locked, read-only or full file, a damaged write log, a file written by a newer llmscope.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

import duckdb


class StoreError(Exception):
    """A database problem explained for the user."""


class SchemaTooNew(StoreError):
    pass


class StoreLocked(StoreError):
    """Another process holds the file; `pid` is the holder when DuckDB names it."""

    def __init__(self, message: str, pid: int | None = None) -> None:
        super().__init__(message)
        self.pid = pid


# How often a writer folds its WAL into the file (`Store._maybe_checkpoint`): what a damaged
# or deleted WAL can cost. A checkpoint of a results table rewrites its open row group (tens of
# milliseconds), so this is about time, not rows (bench/store_bench.py, RELIABILITY.md).
CHECKPOINT_EVERY_S = float(os.environ.get("LLMSCOPE_CHECKPOINT_S", "30"))


def explain(e: Exception, path: str, action: str) -> StoreError:
    """The StoreError to raise for DuckDB error `e` met while `action` on `path`."""
    msg = str(e)
    low = msg.lower()
    wal = _explain_wal(e, path)
    if wal is not None:
        return wal
    if "lock" in low and ("conflicting" in low or "could not set lock" in low):
        m = re.search(r"\(PID (\d+)\)", msg)
        who = f"PID {m.group(1)}; " if m else ""
        return StoreLocked(
            f"{path} is in use by another process ({who}DuckDB allows one writer). "
            "Wait for it to finish, use another --db file, or watch it with `llmscope view`.",
            int(m.group(1)) if m else None,
        )
    if "read-only" in low or "readonly" in low or "permission denied" in low:
        return StoreError(
            f"cannot write {path}: the file or its folder is read-only ({msg.splitlines()[0]})"
        )
    if (
        "no space" in low
        or "disk is full" in low
        or "could not write" in low
        or "not enough space" in low
    ):
        return StoreError(
            f"cannot write {path}: the disk is full ({msg.splitlines()[0]}); nothing was half-written"
        )
    if "not a valid duckdb" in low or "unable to open" in low or "corrupt" in low:
        return StoreError(
            f"{path} is not a DuckDB database llmscope can open: {msg.splitlines()[0]}"
        )
    return StoreError(f"database error while {action} ({path}): {msg.splitlines()[0]}")


def _explain_wal(e: Exception, path: str) -> StoreError | None:
    """A WAL that does not replay (a flipped byte after a crash): what is kept, and how."""
    msg = str(e)
    if "replaying wal" not in msg.lower():
        return None
    wal = path + ".wal"
    m = re.search(r"byte position (\d+)", msg)
    cut = int(m.group(1)) if m else None
    keep = _rows_with_wal_cut(path, cut) if cut is not None else None
    how = (
        f"keep a copy (`cp {wal} {wal}.damaged`), then cut the log where the damage starts: "
        f"`python -c \"import os; os.truncate('{wal}', {cut})\"`"
        if cut is not None
        else f"move the log aside (`mv {wal} {wal}.damaged`)"
    )
    kept = ""
    if keep is not None:
        runs = ", ".join(f"{rid}: {n}" for rid, n in keep)
        kept = f"; the file then holds {sum(n for _, n in keep)} result rows ({runs or 'no runs'})"
    return StoreError(
        f"{path} cannot be opened: its write log {wal} is damaged ({msg.splitlines()[0][-160:]}). "
        f"To recover, {how}, and open the file again{kept}. Writes after the damage are lost "
        f"(a running run folds its log into the file every {CHECKPOINT_EVERY_S:g} s); "
        f"`llmscope run --resume` scores them again"
    )


def _rows_with_wal_cut(path: str, cut: int) -> list[tuple[str, int]] | None:
    """The result rows per run that `path` holds with its WAL cut at byte `cut`, read from a
    scratch copy (a hard link of the file and the cut log, in a folder beside it) so that the
    original is not touched; None where that cannot be done."""
    folder = Path(path).parent
    try:
        with tempfile.TemporaryDirectory(dir=folder, prefix=".llmscope-recover-") as d:
            probe = Path(d) / "probe.duckdb"
            os.link(path, probe)
            with open(path + ".wal", "rb") as src, open(str(probe) + ".wal", "wb") as dst:
                left = cut
                while left > 0 and (chunk := src.read(min(left, 1 << 20))):
                    dst.write(chunk)
                    left -= len(chunk)
            con = duckdb.connect(str(probe), read_only=True)
            try:
                rows = con.execute(
                    "SELECT run_id, count(*) FROM results GROUP BY 1 ORDER BY 1"
                ).fetchall()
            finally:
                con.close()
            return [(str(r[0]), int(r[1])) for r in rows]
    except (OSError, duckdb.Error):
        return None
