"""Pieces of the bulk write and import path: JSON columns from orjson bytes, prompts copied
from `items` inside DuckDB, the per-item answers an import scores against, and the results-file
reader's fast path. Expected values are written out by hand or come from the stdlib."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from llmscope.data.suites import SuiteError, read_jsonl
from llmscope.engine.types import Item, Result
from llmscope.io.importers.published import fast_jsonl
from llmscope.store.codec import _json_array, decode_json
from llmscope.store.db import Store


@dataclasses.dataclass
class _Tok:
    token: str
    prob: float


@pytest.mark.parametrize(
    "value,expected",
    [
        ({"yes": 0.25, "no": 0.5}, {"yes": 0.25, "no": 0.5}),
        ([{"token": " Yes", "id": 7, "prob": 0.125}], [{"token": " Yes", "id": 7, "prob": 0.125}]),
        (
            {"p": float("nan"), "q": float("inf")},
            {"p": None, "q": None},
        ),  # non-finite -> null, as before
        ({1: "a", 2: "b"}, {"1": "a", "2": "b"}),  # non-string keys: the careful options
        ({"x": np.float32(0.5), "v": np.arange(3)}, {"x": 0.5, "v": [0, 1, 2]}),
        ({"t": _Tok("é\u2028", 0.75)}, {"t": {"token": "é\u2028", "prob": 0.75}}),
        (None, None),
    ],
)
def test_json_array_stores_what_decodes_to_the_value(value: object, expected: object) -> None:
    arr = _json_array([value, {"k": 1}])
    assert arr.type == "string" and len(arr) == 2
    got = arr.to_pylist()
    assert decode_json(got[0]) == expected
    assert got[1] == '{"k":1}'


def test_write_results_round_trips_numpy_and_unicode(tmp_path: Path) -> None:
    res = Result(
        item_id="x",
        variant="q1",
        prompt="p",
        probs={"yes": np.float64(0.3), "no": 0.7},
        top_tokens=[{"token": "ünï", "id": np.int64(5), "prob": 0.25}],
        option_scores={"A": {"loglik": -1.5}},
        extra={"note": "\u2028", 3: "three"},
    )
    with Store(tmp_path / "n.duckdb") as st:
        st.write_results("r", [res])
        back = st.results("r")[0]
    assert back.probs == {"yes": 0.3, "no": 0.7}
    assert back.top_tokens == [{"token": "ünï", "id": 5, "prob": 0.25}]
    assert back.option_scores == {"A": {"loglik": -1.5}}
    assert back.extra == {"note": "\u2028", "3": "three"}


def _suite(st: Store) -> None:
    items = [
        Item(item_id="a", fields={}, gold="1", options=["1", "2"], text="Text of a"),
        Item(item_id="b", fields={}, gold="2", options=["1", "2"], text="Text of b"),
        Item(item_id="c", fields={}, gold=None, options=None, text="Text of c"),
    ]
    st.add_suite("s@1", "s", "constrained", {}, "", items)


def _run(st: Store, run_id: str, suite_id: str = "s@1") -> None:
    st.create_run(
        {
            "run_id": run_id,
            "suite_id": suite_id,
            "suite_name": "s",
            "task": "constrained",
            "model": "m",
            "backend": "import",
        }
    )


def test_append_results_prompt_from_suite(tmp_path: Path) -> None:
    """Rows whose prompt is their item's text store NULL; every reader returns the item's text,
    and a row with its own prompt keeps it."""
    from llmscope.io.export import export_rows

    with Store(tmp_path / "p.duckdb") as st:
        _suite(st)
        _run(st, "r")
        n = st.append_results(
            "r",
            {
                "item_id": ["b", "zz", "a"],
                "variant": ["v", "v", "v"],
                "prediction": ["1", "2", "2"],
            },
            start_seq=3,
            prompt_from_suite="s@1",
        )
        # a row of the same run that carries its own prompt (a run's templated prompt)
        st.append_results(
            "r", {"item_id": ["c"], "variant": ["w"], "prompt": ["Own prompt of c"]}, start_seq=6
        )
        stored = st.execute("SELECT seq, prompt FROM results ORDER BY seq").fetchall()
        with pytest.raises(ValueError, match="either a prompt column or prompt_from_suite"):
            st.append_results(
                "r", {"item_id": ["c"], "variant": ["v"], "prompt": ["P"]}, prompt_from_suite="s@1"
            )
        _run(st, "r2", "other@2")
        with pytest.raises(ValueError, match="not the suite of run 'r2' \\(other@2\\)"):
            st.append_results("r2", {"item_id": ["a"], "variant": ["v"]}, prompt_from_suite="s@1")
        with pytest.raises(ValueError, match="no such run"):
            st.append_results("nope", {"item_id": ["a"], "variant": ["v"]}, prompt_from_suite="s@1")

        def pairs(
            df: pd.DataFrame,
        ) -> list[tuple[int, str | None]]:  # pandas reads NULL text as NaN
            return [
                (int(q), None if pd.isna(p) else p)
                for q, p in zip(df["seq"], df["prompt"], strict=True)
            ]

        frame, bare = pairs(st.results_frame("r")), pairs(st.results_frame("r", with_items=False))
        decoded = pairs(st.results_decoded("r", with_items=False))
        results = [r.prompt for r in st.results("r")]
        detail_b = [v["prompt"] for v in st.item_detail("r", "b").variants]
        detail_c = [v["prompt"] for v in st.item_detail("r", "c").variants]
        exported = [(r.item_id, r.prompt) for r in export_rows(st, st.get_run("r") or {})]
    assert n == 3
    assert stored == [
        (3, None),
        (4, None),
        (5, None),
        (6, "Own prompt of c"),
    ]  # no copy of the text
    # the item's text in its place; an id the suite lacks has no prompt
    want = [(3, "Text of b"), (4, None), (5, "Text of a"), (6, "Own prompt of c")]
    assert frame == want and bare == want
    assert decoded == want
    assert results == [p for _, p in want]
    assert detail_b == ["Text of b"] and detail_c == ["Own prompt of c"]
    assert exported == [
        ("b", "Text of b"),
        ("zz", None),
        ("a", "Text of a"),
        ("c", "Own prompt of c"),
    ]


def test_item_answers(tmp_path: Path) -> None:
    with Store(tmp_path / "i.duckdb") as st:
        _suite(st)
        ans = st.item_answers("s@1")
        assert st.item_answers("nope") == {}
    assert ans == {"a": ("1", ("1", "2")), "b": ("2", ("1", "2")), "c": (None, None)}
    assert ans["a"][1] is ans["b"][1]  # one decode per distinct options text


def test_suite_items_without_text_and_own_option_lists(tmp_path: Path) -> None:
    with Store(tmp_path / "t.duckdb") as st:
        _suite(st)
        items = st.suite_items("s@1", with_fields=False, with_text=False)
    assert [(it.item_id, it.text, it.gold, it.options) for it in items] == [
        ("a", "", "1", ["1", "2"]),
        ("b", "", "2", ["1", "2"]),
        ("c", "", None, None),
    ]
    items[0].options.append("3")  # type: ignore[union-attr]
    assert items[1].options == ["1", "2"]  # each item has its own list


@pytest.mark.parametrize(
    "text",
    [
        b'{"Key": 1, "resp": "a"}\n{"Key": 2, "resp": "b"}\n',
        b'{"Key": 1}\r\n{"Key": 2}',  # CRLF, no final newline
        b'{"Key": 1}\n\n  \n{"Key": 3}\n',  # blank lines keep the line numbers
        b'\xef\xbb\xbf{"Key": -9223372036854775807}\n',
        b'{"Key": 9223372036854775808}\n',  # beyond int64: the stdlib reader
        b'{"Key": 12345678901234567890123}\n',
        b'{"x": 0.99999999999999999999}\n{"Key": 1}\n',
        b'{"Key": NaN}\n',
    ],
)
def test_fast_jsonl_equals_read_jsonl(tmp_path: Path, text: bytes) -> None:
    """The same records, or the same error (file, line, message), as the stdlib reader."""
    f = tmp_path / "r.jsonl"
    f.write_bytes(text)

    def outcome(read: object) -> object:
        try:
            return read(f)  # type: ignore[operator]
        except SuiteError as e:
            return str(e)

    assert outcome(fast_jsonl) == outcome(read_jsonl)


def test_fast_jsonl_line_numbers_by_hand(tmp_path: Path) -> None:
    f = tmp_path / "r.jsonl"
    f.write_text('{"a": 1}\n\n{"a": 2}\n', encoding="utf-8")
    assert fast_jsonl(f) == [(1, {"a": 1}), (3, {"a": 2})]
    g = tmp_path / "s.jsonl"
    g.write_text("".join(json.dumps({"k": k}) + "\n" for k in range(5)), encoding="utf-8")
    assert fast_jsonl(g) == [(k + 1, {"k": k}) for k in range(5)]
