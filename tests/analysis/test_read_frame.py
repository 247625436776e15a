"""The metrics pipeline's rows read through Arrow equal DuckDB's own frame, dtypes included."""

from __future__ import annotations

import pandas as pd
import pytest

from llmscope.analysis.queries import RESULT_COLUMNS, _read_frame
from llmscope.store.db import Store
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
