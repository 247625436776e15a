"""The store: migrations from schema 1, exactly-once writes, JSON round trips."""

from __future__ import annotations

import json

import duckdb

from llmscope.engine.types import Item, Result
from llmscope.store.db import Store
from llmscope.store.schema import MIGRATIONS, SCHEMA_VERSION


def test_schema_1_file_is_migrated_keeping_its_rows(db_path):
    # A database exactly as llmscope's first schema left it.
    con = duckdb.connect(str(db_path))
    con.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at TIMESTAMP)")
    con.execute(MIGRATIONS[0][1])
    con.execute("INSERT INTO schema_version VALUES (1, now())")
    con.execute("INSERT INTO runs (run_id, suite_id, status) VALUES ('old', 's@1', 'completed')")
    con.execute(
        "INSERT INTO results (run_id, item_id, variant, p_yes) VALUES ('old', 'a', 'q1', 0.25)"
    )
    con.close()
    with Store(db_path) as st:
        assert st.schema_version() == SCHEMA_VERSION
        assert st.execute("SELECT p_yes FROM results WHERE run_id = 'old'").fetchall() == [(0.25,)]
        st.save_analysis("old", "probeval", {"mean_kl": 1.5})
        assert st.load_analysis("old", "probeval") == {"mean_kl": 1.5}
        versions = [
            r[0]
            for r in st.execute("SELECT version FROM schema_version ORDER BY version").fetchall()
        ]
    assert versions == list(range(1, SCHEMA_VERSION + 1))


def test_writes_are_exactly_once_and_json_round_trips(db_path):
    with Store(db_path) as st:
        st.add_suite(
            "s@1", "s", "yesno", {"name": "s"}, "", [Item("a", {"x": "[bold]é\x1b[31m"}, "yes")]
        )
        st.add_suite("s@1", "s", "yesno", {"name": "s"}, "", [Item("a", {"x": 1}, "yes")])  # no-op
        r = Result(
            item_id="a",
            variant="q1",
            prompt="p\n\t\u2028",
            probs={"yes": 0.5, "no": float("nan")},
            other=0.5,
            top_tokens=[{"token": "\ufffd", "id": 3, "prob": 0.1}],
            extra={"k": [1, 2]},
        )
        st.write_results("run", [r])
        st.write_results(
            "run", [r, Result(item_id="b", variant="q1")], start_seq=1
        )  # "a" again: ignored
        rows = st.execute(
            "SELECT item_id, prompt, probs, p_no, top_tokens, extra FROM results ORDER BY item_id"
        ).fetchall()
        fields = st.execute("SELECT fields FROM items").fetchall()
        tops = st.results_frame("run", with_items=False)[
            "top_tokens"
        ].tolist()  # from the batch's blob
    assert [x[0] for x in rows] == ["a", "b"]
    a = rows[0]
    assert a[1] == "p\n\t\u2028"
    assert json.loads(a[2]) == {
        "yes": 0.5,
        "no": None,
    }  # NaN is stored as null, never as invalid JSON
    assert a[3] is None
    assert a[4] is None  # schema 5: top tokens live in result_blobs, not in the row
    assert json.loads(tops[0]) == [{"token": "\ufffd", "id": 3, "prob": 0.1}] and tops[1] is None
    assert json.loads(a[5]) == {"k": [1, 2]}
    assert json.loads(fields[0][0]) == {"x": "[bold]é\x1b[31m"}
