"""`results_to_arrow` gives the same Arrow table, value for value and type for type, as the
per-column conversion it replaced (kept below as the reference, float columns value by value), over rows with odd
values: NaN and infinities, None, booleans, numpy scalars, numbers given as text, integers
beyond 2**53, missing probabilities, predictions outside them, non-string choice methods; and
it refuses what the reference refuses (complex numbers, hex text, sequences, huge integers)."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from llmscope.engine.types import Result
from llmscope.store.codec import _finite, _json_array, results_to_arrow
from llmscope.store.schema import RESULT_SCHEMA


def _ref_finite_array(values: Sequence[Any]) -> pa.Array:
    """Value by value: what the Arrow-side conversion must equal (and refuse alike)."""
    return pa.array([_finite(v) for v in values], type=pa.float64())


def _reference(run_id: str, rs: Sequence[Result], start_seq: int, now: dt.datetime) -> pa.Table:
    """The conversion as it was before the one-pass rewrite (a pass per column, floats in Arrow)."""
    n = len(rs)
    probs = [r.probs for r in rs]
    preds = [r.prediction for r in rs]
    extras = [r.extra for r in rs]
    ntok = [r.n_tokens for r in rs]
    try:
        n_tokens = pa.array([v or 0 for v in ntok], type=pa.int32())
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
        n_tokens = pa.array([int(v or 0) for v in ntok], type=pa.int32())
    methods = [e.get("choice_method") if e else None for e in extras]
    arrays = [
        pa.repeat(pa.scalar(run_id, type=pa.string()), n),
        pa.array([r.item_id for r in rs], type=pa.string()),
        pa.array([r.variant for r in rs], type=pa.string()),
        pa.array(np.arange(start_seq, start_seq + n, dtype=np.int64)),
        pa.array([r.prompt for r in rs], type=pa.string()),
        _json_array(probs),
        _ref_finite_array([p.get("yes") if p else None for p in probs]),
        _ref_finite_array([p.get("no") if p else None for p in probs]),
        _ref_finite_array([r.other for r in rs]),
        pa.nulls(n, type=pa.string()),
        _json_array([r.option_scores for r in rs]),
        pa.array(preds, type=pa.string()),
        pa.array([r.gold for r in rs], type=pa.string()),
        _ref_finite_array([r.correct for r in rs]),
        _ref_finite_array([r.confidence for r in rs]),
        n_tokens,
        _ref_finite_array([r.latency_ms for r in rs]),
        pa.array([r.error for r in rs], type=pa.string()),
        _json_array([e or None for e in extras]),
        pa.repeat(pa.scalar(now, type=pa.timestamp("us")), n),
        _ref_finite_array(
            [p.get(x) if p and x is not None else None for p, x in zip(probs, preds, strict=True)]
        ),
        pa.array([m if isinstance(m, str) else None for m in methods], type=pa.string()),
        pa.nulls(n, type=pa.int64()),
    ]
    return pa.Table.from_arrays(arrays, schema=RESULT_SCHEMA)


NOW = dt.datetime(2026, 11, 27, 4, 30, 1, 123456)
ODD_FLOATS: list[Any] = [
    None,
    math.nan,
    math.inf,
    -math.inf,
    -0.0,
    0.1,
    True,
    False,
    np.float32(0.25),
    np.float64(1 / 3),
    2**53 + 1,
    7,
    "0.5",
    "nan",
    5e-324,
    1.7976931348623157e308,
    " 1.5 ",
    "1_000",
    "infinity",
]


def _odd_rows() -> list[Result]:
    rows = []
    for i, v in enumerate(ODD_FLOATS * 3):
        k = i % len(ODD_FLOATS)
        probs: dict[str, Any] | None = (
            None if k == 0 else {} if k == 1 else {"yes": v, "no": ODD_FLOATS[-k], "maybe": 0.2}
        )
        rows.append(
            Result(
                item_id=f"i{i}",
                variant=("q1", "☃", "")[i % 3],
                prompt=f'p{i} 🙂 "q" \\',
                probs=probs,
                other=v,
                top_tokens=None,
                option_scores=None if k % 2 else {"a": {"lp": v if isinstance(v, float) else 0.0}},
                prediction=(None, "yes", "no", "maybe", "absent")[i % 5],
                gold=None if k == 3 else "yes",
                correct=ODD_FLOATS[(k + 1) % len(ODD_FLOATS)],
                confidence=ODD_FLOATS[(k + 2) % len(ODD_FLOATS)],
                n_tokens=(0, None, 5, np.int64(9))[i % 4],
                latency_ms=ODD_FLOATS[(k + 3) % len(ODD_FLOATS)],
                error=None if i % 4 else "boom",
                extra=({}, {"choice_method": "logprob"}, {"choice_method": 3}, {"x": [1, "y"]})[
                    i % 4
                ],
            )
        )
    return rows


def _same(a: pa.Table, b: pa.Table) -> None:
    assert a.schema == b.schema
    for name in a.column_names:
        x, y = a.column(name).to_pylist(), b.column(name).to_pylist()
        assert len(x) == len(y), name
        for i, (u, w) in enumerate(zip(x, y, strict=True)):
            # -0.0 == 0.0: compare the sign too
            same = (
                u == w
                and type(u) is type(w)
                and (not isinstance(u, float) or math.copysign(1, u) == math.copysign(1, w))
            )
            assert same, (name, i, u, w)


def test_odd_values_convert_as_the_reference() -> None:
    rows = _odd_rows()
    got = results_to_arrow("run/é", rows, 17, NOW, tops_inline=False)
    _same(got, _reference("run/é", rows, 17, NOW))
    # spot checks worked out by hand: non-finite floats and None are null, text numbers parse
    other = got.column("other").to_pylist()
    assert other[:4] == [None, None, None, None] and math.copysign(1, other[4]) == -1
    assert other[10] == 9007199254740992.0 and other[11] == 7.0 and other[12] == 0.5
    assert other[13] is None and got.column("seq").to_pylist()[:2] == [17, 18]


def test_each_float_column_alone_converts_as_the_reference() -> None:
    # one odd value in an otherwise plain batch, in each float column in turn
    base = [
        Result(
            item_id=f"i{i}",
            variant="v",
            probs={"yes": 0.5, "no": 0.4},
            prediction="yes",
            correct=1.0,
            confidence=0.5,
            latency_ms=1.5,
            other=0.1,
        )
        for i in range(5)
    ]
    for field in ("other", "correct", "confidence", "latency_ms"):
        for v in ODD_FLOATS:
            rows = [Result(**{**r.__dict__, "extra": {}}) for r in base]
            setattr(rows[2], field, v)
            _same(
                results_to_arrow("r", rows, 0, NOW, tops_inline=False),
                _reference("r", rows, 0, NOW),
            )


@pytest.mark.parametrize("bad", ["abc", "0x10", 1 + 2j, [0.5], {"a": 1}, 10**400])
def test_values_the_reference_refuses_are_refused(bad: Any) -> None:
    rows = [
        Result(item_id="a", variant="v", correct=bad),
        Result(item_id="b", variant="v", correct=[1.0]),
    ]
    rows = rows[:1] if not isinstance(bad, list) else rows
    with pytest.raises(Exception) as ref_err:
        _reference("r", rows, 0, NOW)
    with pytest.raises(type(ref_err.value)):
        results_to_arrow("r", rows, 0, NOW, tops_inline=False)
