"""The live channel that lets `llmscope view` watch a run from another process.

DuckDB admits one writing process per file and blocks other processes from
opening it, so a viewer must never open the database of a running run. Instead
the runner publishes, beside the database, a folder `<db>.live/<run_id>/` with:

- `progress.json`: the latest Progress snapshot plus run metadata, replaced
  atomically (write + rename) at most once a second;
- `results.jsonl`: one JSON line per result with the same columns and values the
  `results` table stores (prompt as rendered, probabilities, top tokens, option scores,
  the normalisation trace in `extra`...), appended in batches as results are handed to
  the store (a viewer tails it from its last offset and indexes lines by key, so the
  drill-down during a run shows what it shows afterwards);
- `ended`: created when the run stops (completed, interrupted or failed).

Exactly one line per (item, variant): a run killed with rows scored but not yet stored
leaves lines the database lacks, and its resume scores those items again. So a writer that
starts on an existing file rewrites it first, keeping for each key stored in the database
its latest line and dropping the rest; readers also keep only the latest line per key
(a retried item replaces its earlier row), so a viewer counts what the database holds.

The viewer only reads these files, so it can neither block nor slow nor corrupt
the writer; the writer never waits for a viewer. When no run is live, the viewer
opens the database read-only.

Readers trust nothing in these files: a progress file that is not UTF-8 JSON of an object
(with `run` and `progress` objects) is skipped, a results line that does not parse as an
object is skipped, and each reader counts what it skipped (`LiveRuns.skipped`,
`ResultTail.skipped`) for the viewer to show; the valid records around a bad one are kept.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from pathlib import Path
from typing import Any

import orjson

from llmscope.engine.progress import Progress
from llmscope.engine.types import Result

# A text cell longer than this is cut in the live channel (the database keeps it whole), so a
# 50 MB generation cannot make every viewer re-read 50 MB; the row then lists it in `_truncated`.
MAX_LIVE_TEXT = 64 * 1024
# Columns of the `results` table that the live channel does not carry (the store assigns them).
_NOT_LIVE = ("run_id", "seq", "top_tokens_blob")  # written_at stays: the plots time the run by it


def live_dir(db: str | Path) -> Path:
    p = Path(db)
    return p.with_name(p.name + ".live")


def result_rows(results: list[Result]) -> list[dict[str, Any]]:
    """The live records of results: the `results` table's columns with the values it stores
    (JSON columns as JSON text, NaN as null), converted by the store's own function."""
    from llmscope.store.db import results_to_arrow

    rows = results_to_arrow("", results, 0, dt.datetime.now()).to_pylist()
    out = []
    for row in rows:
        for k in _NOT_LIVE:
            row.pop(k, None)
        cut = [k for k, v in row.items() if isinstance(v, str) and len(v) > MAX_LIVE_TEXT]
        for k in cut:
            row[k] = row[k][:MAX_LIVE_TEXT]
        if cut:
            row["_truncated"] = cut
        out.append(row)
    return out


def result_row(r: Result) -> dict[str, Any]:
    """The live record of one result (see `result_rows`)."""
    return result_rows([r])[0]


def _key(row: dict[str, Any]) -> tuple[str, str]:
    return (str(row.get("item_id")), str(row.get("variant")))


