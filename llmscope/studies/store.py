"""A study in the database: its record, its cells' membership and state, and the grid
`llmscope study status` and the TUI show (`study_cells`, `live_cells`); docs/studies.md.

The study file and its cells are read and checked in `llmscope/studies/spec.py`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmscope.studies.spec import Cell, Study

STATES = ("done", "done_with_errors", "running", "partial", "error", "not_started")

_TABLES = (
    """CREATE TABLE IF NOT EXISTS studies (
        name VARCHAR, source VARCHAR, spec_hash VARCHAR, record JSON, updated_at TIMESTAMP)""",
    """CREATE TABLE IF NOT EXISTS study_cells (
        study VARCHAR, cell VARCHAR, position INTEGER, suite VARCHAR, model VARCHAR, levels JSON,
        run_id VARCHAR, state VARCHAR, error VARCHAR, updated_at TIMESTAMP)""",
)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


def ensure_tables(store: Any) -> None:
    """Create the study tables in a file opened for writing (llmscope's own schema is untouched)."""
    for sql in _TABLES:
        store.execute(sql)


def _has_tables(store: Any) -> bool:
    row = store.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_name IN ('studies', 'study_cells')"
    ).fetchone()
    return bool(row and row[0] == 2)


class StudyConflict(Exception):
    """Another study file already holds this study name in the database (one line)."""


def study_conflict(store: Any, study: Study) -> str | None:
    """Why `study` cannot be recorded under its name: the database holds a study of that name
    from another file with other content (None: the same study, perhaps edited or moved).

    A study name is how `study status NAME`, the TUI and `meta.studies` find cells; two files
    sharing it would mix their cells, so the second is refused unless it replaces the first."""
    if not _has_tables(store):
        return None
    row = store.execute(
        "SELECT source, spec_hash FROM studies WHERE name = ?", [study.name]
    ).fetchone()
    if row is None or row[1] == study.spec_hash:
        return None  # a study file moved (same content) is the same study
    source = str(row[0] or "")
    if source and Path(source).resolve() == study.path.resolve():
        return None  # the same file, edited: its cells are kept or dropped key by key
    return (
        f"study {study.name!r} in {store.path} was recorded from another file, {source} "
        f"(spec {row[1]}); give this study another `name:` in {study.path}, or run it with "
        f"--replace to make this file the study {study.name!r} (the other file's cells leave "
        "the study; their runs stay)"
    )


def record_study(store: Any, study: Study, *, replace: bool = False) -> None:
    """Record the study and its cells (cells already recorded keep their run and state).

    Raises StudyConflict when another file holds the name (`study_conflict`), unless
    `replace`: then that study's cells are dropped and its runs no longer list it."""
    ensure_tables(store)
    conflict = study_conflict(store, study)
    if conflict is not None and not replace:
        raise StudyConflict(conflict)
    if conflict is not None:
        store.execute("DELETE FROM study_cells WHERE study = ?", [study.name])
        _untag_runs(store, study.name)
    store.execute("DELETE FROM studies WHERE name = ?", [study.name])
    store.execute(
        "INSERT INTO studies VALUES (?, ?, ?, ?, ?)",
        [
            study.name,
            str(study.path.resolve()),
            study.spec_hash,
            json.dumps(study.record()),
            _now(),
        ],
    )
    keep = {c.key for c in study.cells}
    for (gone,) in store.execute(
        "SELECT cell FROM study_cells WHERE study = ?", [study.name]
    ).fetchall():
        if str(gone) not in keep:  # a cell the edited file no longer has (its run stays a run)
            store.execute(
                "DELETE FROM study_cells WHERE study = ? AND cell = ?", [study.name, gone]
            )
    have = {
        str(r[0])
        for r in store.execute(
            "SELECT cell FROM study_cells WHERE study = ?", [study.name]
        ).fetchall()
    }
    for c in study.cells:
        if c.key in have:
            store.execute(
                "UPDATE study_cells SET position = ? WHERE study = ? AND cell = ?",
                [c.position, study.name, c.key],
            )
        else:
            store.execute(
                "INSERT INTO study_cells VALUES (?, ?, ?, ?, ?, ?, NULL, 'not_started', NULL, ?)",
                [
                    study.name,
                    c.key,
                    c.position,
                    c.suite.label,
                    c.model.label,
                    json.dumps(c.levels),
                    _now(),
                ],
            )


