"""The store's SQL bulk path (`Store.append_results_sql`) and the WorldSense import built on it:
plain results files read by DuckDB give the rows the Python parser gives, other files keep
the parser and its errors, and one import is one transaction."""

from __future__ import annotations

import bz2
import json
from pathlib import Path

import pyarrow as pa
import pytest

import llmscope.data.worldsense as ws
from llmscope.data.suites import SuiteError, read_jsonl
from llmscope.io.importers import published
from llmscope.io.importers.published import import_worldsense, is_plain_results
from llmscope.store.db import Store
from llmscope.store.errors import StoreError
from tests.helpers.bulk import STORED_COLS, stored_rows, ws_dir, ws_trial, yesno_run

COLS = (*STORED_COLS, "p_chosen", "choice_method", "top_tokens_blob")


def _rows(st: Store, run_id: str) -> list[tuple]:
    return stored_rows(st, run_id, COLS)


def _values(rows: list[tuple]) -> str:
    """A VALUES list of (item_id, variant, seq, prediction, correct) for a select."""
    return ", ".join(
        f"('{i}', '{v}', {s}, {'NULL' if p is None else repr(p)}, {'NULL' if c is None else c})"
        for i, v, s, p, c in rows
    )


def _select(rows: list[tuple]) -> str:
    return (
        f"SELECT * FROM (VALUES {_values(rows)}) t(item_id, variant, seq, prediction, correct)"
        if rows
        else "SELECT 'x' AS item_id, 'q' AS variant, 0 AS seq, NULL AS prediction, NULL AS correct WHERE false"
    )


ROWS = [("a", "q1", 0, "yes", 1.0), ("b", "q1", 1, None, None), ("a", "q2", 2, "no", 0.0)]


def _append_py(st: Store, run_id: str, rows: list[tuple]) -> None:
    """The same rows through the row-by-row path, to compare the SQL path with."""
    st.append_results(
        run_id,
        {
            "item_id": [r[0] for r in rows],
            "variant": [r[1] for r in rows],
            "prediction": [r[3] for r in rows],
            "correct": [r[4] for r in rows],
        },
    )


def test_append_results_sql_equals_append_results(tmp_path: Path) -> None:
    with Store(tmp_path / "s.duckdb") as st:
        yesno_run(st, "py")
        yesno_run(st, "sql")
        _append_py(st, "py", ROWS)
        assert st.append_results_sql("sql", _select(ROWS)) == 3
        assert _rows(st, "sql") == _rows(st, "py")
        # run id and written_at filled in, n_tokens 0 and latency 0.0 as a default Result stores them
        assert _rows(st, "sql")[1] == ("b", "q1", 1, *[None] * 11, 0, 0.0, *[None] * 5)
        assert st.execute(
            "SELECT count(*) FROM results WHERE run_id = 'sql' AND written_at IS NULL"
        ).fetchone() == (0,)


def test_append_results_sql_keys_inside_a_transaction(tmp_path: Path) -> None:
    """Inside `transaction()` a key repeated in the select, or stored before, is an error and
    the transaction writes nothing."""
    with Store(tmp_path / "k.duckdb") as st:
        yesno_run(st, "r")
        rows = [*ROWS, ("b", "q1", 3, "yes", 1.0)]
        with pytest.raises(
            StoreError, match=r"duplicate result key \('b', 'q1'\) for run r inside one transaction"
        ):
            with st.transaction():
                st.append_results_sql("r", _select(rows))
        assert st.count_results("r") == (0, 0)
        st.append_results("r", {"item_id": ["a"], "variant": ["q2"]})
        with pytest.raises(StoreError, match=r"duplicate result key \('a', 'q2'\)"):
            with st.transaction():
                st.append_results_sql("r", _select(ROWS))
        assert st.count_results("r") == (1, 0)
        # keys the SQL path stored are known to the row-by-row path's check afterwards
        with st.transaction():
            assert st.append_results_sql("r", _select(ROWS[:2])) == 2
        with pytest.raises(StoreError, match=r"duplicate result key \('b', 'q1'\)"):
            with st.transaction():
                st.append_results("r", {"item_id": ["c", "b"], "variant": ["q1", "q1"]})
        assert st.count_results("r") == (3, 0)