def compact_results(path: Path, stored: set[tuple[str, str]]) -> tuple[int, int]:
    """Rewrite a results.jsonl so it holds one line per stored key (its latest); atomic.

    Returns (lines before, lines after). Lines that do not parse, and keys the database
    does not hold (scored by a process killed before it stored them), are dropped.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return 0, 0
    latest: dict[tuple[str, str], bytes] = {}
    n = 0
    for line in data.split(b"\n"):
        if not line.strip():
            continue
        n += 1
        try:
            row = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue  # a line cut by a kill
        if isinstance(row, dict) and _key(row) in stored:
            latest.pop(_key(row), None)  # re-insert: dict order follows the latest line
            latest[_key(row)] = line
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(b"".join(v + b"\n" for v in latest.values()))
    os.replace(tmp, path)
    return n, len(latest)


class LiveWriter:
    """A Reporter that publishes progress and results for viewers in other processes."""

    def __init__(self, db: str | Path, *, interval_s: float = 1.0, store: Any = None) -> None:
        """`store`: the run's Store; with it a resumed run's file is compacted to the stored keys."""
        self.base = live_dir(db)
        self.store = store
        self.interval_s = interval_s
        self.dir: Path | None = None
        self._last = 0.0
        self._run: dict[str, Any] = {}
        self._fh: Any = None
        self.disabled = False

    def _safe(self, fn: Any, *a: Any) -> None:
        # The live channel is a convenience: a full disk or read-only folder must not stop a run.
        if self.disabled:
            return
        try:
            fn(*a)
        except OSError:
            self.disabled = True

    def on_start(self, run: dict[str, Any], progress: Progress) -> None:
        def start() -> None:
            self.dir = self.base / progress.run_id
            self.dir.mkdir(parents=True, exist_ok=True)
            (self.dir / "ended").unlink(missing_ok=True)
            self._run = {
                k: (
                    str(v)
                    if v is not None and not isinstance(v, (int, float, str, bool, dict, list))
                    else v
                )
                for k, v in run.items()
            }
            results = self.dir / "results.jsonl"
            if self.store is not None and results.exists():
                compact_results(results, self.store.done_keys(progress.run_id))
            self._fh = open(results, "a", encoding="utf-8")
            self._write_progress(progress, force=True)

        self._safe(start)

    def on_results(self, results: list[Result], progress: Progress) -> None:
        def write() -> None:
            if self._fh is None:
                return
            self._fh.write(
                "".join(
                    json.dumps(row, ensure_ascii=False, default=str) + "\n"
                    for row in result_rows(results)
                )
            )
            self._fh.flush()

        self._safe(write)

    def on_progress(self, progress: Progress) -> None:
        self._safe(self._write_progress, progress)

    def on_message(self, level: str, text: str) -> None:
        pass

    def on_end(self, progress: Progress) -> None:
        def end() -> None:
            self._write_progress(progress, force=True)
            if self._fh is not None:
                self._fh.close()
                self._fh = None
            if self.dir is not None:
                (self.dir / "ended").write_text(progress.status)

        self._safe(end)

    def _write_progress(self, progress: Progress, force: bool = False) -> None:
        now = time.monotonic()
        if self.dir is None or (not force and now - self._last < self.interval_s):
            return
        self._last = now
        data = {
            "run": self._run,
            "progress": progress.to_dict(),
            "pid": os.getpid(),
            "time": time.time(),
        }
        tmp = self.dir / f"progress.json.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(data, default=str))
        os.replace(tmp, self.dir / "progress.json")


class LiveRuns(list[dict[str, Any]]):
    """`read_live`'s snapshots, with the progress files it could not read (`skipped`: paths)."""

    def __init__(self, items: Any = (), skipped: list[str] | None = None) -> None:
        super().__init__(items)
        self.skipped: list[str] = list(skipped or [])


class BadRecord(ValueError):
    """A live-channel record that is not what a writer writes."""


def read_snapshot(path: Path) -> dict[str, Any]:
    """One run's progress.json as a writer wrote it: an object whose `run` and `progress` are
    objects and whose `time` is a number. Raises OSError (absent, unreadable) or BadRecord."""
    data = path.read_bytes()
    try:
        # The standard parser, as the writer is the standard `json.dumps`: it reads the NaN a
        # progress value can hold (an accuracy over NaN scores), which orjson refuses.
        snap = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise BadRecord(f"{path}: not UTF-8 JSON ({e})") from None
    if not isinstance(snap, dict):
        raise BadRecord(f"{path}: a JSON {type(snap).__name__}, not an object")
    for k in ("run", "progress"):
        if not isinstance(snap.get(k, {}), dict):
            raise BadRecord(f"{path}: `{k}` is not an object")
    if not isinstance(snap.get("time", 0), int | float):
        raise BadRecord(f"{path}: `time` is not a number")
    return snap


