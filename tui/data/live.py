"""What the TUI reads from the live channel: runs executing in another process.

DuckDB lets only one process hold a file that is being written, so the viewer reads
`<db>.live/<run_id>/progress.json` and tails `results.jsonl` instead (`LiveFeed`), and
opens the database (read-only) only once the run has ended. Nothing here imports Textual.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from llmscope.runs.live import BadRecord, LiveRuns, ResultTail, live_dir, read_live, read_snapshot
from llmscope.tui.data.fields import LIGHT_COLS, field_value, is_nan, parse_json

if TYPE_CHECKING:
    from llmscope.tui.data.run_model import RunModel


# -- run list --------------------------------------------------------------------------------
def owner_gone(run: dict[str, Any], published_at: Any = None) -> bool:
    """True when a live-channel run's writer (same host) no longer exists (kill -9: no `ended`):
    no process has its pid, or the one that has it started after the writer last published
    (`published_at`, the progress file's `time`: a recycled pid)."""
    import datetime as dt
    import socket

    from llmscope.store.db import _owner_alive

    pid, host = run.get("owner_pid"), run.get("owner_host")
    if not isinstance(pid, int) or host != socket.gethostname():
        return False
    beat = (
        dt.datetime.fromtimestamp(published_at, dt.UTC).replace(tzinfo=None)
        if isinstance(published_at, int | float)
        else None
    )
    return not _owner_alive(pid, beat)


def live_runs(db: str | Path) -> LiveRuns:
    """Runs published on the live channel, as run-list rows (newest first); `skipped` lists
    the progress files that could not be read (shown with the list)."""
    snaps = read_live(db)
    out = LiveRuns(skipped=snaps.skipped)
    for snap in snaps:
        if not snap["ended"] and owner_gone(snap.get("run") or {}, snap.get("time")):
            snap["ended"] = True  # killed: show it stopped, read it from the database
            snap.setdefault("progress", {})["status"] = "interrupted"
        run = snap.get("run") or {}
        prog = snap.get("progress") or {}
        out.append(
            {
                "run_id": prog.get("run_id") or run.get("run_id"),
                "suite_name": run.get("suite_name"),
                "task": run.get("task"),
                "model": run.get("model"),
                "status": prog.get("status", "running") if snap["ended"] else "running (live)",
                "n_total": prog.get("total"),
                "n_done": prog.get("done"),
                "n_errors": prog.get("errors"),
                "accuracy": prog.get("accuracy"),
                "started_at": run.get("started_at"),
                "live": not snap["ended"],
                "ended": snap["ended"],
                "progress": prog,
                "run": run,
                "dir": snap["dir"],
            }
        )
    return out


def run_signature(db: str | Path, run_id: str) -> tuple[Any, ...]:
    """What changes when any process resumes, extends or re-scores one run: its live channel
    (progress file time, `ended` marker) and the database file and its WAL (size, time).
    A few stat calls, so a dashboard of a stopped run polls it every tick."""
    import os

    out: list[Any] = []
    d = live_dir(db) / run_id
    for p in (d / "progress.json", d / "ended", Path(str(db)), Path(str(db) + ".wal")):
        try:
            st = os.stat(p)
            out.append((st.st_mtime_ns, st.st_size))
        except OSError:
            out.append(None)
    return tuple(out)


def active_live_runs(db: str | Path) -> list[dict[str, Any]]:
    return [r for r in live_runs(db) if r["live"]]


def items_from_suite(run: dict[str, Any]) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """Spec and items of a live run's suite, read from its files (never from the DB)."""
    meta = run.get("meta")
    meta = parse_json(meta) if isinstance(meta, str) else (meta or {})
    sm = (meta or {}).get("suite") or {}
    name = sm.get("spec_path") or sm.get("name")
    if not name:
        return {}, {}
    try:
        from llmscope.data.derived import apply, derivation_of_run
        from llmscope.data.registry import external_suite
        from llmscope.data.suites import load_suite

        base = (sm.get("derived") or {}).get("parent") or sm.get("name")  # other templates
        if external_suite(str(base)) is not None:  # a corpus read from its data path
            suite = load_suite(str(base), sm.get("items_path"))
        else:
            suite = load_suite(name)
        suite = apply(suite, derivation_of_run({"meta": meta}))
        items = {
            it.item_id: {
                "text": it.text,
                "gold": it.gold,
                "options": it.options,
                "fields": it.fields,
            }
            for it in suite.items()
        }
        spec = dict(suite.spec)
        spec.setdefault("group_by", suite.group_by)
        return spec, items
    except Exception:  # a moved or edited suite file only costs the item text
        return {}, {}


def live_to_frame(
    rows: list[dict[str, Any]], start_seq: int, fields: dict[str, str] | None = None
) -> pd.DataFrame:
    """Live-channel rows as light rows (`LIGHT_COLS`, then the task's declared `fields`), as
    the results table would hold them."""
    recs = []
    for i, r in enumerate(rows):
        probs = parse_json(r.get("probs")) or None  # JSON text, as the results table holds it
        pd_ = probs if isinstance(probs, dict) else {}
        rec = {c: r.get(c) for c in LIGHT_COLS}
        rec.update(
            item_id=str(r.get("item_id")),
            seq=start_seq + i,
            probs=probs,
            p_yes=r["p_yes"] if "p_yes" in r else pd_.get("yes"),
            p_no=r["p_no"] if "p_no" in r else pd_.get("no"),
        )
        for k in fields or {}:
            rec[k] = field_value(r, k)
        recs.append(rec)
    return pd.DataFrame(recs, columns=[*LIGHT_COLS, *(fields or {})])


# -- live channel ----------------------------------------------------------------------------
class LiveFeed:
    """Progress and new results of one run executing in another process."""

    def __init__(self, db: str | Path, run_id: str) -> None:
        self.dir = live_dir(db) / run_id
        self.tail = ResultTail(self.dir / "results.jsonl")

    def progress(self) -> dict[str, Any] | None:
        try:
            snap = read_snapshot(self.dir / "progress.json")
        except (OSError, BadRecord):
            return None
        snap["ended"] = (self.dir / "ended").exists() or owner_gone(
            snap.get("run") or {}, snap.get("time")
        )
        return snap

    @property
    def ended(self) -> bool:
        return (self.dir / "ended").exists()

    def read_new(self) -> list[dict[str, Any]]:
        return self.tail.read_new()

    def detail(self, item_id: str) -> list[dict[str, Any]]:
        """Full live rows of one item's variants (prompt, top tokens, option scores, trace)."""
        return self.tail.detail(item_id)


def item_detail_live(model: RunModel, item_id: str, feed: LiveFeed | None = None) -> dict[str, Any]:
    """What the live channel knows about one item: with `feed`, the full rows (as item_detail)."""
    rows = []
    if feed is not None:
        for rec in feed.detail(item_id):
            for k in ("probs", "top_tokens", "option_scores", "extra"):
                rec[k] = parse_json(rec.get(k))
            rows.append(rec)
    if not rows:
        df = model.frame()
        sub = df[df["item_id"] == item_id]
        for light in sub.to_dict("records"):
            rows.append(
                {
                    str(k): (None if not isinstance(v, (dict, list)) and is_nan(v) else v)
                    for k, v in light.items()
                }
            )
    it = model.items.get(item_id) or {}
    return {
        "item_id": item_id,
        "text": it.get("text", ""),
        "fields": it.get("fields") or {},
        "options": it.get("options"),
        "variants": rows,
        "live": True,
    }