def test_append_results_sql_skips_repeated_keys_outside_a_transaction(tmp_path: Path) -> None:
    """Outside a transaction, as `append_results`: stored keys and later copies are skipped."""
    with Store(tmp_path / "o.duckdb") as st:
        yesno_run(st, "py")
        yesno_run(st, "sql")
        for run in ("py", "sql"):
            st.append_results(run, {"item_id": ["a"], "variant": ["q2"], "prediction": ["old"]})
        rows = [*ROWS, ("b", "q1", 3, "yes", 1.0), ("c", "q1", 4, "yes", 1.0)]
        _append_py(st, "py", rows)
        assert st.append_results_sql("sql", _select(rows)) == 3
        got = _rows(st, "sql")
        assert got == _rows(st, "py")
        assert [(r[0], r[1], r[2], r[10]) for r in got] == [
            ("a", "q2", 0, "old"),
            ("a", "q1", 0, "yes"),
            ("b", "q1", 1, None),
            ("c", "q1", 4, "yes"),
        ]


def test_append_results_sql_empty_select(tmp_path: Path) -> None:
    with Store(tmp_path / "e.duckdb") as st:
        yesno_run(st, "r")
        assert st.append_results_sql("r", _select([])) == 0
        with st.transaction():
            assert st.append_results_sql("r", _select([])) == 0
        assert st.count_results("r") == (0, 0)
        # the store is usable afterwards (no temporary table or transaction left open)
        assert st.append_results_sql("r", _select(ROWS)) == 3


def test_append_results_sql_rolled_back_with_its_transaction(tmp_path: Path) -> None:
    with Store(tmp_path / "t.duckdb") as st:
        yesno_run(st, "r")
        with pytest.raises(RuntimeError), st.transaction():
            assert st.append_results_sql("r", _select(ROWS)) == 3
            assert st.count_results("r") == (3, 0)
            raise RuntimeError("boom")
        assert st.count_results("r") == (0, 0)
        # the rolled-back keys are not remembered as stored
        with st.transaction():
            assert st.append_results_sql("r", _select(ROWS)) == 3
        assert st.count_results("r") == (3, 0)


def test_append_results_sql_column_rules(tmp_path: Path) -> None:
    with Store(tmp_path / "c.duckdb") as st:
        yesno_run(st, "r")
        for sql, msg in [
            ("SELECT 'a' AS item_id, 'q' AS variant", "must give"),
            (
                "SELECT 'r' AS run_id, 'a' AS item_id, 'q' AS variant, 0 AS seq",
                "store's own column",
            ),
            (
                "SELECT 'a' AS item_id, 'q' AS variant, 0 AS seq, 1 AS nope",
                "not columns of results",
            ),
            ("SELECT 'a' AS item_id, 'q' AS variant, 0 AS seq, '{}' AS extra", "choice_method"),
            (
                "SELECT 'a' AS item_id, 'q' AS variant, 0 AS seq, '{}' AS probs, 'yes' AS prediction",
                "p_chosen",
            ),
        ]:
            with pytest.raises(ValueError, match=msg):
                st.append_results_sql("r", sql)
        with pytest.raises(ValueError, match="is not the suite of run"):
            st.append_results_sql("r", _select(ROWS), prompt_from_suite="other")
        # a lookup table handed over by name
        tbl = pa.table({"k": ["a"], "p": ["yes"]})
        n = st.append_results_sql(
            "r",
            "SELECT k AS item_id, ? AS variant, 0 AS seq, p AS prediction FROM lk",
            ["q9"],
            tables={"lk": tbl},
        )
        assert n == 1 and st.execute(
            "SELECT prediction FROM results WHERE variant = 'q9'"
        ).fetchone() == ("yes",)
        assert st.count_results("r") == (1, 0)