def record_cell(
    store: Any,
    study: str,
    cell: str,
    state: str,
    run_id: str | None = None,
    error: str | None = None,
) -> None:
    """A cell's latest outcome; a run id, once known, is kept when a later attempt fails early."""
    store.execute(
        "UPDATE study_cells SET state = ?, error = ?, run_id = coalesce(?, run_id), updated_at = ? "
        "WHERE study = ? AND cell = ?",
        [state, error, run_id, _now(), study, cell],
    )


def tag_run(store: Any, run_id: str, study: str, cell: str) -> None:
    """Add `study -> cell` to the run's `meta.studies` (a run may belong to several studies)."""
    run = store.get_run(run_id)
    if run is None:
        return
    meta = run.get("meta") if isinstance(run.get("meta"), dict) else {}
    studies = dict(meta.get("studies") or {}) if isinstance(meta.get("studies"), dict) else {}
    if studies.get(study) == cell:
        return
    studies[study] = cell
    store.update_run(run_id, meta={**meta, "studies": studies})


def _untag_runs(store: Any, study: str) -> None:
    """Remove `study` from every run's `meta.studies` (the runs themselves stay)."""
    from llmscope.store.db import decode_json

    for rid, raw in store.execute(
        "SELECT run_id, json_extract(meta, '$.studies') FROM runs "
        "WHERE json_extract(meta, '$.studies') IS NOT NULL"
    ).fetchall():
        member = decode_json(raw) if isinstance(raw, str) else raw
        if not isinstance(member, dict) or study not in member:
            continue
        run = store.get_run(str(rid))
        meta = run.get("meta") if run is not None else None
        if isinstance(meta, dict):
            studies = {k: v for k, v in (meta.get("studies") or {}).items() if k != study}
            store.update_run(str(rid), meta={**meta, "studies": studies})


@dataclass(frozen=True)
class CellRow:
    """One cell of a study as `study status` and the TUI show it."""

    study: str
    cell: str
    position: int
    suite: str
    model: str
    levels: dict[str, str]
    state: str  # one of STATES
    run_id: str | None = None
    n_done: int = 0  # results stored (errors included)
    n_errors: int = 0
    n_total: int | None = None  # results the run asks for
    metric: str | None = None  # the run's headline metric (the report's)
    value: float | None = None
    ci95: tuple[float, float] | None = None
    interval_method: str | None = None
    n: int | None = None
    error: str | None = None
    # The items the cell reports on: the study's item set for its suite (the first `limit`
    # items, the least limit of the suite's cells), and how many items the run holds; a run
    # that holds more (a reused longer run) is read on the study's items only.
    n_items: int | None = None
    run_items: int | None = None

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["ci95"] = list(self.ci95) if self.ci95 is not None else None
        return d


def study_names(store: Any) -> list[str]:
    if not _has_tables(store):
        return []
    return [
        str(r[0])
        for r in store.execute("SELECT DISTINCT name FROM studies ORDER BY name").fetchall()
    ]


def study_record(store: Any, name: str) -> dict[str, Any] | None:
    if not _has_tables(store):
        return None
    row = store.execute("SELECT record FROM studies WHERE name = ?", [name]).fetchone()
    if row is None:
        return None
    from llmscope.store.db import decode_json

    rec = decode_json(row[0]) if isinstance(row[0], str) else row[0]
    return rec if isinstance(rec, dict) else None


