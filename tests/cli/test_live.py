"""The live channel (`<db>.live/<run>/results.jsonl`): one line per (item, variant) after kills
and resumes, viewer counts equal the database's, and each line carries the full stored row.

The kill test runs the real CLI on the saved tiny model, SIGKILLs it while it scores, resumes
it to completion, and compares the live file and a viewer's RunModel with the database.
"""

from __future__ import annotations

import json
import math
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import duckdb
import pytest

from llmscope.engine.progress import Progress
from llmscope.engine.types import Result
from llmscope.runs.live import (
    MAX_LIVE_TEXT,
    LiveWriter,
    ResultTail,
    compact_results,
    live_dir,
    read_live,
)
from llmscope.store.db import Store
from llmscope.tui.data.live import LiveFeed, item_detail_live
from llmscope.tui.data.run_model import RunModel
from llmscope.tui.data.store import item_detail
from tests.helpers.bulk import STORED_COLS
from tests.helpers.cli import cli, cli_cmd, cli_env, record, tiny_model_dir, write_yesno_suite
from tests.helpers.tinymodel import tiny_run_args

DB_COLS = tuple(c for c in STORED_COLS if c != "seq")


def _result(i: int, variant: str = "a", error: str | None = None, p: float = 0.25) -> Result:
    return Result(
        item_id=f"i{i}",
        variant=variant,
        prompt=f"Prompt {i} «{variant}»",
        probs={"yes": p, "no": 0.5},
        other=0.5 - p if p < 0.5 else 0.0,
        top_tokens=[{"token": " yes", "id": 3, "prob": p}],
        option_scores=None,
        prediction="no",
        gold="yes",
        correct=0.0,
        confidence=0.5,
        n_tokens=7,
        latency_ms=1.5,
        error=error,
        extra={"normalised": {"prediction": "no"}, "nan": float("nan")},
    )


def _db_rows(db: Path, run_id: str) -> dict[tuple[str, str], dict[str, Any]]:
    con = duckdb.connect(str(db), read_only=True)
    cur = con.execute(f"SELECT {', '.join(DB_COLS)} FROM results WHERE run_id = ?", [run_id])
    rows = [dict(zip(DB_COLS, r, strict=True)) for r in cur.fetchall()]
    con.close()
    # top tokens are stored as a per-batch blob (schema 5): the store gives them back as JSON text
    with Store(db, read_only=True) as st:
        df = st.results_frame(run_id, with_items=False)
        tops = {
            (i, v): (t if isinstance(t, str) else None)
            for i, v, t in zip(df.item_id, df.variant, df.top_tokens, strict=True)
        }
    for r in rows:
        r["top_tokens"] = tops[(r["item_id"], r["variant"])]
    return {(r["item_id"], r["variant"]): r for r in rows}


def test_live_line_equals_the_stored_row(tmp_path: Path) -> None:
    db = tmp_path / "x.duckdb"
    res = [_result(i) for i in range(3)] + [_result(9, "b", p=float("nan"))]
    with Store(db) as st:
        st.create_run(
            {"run_id": "r", "suite_id": "s@1", "suite_name": "s", "task": "yesno", "n_total": 4}
        )
        st.write_results("r", res)
        live = LiveWriter(db, interval_s=0.0, store=st)
        prog = Progress(run_id="r", total=4)
        live.on_start({"run_id": "r"}, prog)
        live.on_results(res, prog)
        live.on_end(prog)
    stored = _db_rows(db, "r")
    lines = [json.loads(x) for x in (live_dir(db) / "r" / "results.jsonl").read_text().splitlines()]
    assert len(lines) == 4
    for line in lines:
        want = stored[(line["item_id"], line["variant"])]
        assert {k: line[k] for k in DB_COLS} == want  # same values, JSON columns as the same text
    assert json.loads(lines[0]["extra"])["nan"] is None  # NaN is null in both


def test_long_text_is_cut_and_flagged(tmp_path: Path) -> None:
    db = tmp_path / "x.duckdb"
    big = Result(item_id="1", variant="a", prompt="p" * (MAX_LIVE_TEXT + 10))
    live = LiveWriter(db, interval_s=0.0)
    prog = Progress(run_id="r", total=1)
    live.on_start({"run_id": "r"}, prog)
    live.on_results([big], prog)
    line = json.loads((live_dir(db) / "r" / "results.jsonl").read_text())
    assert len(line["prompt"]) == MAX_LIVE_TEXT and line["_truncated"] == ["prompt"]


def test_progress_with_nan_and_odd_text_is_read_not_skipped(tmp_path: Path) -> None:
    """What the writer itself writes is never counted as damage: a NaN accuracy (NaN scores)
    and a run name with a lone surrogate are written by `json.dumps`; the reader lists the run."""
    db = tmp_path / "x.duckdb"
    live = LiveWriter(db, interval_s=0.0)
    prog = Progress(run_id="r", total=2, scored=1, correct=float("nan"))
    live.on_start({"run_id": "r", "suite_name": "s\ud83d"}, prog)
    text = (live_dir(db) / "r" / "progress.json").read_text()
    assert "NaN" in text and "\\ud83d" in text  # what a viewer is handed
    snaps = read_live(db)
    assert snaps.skipped == [] and [s["run"]["run_id"] for s in snaps] == ["r"]
    assert math.isnan(snaps[0]["progress"]["accuracy"])
    assert snaps[0]["run"]["suite_name"] == "s\ud83d"