# -- the WorldSense import: DuckDB's reader against the Python parser ---------------------------


TRIALS = [
    ws_trial(1, "Emmanuel", ["TRUE", "FALSE"]),
    ws_trial(2, "Megi", ["TRUE", "FALSE"]),
    ws_trial(3, "Mark", ["1", "2", "3"]),
    ws_trial(-4, "Youssef", ["1", "2", "3"]),
    ws_trial(0, "Dieuwke", ["POSSIBLE", "IMPOSSIBLE"]),
    ws_trial(9223372036854775807, "Yoda", ["1", "2", "3"]),
]

# plain lines: DuckDB reads these
PLAIN = [
    '{"Key":1,"resp":"TRUE"}',
    '{"Key": 2, "resp": " TRUE "}',
    '{"Key":3,"resp":"2"}',
    '{"Key":-4,"resp":"maybe"}',
    '{"Key":99,"resp":"TRUE"}',
    '{"Key":1,"resp":"FALSE"}',
    '{"Key":0,"resp":"\u00a0POSSIBLE\u2003"}',
    '{"Key":9223372036854775807,"resp":""}',
    '\t{ "Key" :3 , "resp": "caf\u00e9 \U0001f600" } ',
]
# lines of other shapes: each sends its file to the Python parser
OTHER = [
    '{"Key":1,"resp":null}',
    '{"Key":2,"resp":3}',
    '{"Key":"3","resp":"1"}',
    '{"resp":"1","Key":3}',
    '{"Key":1,"resp":"TRUE","x":1}',
    '{"Key":2,"resp":"a\\"b"}',
    '{"Key":2,"resp":"\\u0054RUE"}',
    '{"Key":01,"resp":"TRUE"}',
    '{"Key":-0,"resp":"TRUE"}',
    '{"Key":1.0,"resp":"TRUE"}',
    '{"Key":92233720368547758070,"resp":"1"}',
    '{"Key":9223372036854775808,"resp":"1"}',
    '{"Key":true,"resp":"TRUE"}',
    '{"Key":2,"Key":1,"resp":"TRUE"}',
    '{"Key":1,"resp":"TR\tUE"}',
]


def _ws_dir(tmp_path: Path, results: dict[str, bytes]) -> Path:
    return ws_dir(tmp_path, TRIALS, results)


def _import(
    d: Path, db: Path, monkeypatch: pytest.MonkeyPatch, *, python: bool
) -> tuple[list[str], list, list]:
    with monkeypatch.context() as m:
        if python:
            m.setattr(published, "is_plain_results", lambda raw: False)
        with Store(db) as st:
            msgs = import_worldsense(st, d)
            runs = st.execute(
                "SELECT run_id, model, status, n_total, n_done, n_errors, meta FROM runs "
                "ORDER BY run_id"
            ).fetchall()
            rows = [_rows(st, r[0]) for r in runs]
    return msgs, runs, rows


def _both(tmp_path: Path, files: dict[str, bytes], monkeypatch: pytest.MonkeyPatch) -> tuple:
    d = _ws_dir(tmp_path, files)
    sql = _import(d, tmp_path / "sql.duckdb", monkeypatch, python=False)
    py = _import(d, tmp_path / "py.duckdb", monkeypatch, python=True)
    return sql, py


def test_plain_lines_are_plain_and_others_are_not() -> None:
    for line in PLAIN:
        assert is_plain_results((line + "\n").encode()), line
    for line in OTHER:
        assert not is_plain_results((PLAIN[0] + "\n" + line + "\n").encode()), line
    for body in [
        b"",
        b"\n",
        PLAIN[0].encode() + b"\r\n",
        b"\xef\xbb\xbf" + PLAIN[0].encode(),
        PLAIN[0].encode() + b"\n\n" + PLAIN[2].encode(),
        b'{"Key":1,"resp":"\xff"}\n',
    ]:
        assert not is_plain_results(body), body
    assert is_plain_results(PLAIN[0].encode())  # no newline after the last line


