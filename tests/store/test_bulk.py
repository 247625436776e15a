"""The store's bulk path (`transaction`, `append_results`) and the imports built on it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from llmscope.data.suites import SuiteError, read_jsonl
from llmscope.engine.types import Result
from llmscope.io.importers.published import fast_jsonl, import_worldsense
from llmscope.store.db import Store
from llmscope.store.errors import StoreError
from tests.helpers.bulk import stored_rows, ws_dir, ws_trial, yesno_run


def test_append_results_defaults_and_values(tmp_path: Path) -> None:
    with Store(tmp_path / "a.duckdb") as st:
        yesno_run(st, "r")
        n = st.append_results(
            "r",
            {
                "item_id": ["a", "b"],
                "variant": ["q1", "q1"],
                "prompt": ["P a", "P b"],
                "p_yes": [0.25, float("nan")],
                "correct": [1.0, None],
                "extra": ['{"k":1}', None],
            },
            start_seq=5,
        )
        assert n == 2
        got = stored_rows(st, "r")
    # by hand: absent columns are null, n_tokens 0 and latency 0.0 (a default Result's values),
    # seq counts from start_seq, NaN is stored as NaN only if given as such by Arrow -> checked below
    a, b = got
    # columns as STORED_COLS: probs, then p_yes .. gold (p_no other top_tokens option_scores
    # prediction gold: six nulls), correct, confidence, n_tokens, latency_ms, error, extra
    assert a == ("a", "q1", 5, "P a", None, 0.25, *[None] * 6, 1.0, None, 0, 0.0, None, '{"k":1}')
    assert (
        b[:3] == ("b", "q1", 6) and b[12] is None and b[17] is None and b[14] == 0 and b[15] == 0.0
    )
    assert b[5] is None or math.isnan(b[5])


def test_append_results_matches_write_results(tmp_path: Path) -> None:
    """A row given as columns is stored exactly as the same row given as a Result."""
    res = Result(
        item_id="x",
        variant="q2",
        prompt="the prompt",
        prediction="TRUE",
        gold="TRUE",
        correct=1.0,
        extra={"imported": True, "valid": True},
    )
    with Store(tmp_path / "b.duckdb") as st:
        yesno_run(st, "r1")
        yesno_run(st, "r2")
        st.write_results("r1", [res])
        st.append_results(
            "r2",
            {
                "item_id": ["x"],
                "variant": ["q2"],
                "prompt": ["the prompt"],
                "prediction": ["TRUE"],
                "gold": ["TRUE"],
                "correct": [1.0],
                "extra": ['{"imported":true,"valid":true}'],
            },
        )
        assert stored_rows(st, "r1") == stored_rows(st, "r2")


def test_append_results_rejects_bad_columns(tmp_path: Path) -> None:
    with Store(tmp_path / "c.duckdb") as st:
        with pytest.raises(ValueError, match="different lengths"):
            st.append_results("r", {"item_id": ["a", "b"], "variant": ["q1"]})
        with pytest.raises(ValueError, match="not columns of results: \\['nope'\\]"):
            st.append_results("r", {"item_id": ["a"], "variant": ["q1"], "nope": [1]})
        assert st.append_results("r", {"item_id": [], "variant": []}) == 0


def test_transaction_is_all_or_nothing(tmp_path: Path) -> None:
    path = tmp_path / "t.duckdb"
    with Store(path) as st:
        with pytest.raises(RuntimeError):
            with st.transaction():
                yesno_run(st, "gone")
                st.append_results("gone", {"item_id": ["a"], "variant": ["q1"]})
                raise RuntimeError("killed half-way")
        assert st.get_run("gone") is None
        assert st.count_results("gone") == (0, 0)
        # a duplicate key inside a transaction is an error (no silent ON CONFLICT) and undoes it all
        with pytest.raises(StoreError):
            with st.transaction():
                yesno_run(st, "dup")
                st.append_results("dup", {"item_id": ["a", "a"], "variant": ["q1", "q1"]})
        assert st.get_run("dup") is None
        # nested use joins the outer transaction; committed rows survive reopening
        with st.transaction():
            yesno_run(st, "ok")
            with st.transaction():
                st.append_results("ok", {"item_id": ["a", "b"], "variant": ["q1", "q1"]})
    with Store(path, read_only=True) as st:
        assert st.count_results("ok") == (2, 0)
        # outside a transaction the keyed fallback still drops a key written twice
    with Store(path) as st:
        st.write_results(
            "ok", [Result(item_id="a", variant="q1"), Result(item_id="c", variant="q1")], 2
        )
        assert [r[0] for r in stored_rows(st, "ok")] == ["a", "b", "c"]


# -- fast_jsonl: same records and the same errors as read_jsonl --------------------------------
@pytest.mark.parametrize(
    "text",
    [
        '\ufeff{"a": 1}\n\n{"b": "x\u2028y"}\r\n  \n{"c": [1, 2.5, null]}',  # BOM, blank lines, CRLF, U+2028
        '{"a": NaN}\n{"b": 1}\n',  # orjson refuses NaN: stdlib path
    ],
)
def test_fast_jsonl_same_records(tmp_path: Path, text: str) -> None:
    p = tmp_path / "x.jsonl"
    p.write_bytes(text.encode("utf-8"))
    fast, slow = fast_jsonl(p), read_jsonl(p)
    assert [n for n, _ in fast] == [n for n, _ in slow]
    assert json.dumps([r for _, r in fast]) == json.dumps([r for _, r in slow])


def test_fast_jsonl_refuses_big_integers_like_the_reader(tmp_path: Path) -> None:
    # orjson would turn a 30-digit integer into a float; both readers refuse it the same way
    p = tmp_path / "x.jsonl"
    p.write_text('{"a": 123456789012345678901234567890}\n')
    errors = []
    for reader in (fast_jsonl, read_jsonl):
        with pytest.raises(Exception) as e:
            reader(p)
        errors.append(str(e.value))
    assert errors[0] == errors[1] and "does not fit 64 bits" in errors[0]


@pytest.mark.parametrize(
    "text,where",
    [
        ('{"a": 1}\n{"b": \n', "line 2"),
        ('{"a": 1}\n[1, 2]\n', "line 2"),
    ],
)
def test_fast_jsonl_same_errors(tmp_path: Path, text: str, where: str) -> None:
    p = tmp_path / "bad.jsonl"
    p.write_text(text)
    with pytest.raises(SuiteError) as fast:
        fast_jsonl(p)
    with pytest.raises(SuiteError) as slow:
        read_jsonl(p)
    assert str(fast.value) == str(slow.value)
    assert where in str(fast.value)


# -- WorldSense import through the bulk path ---------------------------------------------------
def _ws_dir(tmp_path: Path) -> Path:
    trials = [
        ws_trial(1, "Emmanuel", ["TRUE", "FALSE"]),
        ws_trial(2, "Megi", ["TRUE", "FALSE"]),
        ws_trial(3, "Mark", ["1", "2", "3"]),
        ws_trial(4, "Youssef", ["1", "2", "3"]),
    ]
    resp = [
        {"Key": 1, "resp": " TRUE "},
        {"Key": 2, "resp": "TRUE"},
        {"Key": 3, "resp": "2"},
        {"Key": 4, "resp": "maybe"},
        {"Key": 99, "resp": "TRUE"},
        {"Key": 1, "resp": "FALSE"},
    ]
    return ws_dir(tmp_path, trials, {"M1": "".join(json.dumps(r) + "\n" for r in resp).encode()})


def test_worldsense_import_rows_by_hand(tmp_path: Path) -> None:
    d = _ws_dir(tmp_path)
    with Store(tmp_path / "w.duckdb") as st:
        msgs = import_worldsense(st, d)
        assert (
            "4 responses, 1 keys not in the test set, 1 repeated keys ignored (first kept)"
            in msgs[1]
        )
        run = st.execute("SELECT run_id, status, n_done, n_errors, meta FROM runs").fetchall()
        assert len(run) == 1 and run[0][1:4] == ("completed", 4, 0)
        meta = json.loads(run[0][4])
        assert meta["unknown_keys"] == 1 and meta["duplicate_keys"] == 1
        rows = st.execute(
            "SELECT item_id, variant, seq, prompt, prediction, gold, correct, extra, n_tokens, "
            "latency_ms, probs FROM results ORDER BY seq"
        ).fetchall()
        read = list(st.results_frame(run[0][0], with_items=False)["prompt"])
    # the trial's text is the stored item's: the row stores NULL, readers return the text
    assert read == ["Trial 1?", "Trial 2?", "Trial 3?", "Trial 4?"]
    # gold: Emmanuel=TRUE, Megi=FALSE, Mark=1, Youssef=2; 1 and 2 are one class (KNOW);
    # "maybe" is not an allowed response (valid false) and is wrong; Key 1's first answer counts.
    extra = '{{"imported":true,"prompting":"basic","valid":{}}}'
    by_hand = [  # item, prediction, gold, correct, valid
        ("1", "TRUE", "TRUE", 1.0, "true"),
        ("2", "TRUE", "FALSE", 0.0, "true"),
        ("3", "2", "1", 1.0, "true"),
        ("4", "maybe", "2", 0.0, "false"),
    ]
    assert rows == [
        (item, "default", seq, None, pred, gold, ok, extra.format(valid), 0, 0.0, None)
        for seq, (item, pred, gold, ok, valid) in enumerate(by_hand)
    ]


def test_worldsense_reimport_uses_stored_suite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second import into a file that holds the suite reads items from the store: same rows."""
    d = _ws_dir(tmp_path)
    with Store(tmp_path / "w.duckdb") as st:
        import_worldsense(st, d)
        first = stored_rows(st, st.execute("SELECT run_id FROM runs").fetchone()[0])
        assert "already imported" in import_worldsense(st, d)[1]
        st.execute("DELETE FROM results")
        st.execute("DELETE FROM runs")
        import llmscope.data.worldsense as ws

        def no_parse(path: object) -> list:
            raise AssertionError("the trials file was parsed again")

        monkeypatch.setattr(ws, "load_worldsense", no_parse)
        import_worldsense(st, d)
        again = stored_rows(st, st.execute("SELECT run_id FROM runs").fetchone()[0])
    assert again == first


