"""Schema 5: a batch's top tokens are one compressed blob in `result_blobs`, named by its rows;
every reader gets each row's own top tokens back (or None), old rows keep theirs in the column."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from llmscope.engine.types import Result
from llmscope.io.export import export_rows
from llmscope.store.db import Store
from llmscope.store.errors import StoreError
from llmscope.store.schema import SCHEMA_VERSION


def _top(tag: str, n: int = 3) -> list[dict[str, object]]:
    return [{"token": f" {tag}{j}", "id": 100 + j, "prob": 0.5 / (j + 1)} for j in range(n)]


def _row(item: str, top: list[dict[str, object]] | None, error: str | None = None) -> Result:
    return Result(
        item_id=item,
        variant="q1",
        prompt=f"P {item}",
        probs={"yes": 0.6, "no": 0.3},
        other=0.1,
        top_tokens=top,
        prediction="yes",
        gold="yes",
        correct=1.0,
        error=error,
    )


def _setup(st: Store, run: str = "r") -> None:
    st.create_run({"run_id": run, "suite_id": "s", "task": "yesno"})


def _readers(st: Store, run: str) -> dict[str, dict[str, object]]:
    """item_id -> top tokens, through every reader of the store and the export."""
    out: dict[str, dict[str, object]] = {}
    frame = st.results_frame(run, with_items=False)
    out["frame"] = {
        i: (json.loads(t) if isinstance(t, str) else None)
        for i, t in zip(frame.item_id, frame.top_tokens, strict=True)
    }
    joined = st.results_frame(run)
    out["frame_items"] = {
        i: (json.loads(t) if isinstance(t, str) else None)
        for i, t in zip(joined.item_id, joined.top_tokens, strict=True)
    }
    dec = st.results_decoded(run)
    out["decoded"] = dict(zip(dec.item_id, dec.top_tokens, strict=True))
    out["results"] = {r.item_id: r.top_tokens for r in st.results(run)}
    out["detail"] = {i: st.item_detail(run, i).variants[0]["top_tokens"] for i in out["results"]}
    run_rec = st.get_run(run)
    assert run_rec is not None
    out["export"] = {r.item_id: r.top_tokens for r in export_rows(st, run_rec)}
    assert (
        "top_tokens_blob" not in frame.columns and "top_tokens_blob" not in dec.columns
    )  # store-internal
    return out


def test_every_reader_gets_each_rows_own_top_tokens(db_path: Path) -> None:
    want = {"a": _top("a"), "b": None, "c": _top("c", 20), "d": _top("d", 1), "e": None, "f": None}
    with Store(db_path) as st:
        _setup(st)
        # a mixed batch, a batch without any top tokens (no blob), a batch with a repeated key
        # whose second copy (other tokens) is skipped by the key check
        st.write_results(
            "r", [_row("a", want["a"]), _row("b", None), _row("c", want["c"])], start_seq=0
        )
        st.write_results("r", [_row("e", None), _row("f", None)], start_seq=3)
        st.write_results("r", [_row("a", _top("WRONG")), _row("d", want["d"])], start_seq=5)
        assert st.execute(
            "SELECT count(*) FROM results WHERE top_tokens IS NOT NULL"
        ).fetchall() == [(0,)]
        assert st.execute("SELECT count(*) FROM result_blobs").fetchall() == [(2,)]
        for name, got in _readers(st, "r").items():
            assert got == want, name


def test_resume_rescoring_a_deleted_row_with_its_seq_gets_the_new_tokens(db_path: Path) -> None:
    with Store(db_path) as st:
        _setup(st)
        st.write_results(
            "r", [_row("a", _top("a")), _row("b", _top("old"), error="timeout")], start_seq=0
        )
        assert st.delete_error_results("r") == 1
        # the runner resumes at max_seq + 1 = 1: the deleted row's seq, covered by the first blob
        start = st.max_seq("r") + 1
        assert start == 1
        st.write_results("r", [_row("b", _top("new"))], start_seq=start)
        for name, got in _readers(st, "r").items():
            assert got == {"a": _top("a"), "b": _top("new")}, name


def test_a_rolled_back_transaction_leaves_neither_rows_nor_blob(db_path: Path) -> None:
    with Store(db_path) as st:
        _setup(st)
        with pytest.raises(RuntimeError):
            with st.transaction():
                st.write_results("r", [_row("a", _top("a"))])
                raise RuntimeError("killed")
        assert st.execute(
            "SELECT (SELECT count(*) FROM results), (SELECT count(*) FROM result_blobs)"
        ).fetchall() == [(0, 0)]
        st.write_results("r", [_row("a", _top("a2"))])
        assert st.results("r")[0].top_tokens == _top("a2")


def _downgrade_to_schema_4(path: Path) -> None:
    """A schema-4 file: schema 5's additions removed with plain SQL, then a row with its top
    tokens as JSON text in `results.top_tokens`, as the schema-4 writer stored them."""
    with Store(path):
        pass
    con = duckdb.connect(str(path))
    con.execute("DROP TABLE result_blobs")
    con.execute("DROP SEQUENCE result_blob_ids")
    con.execute("ALTER TABLE results DROP COLUMN top_tokens_blob")
    con.execute("DELETE FROM schema_version WHERE version = 5")
    con.execute("INSERT INTO runs (run_id, suite_id, task) VALUES ('r', 's', 'yesno')")
    con.execute(
        "INSERT INTO results (run_id, item_id, variant, seq, top_tokens) VALUES "
        "('r', 'old', 'q1', 0, '[{\"token\":\" yes\",\"id\":5,\"prob\":0.75}]'), "
        "('r', 'none', 'q1', 1, NULL)"
    )
    con.close()


def test_schema_4_file_keeps_its_top_tokens_and_takes_new_rows(db_path: Path) -> None:
    _downgrade_to_schema_4(db_path)
    with Store(db_path) as st:
        assert st.schema_version() == SCHEMA_VERSION == 5
        st.write_results("r", [_row("new", _top("n"))], start_seq=2)
        got = _readers(st, "r")
    want = {"old": [{"token": " yes", "id": 5, "prob": 0.75}], "none": None, "new": _top("n")}
    for name, g in got.items():
        assert g == want, name


def test_a_missing_blob_is_an_error_not_silence(db_path: Path) -> None:
    with Store(db_path) as st:
        _setup(st)
        st.write_results("r", [_row("a", _top("a"))])
        st.execute("DELETE FROM result_blobs")
        with pytest.raises(StoreError, match="top-tokens blob 1, which is missing"):
            st.results("r")


def test_two_stores_with_an_open_transaction_get_distinct_blobs(db_path: Path) -> None:
    a, b = Store(db_path), Store(db_path)
    try:
        _setup(a, "r1")
        _setup(a, "r2")
        with a.transaction():
            a.write_results("r1", [_row("x", _top("one"))])
            b.write_results("r2", [_row("x", _top("two"))])  # another connection, while a's is open
        assert a.execute("SELECT count(DISTINCT blob_id) FROM result_blobs").fetchall() == [(2,)]
        assert a.results("r1")[0].top_tokens == _top("one")
        assert a.results("r2")[0].top_tokens == _top("two")
    finally:
        a.close()
        b.close()


def test_bulk_append_refuses_a_blob_reference(tmp_path: Path) -> None:
    # `top_tokens_blob` names a stored blob; a bulk writer giving one could point a row at
    # another batch's tokens, so only the JSON column is accepted from outside.
    with Store(tmp_path / "a.duckdb") as st:
        _setup(st)
        with pytest.raises(ValueError, match="top_tokens_blob"):
            st.append_results("r", {"item_id": ["a"], "variant": ["q1"], "top_tokens_blob": [1]})
        st.append_results(
            "r", {"item_id": ["a"], "variant": ["q1"], "top_tokens": [json.dumps(_top("a"))]}
        )
        assert _readers(st, "r")["decoded"] == {"a": _top("a")}