def test_duckdb_reader_gives_the_parsers_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Plain files (unknown and repeated keys, keys at 0, negative and 2**63-1, whitespace,
    Unicode and Unicode spaces that str.strip removes, no final newline) imported by DuckDB
    and by the Python parser: the same messages, runs and rows."""
    files = {
        "A": ("\n".join(PLAIN) + "\n").encode(),
        "B": "\n".join(reversed(PLAIN)).encode(),
        "C": b'{"Key":99,"resp":"x"}\n',
    }
    sql, py = _both(tmp_path, files, monkeypatch)
    assert sql == py
    msgs, runs, rows = sql
    assert "8 responses" not in msgs[1] and "1 keys not in the test set, 2 repeated keys" in msgs[1]
    by_model = {run[1]: (run, r) for run, r in zip(runs, rows, strict=True)}
    assert len(by_model["A"][1]) == 6 and by_model["A"][0][4] == 6
    by_item = {r[0]: r for r in by_model["A"][1]}
    assert by_item["0"][10:13] == ("POSSIBLE", "POSSIBLE", 1.0)  # "\u00a0POSSIBLE\u2003" stripped
    assert by_item["9223372036854775807"][10:13] == ("", "3", 0.0)
    assert by_item["3"][10] == "2" and by_item["1"][10] == "TRUE"  # the first line of a key counts
    assert all(len(r) == 0 for r, run in zip(rows, runs, strict=True) if run[1] == "C")


@pytest.mark.parametrize("line", OTHER)
def test_other_lines_go_to_the_parser(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, line: str
) -> None:
    """A file with one line of another shape is parsed in Python, rows as before; the SQL path
    is never asked to read it."""
    calls: list[str] = []
    real = published._append_plain

    def spy(*a: object) -> tuple[int, int, int]:
        calls.append(str(a[3]))
        return real(*a)  # type: ignore[arg-type]

    monkeypatch.setattr(published, "_append_plain", spy)
    files = {
        "A": ("\n".join(PLAIN[:3]) + "\n" + line + "\n").encode(),
        "B": (PLAIN[0] + "\n").encode(),
    }
    try:
        sql, py = _both(tmp_path, files, monkeypatch)
    except SuiteError as e:  # a line the stdlib rejects too: the same error from both paths
        with pytest.raises(SuiteError) as ei:
            _import(_ws_dir(tmp_path, files), tmp_path / "py2.duckdb", monkeypatch, python=True)
        assert str(ei.value) == str(e)
        assert [c.endswith("basic___A___results.jsonl") for c in calls] == [False] * len(calls)
        return
    assert sql == py
    assert not any(c.endswith("basic___A___results.jsonl") for c in calls)
    assert any(c.endswith("basic___B___results.jsonl") for c in calls)


@pytest.mark.parametrize(
    "bad,line,field",
    [
        ('{"Key":2,"resp":"x"', 3, None),
        ('{"resp":"x"}', 3, "Key"),
        ("[1]", 3, None),
        ('{"Key":2,"resp":NaN', 3, None),
    ],
)
def test_malformed_line_keeps_its_error_and_no_run_is_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bad: str, line: int, field: str | None
) -> None:
    """A bad line in the second file: the error names its file, line and field as the Python
    reader does, and the import (one transaction) leaves none of the new runs, not even the
    first file's; the suite's items, stored before, stay."""
    body = (PLAIN[0] + "\n" + PLAIN[2] + "\n" + bad + "\n").encode()
    d = _ws_dir(tmp_path, {"A": (PLAIN[0] + "\n").encode(), "B": body})
    path = d / "results" / "basic___B___results.jsonl"
    with Store(tmp_path / "m.duckdb") as st:
        with pytest.raises(SuiteError) as ei:
            import_worldsense(st, d)
        assert st.execute("SELECT count(*) FROM runs").fetchone() == (0,)
        assert st.execute("SELECT count(*) FROM results").fetchone() == (0,)
        assert st.execute("SELECT count(*) FROM items").fetchone() == (len(TRIALS),)
    assert ei.value.path == str(path) and ei.value.line == line and ei.value.field == field
    if field is None:  # the reader's own message for a line it cannot read
        with pytest.raises(SuiteError) as ref:
            read_jsonl(path)
        assert str(ref.value) == str(ei.value)
    # fixed, the same command imports both files
    path.write_bytes((PLAIN[0] + "\n" + PLAIN[2] + "\n").encode())
    with Store(tmp_path / "m.duckdb") as st:
        msgs = import_worldsense(st, d)
        assert [m.split(":")[0] for m in msgs[1:]] == [
            "basic___A___results.jsonl",
            "basic___B___results.jsonl",
        ]
        assert st.execute("SELECT count(*) FROM results").fetchone() == (3,)


# -- the trials file decompressed on a second thread ------------------------------------------------


def _trials_bz2(tmp_path: Path, lines: list[str], end: str = "\n") -> Path:
    p = tmp_path / "trials.jsonl.bz2"
    p.write_bytes(bz2.compress(("\n".join(lines) + end).encode()))
    return p


def _items(items: list) -> list[tuple]:
    return [(i.item_id, i.line, i.gold, i.options, i.text, i.fields) for i in items]


@pytest.mark.parametrize("end", ["\n", ""])
def test_chunked_parse_equals_whole_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, end: str
) -> None:
    """Chunks of a few bytes (lines cut anywhere, blank lines, no final newline): the items and
    line numbers of a whole-file parse."""
    lines = [json.dumps(TRIALS[0]), "", json.dumps(TRIALS[2]), "  ", json.dumps(TRIALS[3])]
    p = _trials_bz2(tmp_path, lines, end)
    whole = _items(ws.load_worldsense(p))
    assert [t[1] for t in whole] == [1, 3, 5]
    for size in (1, 7, 64):
        monkeypatch.setattr(ws, "_CHUNK", size)
        assert _items(ws.load_worldsense(p)) == whole


class _FailingDecoder:
    """indexed_bzip2 stand-in: hands out `good` bytes, then fails (as on a stream it cannot read)."""

    def __init__(self, good: bytes) -> None:
        self.good = good

    def __call__(self, path: str, parallelization: int = 1) -> _FailingDecoder:
        return self

    def __enter__(self) -> _FailingDecoder:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def read(self, n: int) -> bytes:
        if self.good:
            out, self.good = self.good[:n], self.good[n:]
            return out
        raise RuntimeError("std::exception")


@pytest.mark.parametrize("good", [b"", b"garbage that is no JSON\n{\n", b"partial"])
def test_parallel_decoder_failing_midway_reads_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, good: bytes
) -> None:
    """When indexed_bzip2 fails after handing out bytes (right or wrong), the stdlib reads the
    file again from its start: the items are the file's."""
    lines = [json.dumps(t) for t in TRIALS]
    p = _trials_bz2(tmp_path, lines)
    want = _items(ws.load_worldsense(p))
    monkeypatch.setattr(ws, "_ibz2", type("M", (), {"open": _FailingDecoder(good)}))
    monkeypatch.setattr(ws, "_CHUNK", 4)
    assert _items(ws.load_worldsense(p)) == want


def test_corrupt_stream_is_reported_before_a_bad_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bad line early and a cut-off stream later: 'cannot read', as when the whole file was
    decompressed before parsing (small chunks: the bad line is parsed before the stream ends)."""
    monkeypatch.setattr(ws, "_CHUNK", 1024)
    lines = ["{not json"] + [
        json.dumps({**TRIALS[0], "Key": k, "text": "x" * 50 + str(k)}) for k in range(3000)
    ]
    p = _trials_bz2(tmp_path, lines)
    data = p.read_bytes()
    p.write_bytes(data[: len(data) * 3 // 4])
    with pytest.raises(SuiteError, match="cannot read"):
        ws.load_worldsense(p)
    p.write_bytes(data)
    with pytest.raises(SuiteError, match="invalid JSON") as ei:
        ws.load_worldsense(p)
    assert ei.value.line == 1