@dataclass(frozen=True)
class LiveCell:
    """A study cell's run as its live channel shows it (`<db>.live/<run>/progress.json`)."""

    cell: str
    run_id: str
    done: int
    total: int
    errors: int
    status: str | None
    ended: bool  # the run's writer marked it ended (False while running, or after kill -9)
    pid: int | None


@dataclass(frozen=True)
class LiveStart:
    """A cell as `study run` found it before running anything (published with the grid)."""

    state: str  # done | done_with_errors | partial (a run to resume) | error
    run_id: str | None = None
    n_done: int = 0
    n_errors: int = 0
    n_total: int | None = None
    error: str | None = None


def _manifest(db: str | Path, name: str) -> Path:
    from llmscope.runs.live import live_dir

    digest = hashlib.sha256(name.encode()).hexdigest()[:12]
    return live_dir(db) / f"study-{digest}.json"


def publish_study(db: str | Path, study: Study, start: dict[str, LiveStart]) -> None:
    """Write the study's whole grid beside the database's live channel
    (`<db>.live/study-<hash>.json`): every cell, and what `study run` found for it before
    running (reused, to resume, failed). A reader that cannot open the file while the study
    writes shows every cell from it, the running ones from their runs' live channels."""
    path = _manifest(db, study.name)
    body = {
        "study": study.name,
        "source": str(study.path.resolve()),
        "cells": [
            {
                "cell": c.key,
                "position": c.position,
                "suite": c.suite.label,
                "model": c.model.label,
                "levels": dict(c.levels),
                "start": dataclasses.asdict(start[c.key]) if c.key in start else None,
            }
            for c in study.cells
        ],
    }
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(body), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        pass  # the live view then shows the cells on the channel only; the run goes on