def test_reader_keeps_latest_line_per_key_and_follows_a_rewrite(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    rows = [
        {"item_id": "1", "variant": "a", "error": "boom"},
        {"item_id": "2", "variant": "a", "error": None},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tail = ResultTail(path)
    model = RunModel({"run_id": "r", "task": "yesno"}, {}, {})
    model.add_live(tail.read_new())
    # a retry of item 1 on resume appends a second line for the same key: it replaces the first
    with open(path, "a") as f:
        f.write(
            json.dumps({"item_id": "1", "variant": "a", "error": None, "prediction": "yes"}) + "\n"
        )
        f.write(
            json.dumps({"item_id": "3", "variant": "a"}) + "\n" + '{"item_id": "4", "va'
        )  # last line cut
    model.add_live(tail.read_new())
    df = model.frame()
    assert sorted(zip(df["item_id"], df["variant"], strict=True)) == [
        ("1", "a"),
        ("2", "a"),
        ("3", "a"),
    ]
    assert df[df["item_id"] == "1"]["error"].isna().all()
    assert [r["prediction"] for r in tail.detail("1")] == ["yes"]
    # the writer of a resumed run rewrites the file (compaction): the reader starts again
    n_before, n_after = compact_results(path, {("1", "a"), ("3", "a")})
    assert (n_before, n_after) == (5, 2)
    model.add_live(tail.read_new())
    assert tail.resets == 1
    assert len(model.frame()) == 3  # nothing counted twice


@pytest.mark.slow
def test_kill_9_and_resume_one_line_per_key(tmp_path: Path) -> None:
    model = tiny_model_dir(tmp_path)
    spec = write_yesno_suite(tmp_path / "suite", 400)
    db = tmp_path / "k.duckdb"
    args = tiny_run_args(spec, model, db, "--batch-size", "4")
    kills = 0
    for _ in range(6):
        proc = subprocess.Popen(
            cli_cmd(*args), env=cli_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        lines_before = _n_lines(db)
        end = time.monotonic() + 120
        # kill once this process has appended some lines (it is scoring, with rows unflushed)
        while time.monotonic() < end and proc.poll() is None and _n_lines(db) < lines_before + 20:
            time.sleep(0.05)
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
            kills += 1
        if kills >= 3:
            break
    assert kills >= 2, "the run finished before it could be killed: the test proves nothing"
    lines_after_kills = _n_lines(db)
    con = duckdb.connect(str(db), read_only=True)
    rows_after_kills = con.execute("SELECT count(*) FROM results").fetchone()[0]  # type: ignore[index]
    con.close()
    done = cli(*args, env=cli_env())
    assert done.returncode == 0, done.stderr
    con = duckdb.connect(str(db), read_only=True)
    (run_id,) = con.execute("SELECT run_id FROM runs").fetchone()  # type: ignore[misc]
    n_db = con.execute("SELECT count(*) FROM results").fetchone()[0]  # type: ignore[index]
    con.close()
    assert n_db == 800
    lines = [
        json.loads(x) for x in (live_dir(db) / run_id / "results.jsonl").read_text().splitlines()
    ]
    keys = [(r["item_id"], r["variant"]) for r in lines]
    assert len(keys) == len(set(keys)) == n_db  # exactly one line per stored (item, variant)
    record(
        "live_channel",
        kills=kills,
        lines_after_kills=lines_after_kills,
        rows_after_kills=rows_after_kills,
        lines_after_resume=len(lines),
        rows_after_resume=n_db,
    )
    stored = _db_rows(db, run_id)
    assert set(keys) == set(stored)
    # a viewer opened now counts what the database holds, and its drill-down equals the stored one
    feed = LiveFeed(db, run_id)
    rm = RunModel({"run_id": run_id, "task": "yesno"}, {}, {})
    rm.add_live(feed.read_new())
    assert len(rm.frame()) == n_db
    with Store(db, read_only=True) as st:
        for item in ("q0", "q123", "q399"):
            live_rows = item_detail_live(rm, item, feed)["variants"]
            db_rows = item_detail(st, run_id, item)["variants"]
            assert len(live_rows) == len(db_rows) == 2
            for lv, dv in zip(live_rows, db_rows, strict=True):
                for k in ("prompt", "probs", "top_tokens", "prediction", "p_yes", "other", "extra"):
                    assert lv[k] == dv[k], (item, k)


def _n_lines(db: Path) -> int:
    n = 0
    for p in live_dir(db).glob("*/results.jsonl"):
        try:
            n += p.read_bytes().count(b"\n")
        except OSError:
            pass
    return n
