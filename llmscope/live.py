"""The live channel that lets `llmscope view` watch a run from another process.

DuckDB admits one writing process per file and blocks other processes from
opening it, so a viewer must never open the database of a running run. Instead
the runner publishes, beside the database, a folder `<db>.live/<run_id>/` with:

- `progress.json`: the latest Progress snapshot plus run metadata, replaced
  atomically (write + rename) at most once a second;
- `results.jsonl`: one compact JSON line per stored result, appended in batches
  after they are handed to the store (a viewer tails it from its last offset);
- `ended`: created when the run stops (completed, interrupted or failed).

The viewer only reads these files, so it can neither block nor slow nor corrupt
the writer; the writer never waits for a viewer. When no run is live, the viewer
opens the database read-only.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from llmscope.engine.progress import Progress
from llmscope.engine.types import Result


def live_dir(db: str | Path) -> Path:
    p = Path(db)
    return p.with_name(p.name + ".live")


def result_row(r: Result) -> dict[str, Any]:
    """The compact per-result record published on the live channel (and used by export)."""
    return {
        "item_id": r.item_id,
        "variant": r.variant,
        "prediction": r.prediction,
        "gold": r.gold,
        "correct": r.correct,
        "confidence": r.confidence,
        "probs": r.probs,
        "other": r.other,
        "error": r.error,
        "n_tokens": r.n_tokens,
        "latency_ms": r.latency_ms,
    }


class LiveWriter:
    """A Reporter that publishes progress and results for viewers in other processes."""

    def __init__(self, db: str | Path, *, interval_s: float = 1.0) -> None:
        self.base = live_dir(db)
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
            self._run = {k: (str(v) if v is not None and not isinstance(v, (int, float, str, bool, dict, list)) else v)
                         for k, v in run.items()}
            self._fh = open(self.dir / "results.jsonl", "a", encoding="utf-8")
            self._write_progress(progress, force=True)

        self._safe(start)

    def on_results(self, results: list[Result], progress: Progress) -> None:
        def write() -> None:
            if self._fh is None:
                return
            self._fh.write("".join(json.dumps(result_row(r), default=str) + "\n" for r in results))
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
        data = {"run": self._run, "progress": progress.to_dict(), "pid": os.getpid(), "time": time.time()}
        tmp = self.dir / f"progress.json.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(data, default=str))
        os.replace(tmp, self.dir / "progress.json")


def read_live(db: str | Path) -> list[dict[str, Any]]:
    """Snapshots of every run published beside a database (newest first)."""
    base = live_dir(db)
    out: list[dict[str, Any]] = []
    if not base.is_dir():
        return out
    for d in base.iterdir():
        p = d / "progress.json"
        try:
            snap = json.loads(p.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        snap["ended"] = (d / "ended").exists()
        snap["dir"] = str(d)
        out.append(snap)
    out.sort(key=lambda s: s.get("time", 0), reverse=True)
    return out


class ResultTail:
    """Reads new lines of a run's `results.jsonl` from where it last stopped."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.offset = 0
        self._partial = b""

    def read_new(self) -> list[dict[str, Any]]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                chunk = f.read()
        except OSError:
            return []
        self.offset += len(chunk)
        data = self._partial + chunk
        lines = data.split(b"\n")
        self._partial = lines.pop()  # an incomplete last line waits for the next read
        out = []
        for line in lines:
            if line.strip():
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
        return out