def published_study(db: str | Path, name: str) -> dict[str, Any] | None:
    """The grid `publish_study` wrote for `name` (None: none, or not readable as one)."""
    try:
        body = json.loads(_manifest(db, name).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(body, dict) or body.get("study") != name:
        return None
    cells = body.get("cells")
    if not isinstance(cells, list) or not all(
        isinstance(c, dict) and isinstance(c.get("cell"), str) for c in cells
    ):
        return None
    return body


def published_study_names(db: str | Path) -> list[str]:
    """Studies whose grid is published beside `db` (`publish_study`)."""
    from llmscope.runs.live import live_dir

    names: list[str] = []
    try:
        files = sorted(live_dir(db).glob("study-*.json"))
    except OSError:
        return names
    for f in files:
        try:
            body = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(body, dict) and isinstance(body.get("study"), str):
            names.append(body["study"])
    return names


def live_cells(db: str | Path, name: str) -> dict[str, LiveCell]:
    """Cell key -> the newest live snapshot of its run, read from the live channel beside `db`
    without opening the database: usable while `study run` holds the file for writing."""
    from llmscope.runs.live import read_live

    newest: dict[str, tuple[float, LiveCell]] = {}
    for snap in read_live(db):
        run = snap.get("run") or {}
        meta = run.get("meta") if isinstance(run, dict) else None
        studies = meta.get("studies") if isinstance(meta, dict) else None
        key = studies.get(name) if isinstance(studies, dict) else None
        prog = snap.get("progress") or {}
        if not isinstance(key, str) or not isinstance(prog, dict):
            continue
        at = float(snap.get("time") or 0.0)
        if key in newest and newest[key][0] >= at:
            continue
        pid = snap.get("pid")
        newest[key] = (
            at,
            LiveCell(
                key,
                str(prog.get("run_id") or run.get("run_id")),
                int(prog.get("done") or 0),
                int(prog.get("total") or 0),
                int(prog.get("errors") or 0),
                prog.get("status"),
                bool(snap.get("ended")),
                int(pid) if isinstance(pid, int) else None,
            ),
        )
    return {k: v for k, (_, v) in newest.items()}


def study_cells(
    store: Any, name: str, cells: list[Cell] | None = None, *, metrics: bool = True
) -> list[CellRow]:
    """A study's cells with state, counts and headline metric (from the metrics pipeline, the
    function `llmscope report` uses, running only the producers a headline comes from:
    `analysis.headline.run_headline`; its cache beside the file makes a finished cell cheap).

    `cells`: the cells of a study file (`study status FILE`); default: those recorded for `name`.
    `metrics=False` skips the metrics (state and counts only). `store` may be a database path,
    opened read-only for the call (StoreLocked while a writer holds it: see `live_cells`)."""
    if isinstance(store, (str, Path)):
        from llmscope.store.db import Store

        opened = Store(str(store), read_only=True)
        try:
            return study_cells(opened, name, cells, metrics=metrics)
        finally:
            opened.close()
    from llmscope.analysis.headline import run_headline
    from llmscope.store.db import decode_json, effective_status

    recorded: dict[str, dict[str, Any]] = {}
    if _has_tables(store):
        cols = ("cell", "position", "suite", "model", "levels", "run_id", "state", "error")
        for values in store.execute(  # plain rows: a NULL stays None (a DataFrame makes it NaN)
            f"SELECT {', '.join(cols)} FROM study_cells WHERE study = ? ORDER BY position", [name]
        ).fetchall():
            r = dict(zip(cols, values, strict=True))
            recorded[str(r["cell"])] = r
    # runs tagged with this study in their meta (also when the tables were lost)
    tagged: dict[str, str] = {}
    for rid, raw in store.execute(
        "SELECT run_id, json_extract(meta, '$.studies') FROM runs WHERE json_extract(meta, '$.studies') IS NOT NULL "
        "ORDER BY started_at"
    ).fetchall():
        member = decode_json(raw) if isinstance(raw, str) else raw
        if isinstance(member, dict) and isinstance(member.get(name), str):
            tagged[member[name]] = str(rid)
    if cells is not None:
        shape = [(c.key, c.position, c.suite.label, c.model.label, dict(c.levels)) for c in cells]
    else:
        shape = [
            (
                k,
                int(r["position"]),
                str(r["suite"]),
                str(r["model"]),
                decode_json(r["levels"])
                if isinstance(r["levels"], str)
                else dict(r["levels"] or {}),
            )
            for k, r in recorded.items()
        ]
    run_ids = {k: (recorded.get(k) or {}).get("run_id") or tagged.get(k) for k, *_ in shape}
    wanted = sorted({str(r) for r in run_ids.values() if r})
    runs: dict[str, dict[str, Any]] = {}
    counts: dict[str, tuple[int, int]] = {}
    if wanted:
        marks = ", ".join("?" for _ in wanted)
        for rid, n, ne in store.execute(
            f"SELECT run_id, count(*), count(error) FROM results WHERE run_id IN ({marks}) GROUP BY run_id",
            wanted,
        ).fetchall():
            counts[str(rid)] = (int(n), int(ne))
        for rid in wanted:
            run = store.get_run(rid)
            if run is not None:
                runs[rid] = run
    limits = _suite_limits(store, name, cells, shape, run_ids, runs)
    out: list[CellRow] = []
    for cell in shape:  # (key, position, suite, model, levels): a CellRow's head
        key, suite = cell[0], cell[2]
        rec = recorded.get(key) or {}
        rid = run_ids.get(key)
        run = runs.get(str(rid)) if rid else None
        err = rec.get("error") if isinstance(rec.get("error"), str) else None
        if run is None:
            state = "error" if rec.get("state") == "error" else "not_started"
            out.append(CellRow(name, *cell, state, None, error=err))
            continue
        n_done, n_err = counts.get(str(rid), (0, 0))
        status = effective_status(run)
        total = int(run.get("n_total") or 0) or None
        sel = _item_selection(store, run, limits.get(suite), total)
        held = _distinct_items(store, str(rid))
        if sel is not None:
            # the run holds items outside the study's: counts and metric on the study's only
            n_done, n_err, total = sel.n_done, sel.n_errors, sel.n_total
        complete = total is not None and n_done >= total
        if sel is not None and complete and status != "running":
            status = "completed_with_errors" if n_err else "completed"
        if status == "running":
            state = "running"
        elif complete and status in ("completed", "completed_with_errors"):
            state, err = (
                ("done_with_errors" if n_err else "done"),
                None,
            )  # also when finished elsewhere
        elif rec.get("state") == "error" and err:
            state = "error"  # the latest attempt failed (the run keeps what it stored)
        elif status == "failed":
            state, err = "error", err or run.get("error")
        else:
            state = "partial"
        row = CellRow(
            name,
            *cell,
            state,
            str(rid),
            n_done,
            n_err,
            total,
            error=err,
            n_items=sel.n_items if sel is not None else held,
            run_items=held,
        )
        if metrics and n_done > n_err:
            h = run_headline(store, run, sel.item_ids if sel is not None else None)
            if h is not None:
                ci = h.ci95
                row = dataclasses.replace(
                    row,
                    metric=h.name,
                    value=h.value,
                    ci95=(ci[0], ci[1]) if ci else None,
                    interval_method=h.interval_method if ci else None,
                    n=h.n,
                )
        out.append(row)
    return sorted(out, key=lambda r: r.position)


@dataclass(frozen=True)
class ItemSelection:
    """A run read on a study's items: the first `limit` items of its suite."""

    item_ids: frozenset[str]
    n_items: int  # of those, items the run holds results for
    n_done: int
    n_errors: int
    n_total: int  # results asked for on those items


def _cell_limits(
    store: Any,
    name: str,
    cells: list[Cell] | None,
    run_ids: dict[str, Any],
    runs: dict[str, dict[str, Any]],
) -> dict[str, int | None]:
    """Cell key -> its item limit: from the study file, else as recorded with the study, else
    as its run recorded it (a study recorded before limits were)."""
    if cells is not None:
        return {c.key: c.options.get("limit") for c in cells}
    rec = study_record(store, name) or {}
    if isinstance(rec.get("limits"), dict):
        return {str(k): v if isinstance(v, int) else None for k, v in rec["limits"].items()}
    out: dict[str, int | None] = {}
    for key, rid in run_ids.items():
        run = runs.get(str(rid)) if rid else None
        lim = ((run or {}).get("options") or {}).get("limit")
        out[key] = lim if isinstance(lim, int) else None
    return out


def _suite_limits(
    store: Any,
    name: str,
    cells: list[Cell] | None,
    shape: list[tuple[str, int, str, str, dict[str, str]]],
    run_ids: dict[str, Any],
    runs: dict[str, dict[str, Any]],
) -> dict[str, int | None]:
    """Suite label -> the item count every cell of that suite reports on (the least limit of
    its cells; None: every item), so that a suite's cells are read on one item set."""
    limits = _cell_limits(store, name, cells, run_ids, runs)
    out: dict[str, int | None] = {}
    for key, _pos, suite, *_ in shape:
        lim = limits.get(key)
        if suite not in out:
            out[suite] = lim
        elif lim is not None:
            cur = out[suite]
            out[suite] = lim if cur is None else min(cur, lim)
    return out


def _distinct_items(store: Any, run_id: str) -> int:
    row = store.execute(
        "SELECT count(DISTINCT item_id) FROM results WHERE run_id = ?", [run_id]
    ).fetchone()
    return int(row[0]) if row else 0


def _item_selection(
    store: Any, run: dict[str, Any], limit: int | None, total: int | None
) -> ItemSelection | None:
    """The run on the first `limit` items of its suite, when it holds results for other items
    too (None: the run holds only the study's items, read as it is)."""
    if limit is None:
        return None
    rid, sid = str(run["run_id"]), str(run.get("suite_id"))
    ids = frozenset(
        str(r[0])
        for r in store.execute(
            "SELECT item_id FROM items WHERE suite_id = ? ORDER BY idx LIMIT ?", [sid, int(limit)]
        ).fetchall()
    )
    row = store.execute(
        "SELECT count(*) FILTER (WHERE NOT in_set), count(DISTINCT item_id) FILTER (WHERE in_set), "
        "count(*) FILTER (WHERE in_set), count(error) FILTER (WHERE in_set) FROM ("
        "SELECT item_id, error, item_id IN (SELECT item_id FROM items WHERE suite_id = ? "
        "ORDER BY idx LIMIT ?) AS in_set FROM results WHERE run_id = ?)",
        [sid, int(limit), rid],
    ).fetchone()
    outside, n_items, n_done, n_err = (int(x or 0) for x in row) if row else (0, 0, 0, 0)
    if not outside:
        return None
    # Results asked for on the study's items: the run's work is item-major with the same
    # units per item (prompt variants x the task's expansions), so the run's own count scaled
    # by the items; a finished run holds every unit of each item it scored.
    run_items = int(
        ((run.get("options") or {}).get("limit") or 0)
        or store.execute("SELECT count(*) FROM items WHERE suite_id = ?", [sid]).fetchone()[0]
    )
    per_item = (total or 0) / run_items if run_items else 0.0
    asked = round(per_item * min(len(ids), run_items)) if per_item else n_done
    return ItemSelection(ids, n_items, n_done, n_err, max(asked, n_done))


def live_cell_rows(
    db: str | Path,
    name: str,
    shape: list[tuple[str, int, str, str, dict[str, str]]] | None = None,
) -> list[CellRow]:
    """A study's cells from their runs' live channels (`live_cells`): state and counts, no
    metric (the pipeline reads the database, which the writer holds). `shape`: the cells as
    (key, position, suite, model, levels), from the study file or an earlier read; default:
    the grid `study run` published (`publish_study`), else the cells that have a run on the
    live channel (levels read from their keys). A cell with no run on the channel shows what
    `study run` found for it before running (reused, to resume, failed), else `not_started`."""
    live = live_cells(db, name)
    published = published_study(db, name)
    starts: dict[str, dict[str, Any]] = {}
    if published is not None:
        for c in published["cells"]:
            if isinstance(c.get("start"), dict):
                starts[c["cell"]] = c["start"]
    if shape is None and published is not None:  # the whole grid, as `study run` published it
        shape = [
            (
                str(c["cell"]),
                int(c.get("position") or 0),
                str(c.get("suite") or ""),
                str(c.get("model") or ""),
                {str(k): str(v) for k, v in (c.get("levels") or {}).items()},
            )
            for c in published["cells"]
        ]
    if shape is None:
        shape = []
        for i, k in enumerate(sorted(live)):
            parts = k.split(" | ")
            levels = dict(p.split("=", 1) for p in parts[2:] if "=" in p)
            shape.append((k, i, parts[0], parts[1] if len(parts) > 1 else "", levels))
    rows = []
    for cell in shape:  # (key, position, suite, model, levels): a CellRow's head
        key = cell[0]
        lc = live.get(key)
        st = starts.get(key)
        if lc is not None and st is not None and st.get("run_id") not in (None, lc.run_id):
            lc = None  # the channel's snapshot is of another run than this study's cell
        if lc is None and st is not None:
            rows.append(
                CellRow(
                    name,
                    *cell,
                    str(st.get("state") or "not_started"),
                    st.get("run_id"),
                    int(st.get("n_done") or 0),
                    int(st.get("n_errors") or 0),
                    st.get("n_total"),
                    error=st.get("error"),
                )
            )
            continue
        if lc is None:
            rows.append(CellRow(name, *cell, "not_started"))
            continue
        if not lc.ended:
            state = "running"
        elif lc.status in ("completed", "completed_with_errors") and lc.done >= lc.total:
            state = "done_with_errors" if lc.errors else "done"
        else:
            state = "partial"
        rows.append(CellRow(name, *cell, state, lc.run_id, lc.done, lc.errors, lc.total))
    return rows