def test_kill_inside_import_transaction_leaves_no_run(tmp_path: Path) -> None:
    """SIGKILL while an import's transaction is open: the reopened file has no trace of it,
    and a second import (here: the same rows) goes through."""
    import os
    import subprocess
    import sys

    path = tmp_path / "k.duckdb"
    with Store(path) as st:
        yesno_run(st, "kept")
        st.append_results("kept", {"item_id": ["a"], "variant": ["q1"]})
    code = f"""
import os, signal
from llmscope.store.db import Store
st = Store({str(path)!r})
with st.transaction():
    st.create_run({{"run_id": "half", "suite_id": "s", "n_total": 50000}})
    st.append_results("half", {{"item_id": [f"i{{k}}" for k in range(50000)], "variant": ["q1"] * 50000}})
    os.kill(os.getpid(), signal.SIGKILL)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=300)
    assert proc.returncode == -9, proc.stderr
    with Store(path) as st:
        assert st.get_run("half") is None and st.count_results("half") == (0, 0)
        assert st.count_results("kept") == (1, 0)
        with st.transaction():
            yesno_run(st, "half")
            st.append_results("half", {"item_id": ["a", "b"], "variant": ["q1", "q1"]})
        assert st.count_results("half") == (2, 0)
    assert os.path.exists(path)
