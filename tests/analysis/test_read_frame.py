"""The metrics pipeline's rows read through Arrow equal DuckDB's own frame, dtypes included."""

from __future__ import annotations

import pandas as pd
import pytest

from llmscope.analysis.queries import RESULT_COLUMNS, _read_frame
from llmscope.store.db import Store
from tests.helpers.bulk import finished_run
from tests.helpers.mixed import write_labels_db, write_mixed_db, write_yesno_db

_SQL = f"SELECT {', '.join(c for c in RESULT_COLUMNS if c != 'run_id')} FROM results WHERE run_id = ? ORDER BY seq"


@pytest.mark.parametrize("writer", [write_mixed_db, write_labels_db, write_yesno_db])
def test_same_frame_as_query_df(tmp_path, writer):
    db = writer(tmp_path / "m.duckdb")
    with Store(db, read_only=True) as st:
        runs = [r[0] for r in st.execute("SELECT run_id FROM runs").fetchall()]
        for rid in [*runs, "no-such-run"]:  # the last: an empty result
            for sql in (_SQL, "SELECT error, item_id, option_scores FROM results WHERE run_id = ?"):
                want = st.query_df(sql, [rid])
                got = _read_frame(st, sql, [rid])
                pd.testing.assert_frame_equal(got, want, check_dtype=True, check_exact=True)
                # None stays None (not NaN) in a column without any value
                for c in want.columns:
                    if want[c].dtype == object:
                        assert [type(v) for v in got[c]] == [type(v) for v in want[c]], c


def test_nullable_integers_fall_back(tmp_path):
    db = write_mixed_db(tmp_path / "m.duckdb")
    with Store(db, read_only=True) as st:
        sql = "SELECT item_id, CASE WHEN item_id = 'i0' THEN NULL ELSE seq END AS s FROM results ORDER BY seq"
        pd.testing.assert_frame_equal(
            _read_frame(st, sql, []), st.query_df(sql, []), check_dtype=True
        )


def _out_of_order_db(path):
    """Rows written in three batches: the second's seq numbers below the first's, the third
    repeating some (as `write_results` with its default start_seq does)."""
    from llmscope.engine.types import Item, Result

    items = [Item(item_id=f"i{i}", fields={}, gold="yes", text=f"s{i}") for i in range(9)]
    with Store(path) as st:
        st.add_suite("s", "s", "yesno", {"task": "yesno"}, "", items)
        for rid in ("inc", "mixed"):
            finished_run(st, rid, "s", "s", 9)

        def rows(ids):
            return [
                Result(
                    item_id=f"i{i}",
                    variant="v",
                    prompt="p",
                    probs={"yes": i / 10, "no": 0.5},
                    prediction="yes",
                    gold="yes",
                    correct=1.0,
                    confidence=0.5,
                )
                for i in ids
            ]

        st.write_results("inc", rows(range(9)))
        st.write_results("mixed", rows([0, 1, 2]), start_seq=10)
        st.write_results("mixed", rows([3, 4, 5]), start_seq=0)
        st.write_results("mixed", rows([6, 7, 8]), start_seq=1)  # seq 1 and 2 twice
    return path


def test_order_by_reads_the_table_order_only_when_it_is_that_order(tmp_path):
    db = _out_of_order_db(tmp_path / "o.duckdb")
    base = "SELECT item_id, seq, probs FROM results WHERE run_id = ?"
    with Store(db, read_only=True) as st:
        for rid, want_items in (("inc", [f"i{i}" for i in range(9)]), ("mixed", None)):
            want = st.query_df(base + " ORDER BY seq", [rid])
            got = _read_frame(st, base, [rid], order_by="seq")
            assert got["seq"].tolist() == sorted(want["seq"].tolist())
            if want_items:
                assert got["item_id"].tolist() == want_items
                pd.testing.assert_frame_equal(got, want, check_dtype=True, check_exact=True)
            else:  # not in order in the table: the rows of ORDER BY seq (ties in DuckDB's order)
                assert got["seq"].tolist() == [0, 1, 1, 2, 2, 3, 10, 11, 12]
                assert got["item_id"].tolist()[:1] == ["i3"] and got["item_id"].tolist()[-3:] == [
                    "i0",
                    "i1",
                    "i2",
                ]
                pd.testing.assert_frame_equal(got, want, check_dtype=True, check_exact=True)