def read_live(db: str | Path) -> LiveRuns:
    """Snapshots of every run published beside a database (newest first); progress files that
    do not read as a writer writes them are left out and listed in `skipped`."""
    base = live_dir(db)
    out = LiveRuns()
    try:
        dirs = sorted(base.iterdir()) if base.is_dir() else []
    except OSError:
        return out
    for d in dirs:
        p = d / "progress.json"
        try:
            snap = read_snapshot(p)
        except BadRecord:
            out.skipped.append(str(p))
            continue
        except OSError:
            continue  # not there (yet): a run starting, or not a run folder
        snap["ended"] = (d / "ended").exists()
        snap["dir"] = str(d)
        out.append(snap)
    out.sort(key=lambda s: s.get("time", 0), reverse=True)
    return out


def change_signature(db: str | Path) -> tuple[Any, ...]:
    """What changes when a process starts, advances or ends a run on `db`: the runs on its
    live channel (progress file times, `ended` markers) and the database file's size and
    time. Cheap (a few stat calls), so a viewer can poll it without opening the database."""
    base = live_dir(db)
    runs: list[tuple[str, float, bool]] = []
    if base.is_dir():
        for d in sorted(base.iterdir()):
            try:
                t = (d / "progress.json").stat().st_mtime
            except OSError:
                continue
            runs.append((d.name, t, (d / "ended").exists()))
    try:
        st = os.stat(db)
        file: tuple[float, int] = (st.st_mtime, st.st_size)
    except OSError:
        file = (0.0, -1)
    return (file, tuple(runs))


class ResultTail:
    """Reads new lines of a run's `results.jsonl` from where it last stopped.

    Keeps, per (item, variant), where its latest line lies, so `detail(item_id)` can read an
    item's full rows back without holding every row in memory. When the file is replaced
    (a resumed run compacts it) reading starts again from the top and `resets` counts it.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.offset = 0
        self._partial = b""
        self._ino: int | None = None
        self.resets = 0
        self.skipped = 0  # lines that did not parse as a result object (since the last reset)
        self.index: dict[str, dict[str, tuple[int, int]]] = {}

    def read_new(self) -> list[dict[str, Any]]:
        """Rows of lines appended since the last call; one per key (the latest line wins)."""
        try:
            with open(self.path, "rb") as f:
                st = os.fstat(f.fileno())
                if self._ino is not None and (st.st_ino != self._ino or st.st_size < self.offset):
                    self.offset, self._partial, self.index, self.skipped = 0, b"", {}, 0
                    self.resets += 1
                self._ino = st.st_ino
                f.seek(self.offset)
                chunk = f.read()
        except OSError:
            return []
        start = self.offset - len(self._partial)
        self.offset += len(chunk)
        data = self._partial + chunk
        lines = data.split(b"\n")
        self._partial = lines.pop()  # an incomplete last line waits for the next read
        out: dict[tuple[str, str], dict[str, Any]] = {}
        pos = start
        for line in lines:
            at, pos = pos, pos + len(line) + 1
            if not line.strip():
                continue
            try:
                # the standard parser, as the writer is `json.dumps`; bytes that are not UTF-8
                # raise UnicodeDecodeError, a ValueError
                row = json.loads(line)
            except (ValueError, RecursionError):
                self.skipped += 1
                continue
            if not isinstance(row, dict) or "item_id" not in row or "variant" not in row:
                self.skipped += 1
                continue
            key = _key(row)
            self.index.setdefault(key[0], {})[key[1]] = (at, len(line))
            out.pop(key, None)
            out[key] = row
        return list(out.values())

    def detail(self, item_id: str) -> list[dict[str, Any]]:
        """The latest full row of each variant of one item (as the `results` table holds it)."""
        spans = self.index.get(str(item_id)) or {}
        rows = []
        try:
            with open(self.path, "rb") as f:
                for variant in sorted(spans):
                    at, n = spans[variant]
                    f.seek(at)
                    try:
                        row = json.loads(f.read(n))
                    except (ValueError, RecursionError):
                        continue
                    if isinstance(row, dict) and _key(row) == (str(item_id), variant):
                        rows.append(row)
        except OSError:
            return []
        return rows
