"""Schema 4: results without a primary key (a batched key check instead), promoted columns,
and the migration of a schema-3 file written by the schema-3 writer (tests/helpers/schema3_store.py)."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from llmscope.engine.types import Result
from llmscope.store.db import Store
from llmscope.store.errors import StoreError
from llmscope.store.schema import SCHEMA_VERSION
from tests.helpers.schema3_store import Schema3Store

ROWS = [
    Result(
        item_id="a",
        variant="q1",
        prompt="P a",
        probs={"yes": 0.7, "no": 0.2},
        other=0.1,
        top_tokens=[{"token": " yes", "id": 5, "prob": 0.7}],
        prediction="yes",
        gold="yes",
        correct=1.0,
        confidence=0.7 / 0.9,
        n_tokens=12,
        latency_ms=3.5,
        extra={"answer_token_counts": {"yes": 2}},
    ),
    Result(
        item_id="b",
        variant="q1",
        probs={"A": 0.25, "B": 0.5, 'C "x"': 0.125},
        prediction='C "x"',
        gold="B",
        correct=0.0,
        option_scores={"A": {"loglik": -1.5}},
        extra={"choice_method": "labels-topk"},
    ),
    Result(
        item_id="c",
        variant="q2",
        probs={"yes": float("nan"), "no": 0.4},
        prediction="yes",
        gold="no",
        correct=0.0,
        confidence=float("inf"),
    ),
    Result(item_id="d", variant="q1", error="boom", extra={"choice_method": 3}),
]
# Expected promoted values, by hand: probs[prediction] (NaN -> NULL) and a string choice_method.
PROMOTED = {"a": (0.7, None), "b": (0.125, "labels-topk"), "c": (None, None), "d": (None, None)}
COLS = (
    "item_id, variant, seq, prompt, probs, p_yes, p_no, other, top_tokens, option_scores, prediction, gold, "
    "correct, confidence, n_tokens, latency_ms, error, extra"
)


def _promoted(st: Store, run: str) -> dict[str, tuple[float | None, str | None]]:
    rows = st.execute(
        "SELECT item_id, p_chosen, choice_method FROM results WHERE run_id = ?", [run]
    ).fetchall()
    return {r[0]: (r[1], r[2]) for r in rows}


def test_writer_fills_promoted_columns_and_drops_the_primary_key(db_path: Path) -> None:
    with Store(db_path) as st:
        st.write_results("r", ROWS)
        assert _promoted(st, "r") == PROMOTED
        assert st.execute(
            "SELECT confidence, p_yes FROM results WHERE item_id = 'c'"
        ).fetchall() == [(None, None)]
        keys = st.execute(
            "SELECT count(*) FROM duckdb_constraints() WHERE table_name = 'results' "
            "AND constraint_type IN ('PRIMARY KEY', 'UNIQUE')"
        ).fetchall()
        assert keys == [(0,)]


def test_schema_3_file_is_migrated_with_identical_rows(tmp_path: Path) -> None:
    db = tmp_path / "v3.duckdb"
    old = Schema3Store(str(db))
    old.write_results("r", ROWS)
    old.write_results("r", [ROWS[0]], start_seq=9)  # a repeated key: the v3 primary key refuses it
    before = old.con.execute(f"SELECT {COLS} FROM results ORDER BY seq").fetchall()
    old.close()
    assert len(before) == 4
    con = duckdb.connect(
        str(db)
    )  # a row whose JSON text does not parse must not stop the migration
    con.execute(
        "INSERT INTO results (run_id, item_id, variant, probs, prediction, extra) "
        "VALUES ('bad', 'x', 'q1', '{oops', 'yes', 'nope')"
    )
    con.close()
    with Store(db) as st:
        assert st.schema_version() == SCHEMA_VERSION  # 3 -> 4 -> 5
        after = st.execute(f"SELECT {COLS} FROM results WHERE run_id = 'r' ORDER BY seq").fetchall()
        assert after == before
        assert _promoted(st, "r") == PROMOTED  # computed in SQL from the JSON columns
        assert _promoted(st, "bad") == {"x": (None, None)}
        # the migrated file takes new rows through the key check: "a" again is ignored
        st.write_results("r", [ROWS[0], Result(item_id="e", variant="q1")], start_seq=10)
        assert st.count_results("r") == (5, 1)


def test_key_check_ignores_repeats_outside_a_transaction_and_refuses_them_inside(
    db_path: Path,
) -> None:
    with Store(db_path) as st:
        st.write_results(
            "r", [ROWS[0], ROWS[0], ROWS[1]]
        )  # repeated inside one batch: first copy kept
        st.write_results("r", [ROWS[1], ROWS[2]], start_seq=3)
        rows = st.execute("SELECT item_id, seq FROM results ORDER BY seq").fetchall()
        assert rows == [("a", 0), ("b", 2), ("c", 4)]
        with pytest.raises(StoreError, match="duplicate result key"):
            with st.transaction():
                st.write_results("r", [ROWS[3]], start_seq=5)
                st.write_results("r", [ROWS[0]], start_seq=6)
        assert st.count_results("r") == (3, 0)  # the transaction's "d" was rolled back too
        st.write_results("r", [ROWS[3]], start_seq=7)  # ...and can be written afterwards
        assert st.count_results("r") == (4, 1)
        # a raw delete through `execute` makes the store read the keys again
        st.execute("DELETE FROM results WHERE item_id = 'a'")
        st.write_results("r", [ROWS[0]], start_seq=8)
        assert st.execute("SELECT seq FROM results WHERE item_id = 'a'").fetchall() == [(8,)]
        assert st.delete_error_results("r") == 1
        st.write_results("r", [ROWS[3]], start_seq=9)
        assert st.count_results("r") == (4, 1)


def test_two_stores_on_one_file_share_the_keys(db_path: Path) -> None:
    a = Store(db_path)
    b = Store(db_path)
    try:
        a.write_results("r", [ROWS[0]])
        b.write_results("r", [ROWS[0], ROWS[1]], start_seq=1)
        assert a.execute("SELECT item_id FROM results ORDER BY seq").fetchall() == [("a",), ("b",)]
    finally:
        a.close()
        b.close()


def test_reopened_file_reads_its_keys_back(db_path: Path) -> None:
    with Store(db_path) as st:
        st.write_results("r", ROWS[:2])
    con = duckdb.connect(str(db_path))  # written by another process meanwhile
    con.execute("INSERT INTO results (run_id, item_id, variant) VALUES ('r', 'z', 'q1')")
    con.close()
    with Store(db_path) as st:
        st.write_results("r", [*ROWS[:2], Result(item_id="z", variant="q1"), ROWS[2]], start_seq=2)
        got = st.execute("SELECT item_id FROM results ORDER BY item_id").fetchall()
    assert got == [("a",), ("b",), ("c",), ("z",)]


def test_append_results_fills_promoted_columns_from_json_text(db_path: Path) -> None:
    with Store(db_path) as st:
        st.append_results(
            "r",
            {
                "item_id": ["a", "b"],
                "variant": ["q1", "q1"],
                "prediction": ["x", None],
                "probs": [json.dumps({"x": 0.25}), json.dumps({"x": 0.5})],
                "extra": [json.dumps({"choice_method": "loglik"}), None],
            },
        )
        got = _promoted(st, "r")
    assert got == {"a": (0.25, "loglik"), "b": (None, None)}


def test_fast_jsonl_reads_64_bit_keys_without_the_slow_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # WorldSense keys are 19-digit int64 values, which orjson reads exactly
    from llmscope.data.suites import read_jsonl
    from llmscope.io.importers import published

    p = tmp_path / "r.jsonl"
    p.write_text(
        '{"Key":-9223372036854775807,"resp":"1"}\n{"Key":9223372036854775807,"resp":"x"}\n'
        '{"Key":2747235547611487721,"resp":"TRUE"}\n'
    )
    expected = read_jsonl(p)
    assert [r["Key"] for _, r in expected] == [-(2**63) + 1, 2**63 - 1, 2747235547611487721]

    def refuse(path: Path) -> None:
        raise AssertionError("fell back to the slow reader")

    monkeypatch.setattr(published, "read_jsonl", refuse)
    assert published.fast_jsonl(p) == expected
    p.write_text('{"Key":9223372036854775808}\n')  # one past int64: the reader's own error decides
    with pytest.raises(AssertionError, match="slow reader"):
        published.fast_jsonl(p)
