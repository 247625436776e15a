"""Shared codes of stored text columns (analysis/frame_codes.py) and the yes/no `probs` numbers
read as Arrow string views (analysis/prob_rows.py): both against the plain computation."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from llmscope.analysis import frame_codes
from llmscope.analysis.prob_rows import _YES_NO, _yes_no_values


def _text(values: list[str | None]) -> pd.Series:
    return pd.Series(pd.array(values, dtype="str"))


def test_codes_equal_pandas_factorize_and_are_shared_per_arrow_column() -> None:
    s = _text(["b", "a", None, "b", "c", "a"])
    for sort in (False, True):
        codes, uniques = frame_codes.factorize(s, sort=sort)
        want_codes, want_uniques = pd.factorize(s, sort=sort, use_na_sentinel=True)
        assert codes.tolist() == list(want_codes)
        assert list(uniques) == list(want_uniques)
    # a frame sharing the column (a shallow copy, a column selection) gets the same arrays
    df = pd.DataFrame({"g": s, "x": range(6)})
    first = frame_codes.factorize(df["g"])[0]
    assert frame_codes.factorize(df.copy(deep=False)[["g"]]["g"])[0] is first
    assert not first.flags.writeable  # shared: nobody may write into it
    # a filtered frame holds another column: its own codes, numbered from its own rows
    sub = df[df["x"] >= 2]["g"]
    assert frame_codes.factorize(sub)[0].tolist() == [-1, 0, 1, 2]
    # not Arrow text: pandas' own result, not cached
    obj = pd.Series(["y", None, "x", "y"], dtype=object)
    assert frame_codes.factorize(obj)[0].tolist() == [0, -1, 1, 0]


def _captures(arr: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The numbers as the regex's capture groups give them, cast by Arrow."""
    st = pc.extract_regex(arr, _YES_NO)
    fast = np.asarray(st.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    sel = pa.array(fast)
    y = pc.cast(pc.struct_field(st, "y").filter(sel), pa.float64()).to_numpy(zero_copy_only=False)
    n = pc.cast(pc.struct_field(st, "n").filter(sel), pa.float64()).to_numpy(zero_copy_only=False)
    return fast, np.asarray(y, dtype=float), np.asarray(n, dtype=float)


def test_yes_no_numbers_equal_the_regex_captures_bit_for_bit() -> None:
    rng = np.random.default_rng(7)
    texts: list[str | None] = [
        json.dumps({"yes": float(a), "no": float(b)}) for a, b in rng.random((300, 2))
    ]
    texts += [
        '{"yes":0.1,"no":0.9}',
        '{"yes": 1, "no": 0}',
        '{"yes":0,"no":1e-05}',
        None,
        "",
        "garbage",
        '{"yes": 0.1, "no": 0.2, "x": 3}',
        '{"no": 0.1, "yes": 0.2}',
        '{"yes": -0.0, "no": 1}',
        '{"yes": 0.123456789012, "no": 0.1234567890123}',
        '{"yes": 1e+16, "no": 3.5E-7}',
        '{"yes":  0.1, "no": 0.2}',
        '{"yes": 0.5,"no" : 0.5}',
        '{"yes":123456789012345,"no":0.5}',
        '{"yes": 0.30000000000000004, "no":0.7}',
        '{"yes": 5e-324, "no": 0.5}',
    ]
    plain = pa.array(texts, pa.string())
    cases = [
        plain,
        plain.slice(5, 200),
        pa.chunked_array([plain.slice(0, 150), plain.slice(150)]),
        pa.array(texts, pa.large_string()),
    ]
    for arr in cases:
        got, want = _yes_no_values(arr), _captures(arr)
        assert got[0].tolist() == want[0].tolist()
        for g, w in zip(got[1:], want[1:], strict=True):
            assert g.tobytes() == w.tobytes()  # the same doubles, bit for bit
    assert _captures(plain)[0].sum() > 300  # the shapes the store writes are read this way
