"""Per-row scores of stored answer probabilities, over all rows at once.

The calibration producer scores each row's `probs` (answer -> probability): its multi-class
Brier, whether its top answers tie, the raw probability of its prediction. Per row in Python
these were ~10 s of a 1M-row report; here the rows' dicts are laid out once as flat arrays
(one entry per answer, rows in order) and each score is a few numpy passes. The results are
the per-row functions' (`metrics.brier_item`, `metrics.raw_confidence`, `metrics._is_tie`) bit
for bit: sums are accumulated in answer order by `np.bincount` (sequential, as the Python loop),
squares are libm's ``pow`` (what ``x ** 2`` calls), and any row the arrays cannot hold exactly (a
value that is not a number, NaN among tied values) is scored by the per-row function instead.
tests/analysis/test_prob_rows.py compares both on mixed runs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["FlatProbs", "flatten", "brier_items", "tie_flags", "raw_confidences"]


@dataclass
class FlatProbs:
    """Rows' probability dicts as flat arrays: entry ``i`` is answer ``key_uniques[key_codes[i]]``
    of row ``row[i]`` with value ``vals[i]`` (NaN for None); ``ok`` is False where a row's values
    are not all numbers (those rows are scored per row)."""

    n_rows: int
    row: np.ndarray
    key_codes: np.ndarray
    key_uniques: list[Any]
    vals: np.ndarray
    has: np.ndarray  # per row: a non-empty dict
    ok: np.ndarray  # per row: every value None, a float or an int
    none: np.ndarray  # per entry: the value was None


def flatten(probs: Sequence[Mapping[str, Any] | None]) -> FlatProbs:
    """:class:`FlatProbs` of decoded `probs` values (None or empty: no entries)."""
    n = len(probs)
    dicts = [p for p in probs if p]
    has = np.fromiter((bool(p) for p in probs), dtype=np.bool_, count=n)
    lens = np.fromiter(map(len, dicts), dtype=np.int64, count=len(dicts))
    row = np.repeat(np.flatnonzero(has), lens)
    keys = list(chain.from_iterable(dicts))
    raw: list[Any] = list(chain.from_iterable(p.values() for p in dicts))
    kc, ku = pd.factorize(pd.Series(keys, dtype=object), use_na_sentinel=True)
    types = set(map(type, raw))
    ok = np.ones(n, dtype=np.bool_)
    if types <= {float, int, type(None)}:  # what JSON numbers and null decode to: the common case
        none = (
            np.fromiter((v is None for v in raw), dtype=np.bool_, count=len(raw))
            if type(None) in types
            else np.zeros(len(raw), dtype=np.bool_)
        )
        vals = np.array(raw, dtype=np.float64)  # None -> NaN
    else:
        # anything else (a string, a bool, a nested value) keeps the per-row function's own
        # conversion: its row is scored per row
        num = np.fromiter(
            (v is None or type(v) in (float, int) for v in raw), dtype=np.bool_, count=len(raw)
        )
        ok[np.unique(row[np.logical_not(num)])] = False
        none = np.fromiter((v is None for v in raw), dtype=np.bool_, count=len(raw))
        vals = np.array(
            [v if nm and v is not None else math.nan for v, nm in zip(raw, num, strict=True)],
            dtype=np.float64,
        )
    return FlatProbs(n, row, np.asarray(kc), list(ku), vals, has, ok, none)


def _space_codes(
    codes: np.ndarray, uniques: Sequence[Any], norm: Callable[[Any], Any], space: dict[Any, int]
) -> np.ndarray:
    """Per value, the code in ``space`` (normalised text -> int, grown here) of ``norm`` of its
    distinct value; -1 where the value is missing or normalises to None. One ``norm`` call per
    distinct value."""
    ids = []
    for u in uniques:
        t = norm(u)
        ids.append(-1 if t is None else space.setdefault(t, len(space)))
    return np.array([*ids, -1], dtype=np.int64)[codes]  # code -1 (missing) takes the last entry


def _factorized(values: Sequence[Any] | pd.Series) -> tuple[np.ndarray, list[Any]]:
    if isinstance(values, pd.Series) and isinstance(values.array, pd.arrays.ArrowStringArray):
        # a stored text column: Arrow's dictionary encoding, the same codes and texts as the
        # object path below (missing -> -1) without a Python string per row
        from .frame_codes import factorize

        codes, uniques = factorize(values)  # computed once per column (frame_codes.py)
        return codes, list(uniques)
    codes, uniques = pd.factorize(pd.Series(list(values), dtype=object), use_na_sentinel=True)
    return np.asarray(codes), list(uniques)


def _listed(values: Sequence[Any] | pd.Series) -> list[Any]:
    return values.tolist() if isinstance(values, pd.Series) else list(values)


def _gold_norm(g: Any) -> Any:
    if g is None or (isinstance(g, float) and math.isnan(g)):
        return None
    return str(g).strip().lower()


def brier_items(
    fp: FlatProbs,
    gold: Sequence[Any] | pd.Series,
    scored: np.ndarray,
    per_row: Callable[[Any, Any], float],
    probs: Sequence[Any],
) -> np.ndarray:
    """`brier_item(probs[i], gold[i])` where ``scored[i]``, else NaN, for every row."""
    n = fp.n_rows
    # one code space for normalised keys and golds: a key matches when its text equals the gold's
    space: dict[Any, int] = {}
    kc = _space_codes(fp.key_codes, fp.key_uniques, lambda k: str(k).strip().lower(), space)
    gc = _space_codes(*_factorized(gold), _gold_norm, space)
    ind = (kc == gc[fp.row]).astype(float)
    # float_power: libm's pow, what Python's `x ** 2` calls (x * x and numpy's power differ from
    # it in the last bit for ~0.1% of values)
    sq = np.float_power(fp.vals - ind, np.full(len(ind), 2.0))
    s = np.bincount(fp.row, weights=sq, minlength=n)  # in answer order, from 0.0
    hit = np.bincount(fp.row, weights=ind, minlength=n) > 0
    s = np.where(hit, s, s + 1.0)
    valid = fp.has & (gc >= 0) & scored
    if fp.none.any():  # a row with a None value scores NaN
        valid &= ~(np.bincount(fp.row, weights=fp.none, minlength=n) > 0)
    out = np.where(valid, s, math.nan)
    rest = np.flatnonzero(~fp.ok & scored).tolist()
    gold_l = _listed(gold) if rest else []
    for i in rest:
        out[i] = per_row(probs[i], gold_l[i])
    return out


def tie_flags(
    fp: FlatProbs, scored: np.ndarray, per_row: Callable[[Any], bool], probs: Sequence[Any]
) -> np.ndarray:
    """``float(_is_tie(probs[i]))`` where the row has probabilities and ``scored[i]``, else NaN."""
    n = fp.n_rows
    if fp.none.any():
        valid = ~fp.none
        r, v = fp.row[valid], fp.vals[valid]
    else:  # no None value (a yes/no column): the arrays as they are
        r, v = fp.row, fp.vals
    top = np.full(n, -np.inf)
    with np.errstate(invalid="ignore"):  # NaN values: those rows are scored per row below
        np.maximum.at(top, r, v)
    n_valid = np.bincount(r, minlength=n)
    n_top = np.bincount(r, weights=(v == top[r]), minlength=n)
    tie = ((n_valid >= 2) & (n_top >= 2)).astype(float)
    out = np.where(fp.has & scored, tie, math.nan)
    # NaN among the values: sorted() then orders by comparisons that are all false
    nan_row = np.zeros(n, dtype=np.bool_)
    nan_row[r[np.isnan(v)]] = True
    for i in np.flatnonzero((~fp.ok | nan_row) & fp.has & scored).tolist():
        out[i] = float(per_row(probs[i]))
    return out


def raw_confidences(
    fp: FlatProbs,
    predictions: Sequence[Any] | pd.Series,
    per_row: Callable[[Any, Any], float],
    probs: Sequence[Any],
) -> np.ndarray:
    """`raw_confidence(probs[i], predictions[i])` for every row."""
    n = fp.n_rows
    space: dict[Any, int] = {}
    kc = _space_codes(fp.key_codes, fp.key_uniques, str, space)
    pc = _space_codes(
        *_factorized(predictions), lambda x: None if _gold_norm(x) is None else str(x), space
    )
    hit = kc == pc[fp.row]
    out = np.full(n, math.nan)
    out[fp.row[hit]] = fp.vals[hit]  # at most one key per row equals the prediction
    out[~fp.has | (pc < 0)] = math.nan
    rest = np.flatnonzero(~fp.ok).tolist()
    preds = _listed(predictions) if rest else []
    for i in rest:
        out[i] = per_row(probs[i], preds[i])
    return out


# A yes/no row's `probs` text as the store writes it (orjson: `{"yes":a,"no":b}`; json.dumps
# adds a space after ":" and ","): read by Arrow instead of a dict per row. Numbers are kept to
# a shape both parsers round the same way (correctly: orjson's and Arrow's string-to-double
# are exact to the nearest double): no sign (a probability; "-0" would be orjson's int 0 but
# Arrow's -0.0), at most 15 integer digits, at most a 2-digit exponent.
_NUM = r"(?:0|[1-9][0-9]{0,14})(?:\.[0-9]+)?(?:[eE][+-]?[0-9]{1,2})?"
_YES_NO = r'^\{"yes": ?(?P<y>' + _NUM + r'), ?"no": ?(?P<n>' + _NUM + r")\}$"


def flatten_column(
    column: pd.Series, decode: Callable[[list[Any]], list[Any]]
) -> tuple[list[Any], FlatProbs]:
    """:func:`flatten` of a stored `probs` column, and the decoded dicts of the rows that needed
    them (None elsewhere: the per-row fallbacks only read rows :func:`flatten` marks not ok).

    Texts of the yes/no shape (`_YES_NO`) are read by Arrow (a regex and a cast, ~0.4 s over 1M
    rows against ~1.1 s for a dict per row); every other row is decoded by ``decode`` (text ->
    dict or None per row) as before. A column that is not Arrow text (a frame built by hand)
    is decoded whole."""
    import pyarrow as pa

    n = len(column)
    if not isinstance(column.array, pd.arrays.ArrowStringArray):
        whole = decode(column.tolist())
        return whole, flatten(whole)
    arr = pa.array(column.array)
    fast, y, no = _yes_no_values(arr)
    rest = np.flatnonzero(~fast)
    probs: list[Any] = [None] * n
    decoded = decode(arr.take(pa.array(rest)).to_pylist()) if len(rest) else []
    for i, d in zip(rest.tolist(), decoded, strict=True):
        probs[i] = d
    part = flatten(decoded)
    fi = np.flatnonzero(fast)
    uniques = list(part.key_uniques)
    codes = {k: i for i, k in enumerate(uniques)}
    for k in ("yes", "no"):
        if k not in codes:
            codes[k] = len(uniques)
            uniques.append(k)
    k_fast = np.tile(np.array([codes["yes"], codes["no"]], dtype=np.int64), len(fi))
    has = np.zeros(n, dtype=np.bool_)
    has[fast] = True
    has[rest] = part.has
    ok = np.ones(n, dtype=np.bool_)
    ok[rest] = part.ok
    v_fast = np.empty(2 * len(fi), dtype=np.float64)
    v_fast[0::2], v_fast[1::2] = y, no
    flat = FlatProbs(
        n_rows=n,
        row=np.concatenate([np.repeat(fi, 2), rest[part.row]]),
        key_codes=np.concatenate([k_fast, np.asarray(part.key_codes, dtype=np.int64)]),
        key_uniques=uniques,
        vals=np.concatenate([v_fast, part.vals]),
        has=has,
        ok=ok,
        none=np.concatenate([np.zeros(2 * len(fi), dtype=np.bool_), part.none]),
    )
    return probs, flat


def _yes_no_values(arr: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Which texts have the yes/no shape (`_YES_NO`), and their two numbers (those rows only,
    in order): the texts the regex's groups capture, cast by Arrow.

    The shape is checked by the regex without captures (RE2 then needs no submatch pass); the
    numbers' texts are then found from the shape (after `"yes":` and an optional space, up to
    the one comma; after `"no":` and an optional space, up to the closing brace) and cast as
    string views into the column's own bytes: no text is copied (the regex's captures were
    ~0.3 s of a 1M-row report). A chunk that is not plain text (large text, a view type) is
    read by the regex's captures as before."""
    import pyarrow as pa
    import pyarrow.compute as pc

    chunks = arr.chunks if isinstance(arr, pa.ChunkedArray) else [arr]
    fast_parts, y_parts, n_parts = [], [], []
    for ch in chunks:
        if pa.types.is_string(ch.type):
            f, y, n = _yes_no_views(ch)
        else:
            st = pc.extract_regex(ch, _YES_NO)
            f = np.asarray(st.is_valid().to_numpy(zero_copy_only=False), dtype=np.bool_)
            sel = pa.array(f)
            y = pc.cast(pc.struct_field(st, "y").filter(sel), pa.float64()).to_numpy(
                zero_copy_only=False
            )
            n = pc.cast(pc.struct_field(st, "n").filter(sel), pa.float64()).to_numpy(
                zero_copy_only=False
            )
        fast_parts.append(f)
        y_parts.append(np.asarray(y, dtype=np.float64))
        n_parts.append(np.asarray(n, dtype=np.float64))
    if not fast_parts:
        e = np.zeros(0, dtype=np.float64)
        return np.zeros(0, dtype=np.bool_), e, e
    return np.concatenate(fast_parts), np.concatenate(y_parts), np.concatenate(n_parts)


def _yes_no_views(ch: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_yes_no_values` of one plain-text Arrow chunk (int32 offsets)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    m = pc.match_substring_regex(ch, _YES_NO)
    fast = np.asarray(m.fill_null(False).to_numpy(zero_copy_only=False), dtype=np.bool_)
    fi = np.flatnonzero(fast)
    if not len(fi):
        e = np.zeros(0, dtype=np.float64)
        return fast, e, e
    bufs = ch.buffers()
    off = np.frombuffer(bufs[1], dtype=np.int32)[ch.offset : ch.offset + len(ch) + 1].astype(
        np.int64
    )
    data_buf = bufs[2]
    data = np.frombuffer(data_buf, dtype=np.uint8)
    start, end = off[:-1][fi], off[1:][fi]
    # every matched text is ASCII with one comma: its index is a byte offset
    comma = (
        start
        + np.asarray(pc.find_substring(ch, ",").fill_null(-1).to_numpy(zero_copy_only=False))[fi]
    )
    ys = start + 7  # after '{"yes":'
    ys += data[ys] == 32  # an optional space
    ns = comma + 1
    ns += data[ns] == 32
    ns += 5  # after '"no":'
    ns += data[ns] == 32
    y = pc.cast(_views(data, data_buf, ys, comma), pa.float64())
    n = pc.cast(_views(data, data_buf, ns, end - 1), pa.float64())
    return fast, y.to_numpy(zero_copy_only=False), n.to_numpy(zero_copy_only=False)


def _views(data: np.ndarray, data_buf: Any, start: np.ndarray, stop: np.ndarray) -> Any:
    """A string-view array of ``data[start[i]:stop[i]]`` over the buffer ``data_buf`` (Arrow's
    view layout: length, then the text inline up to 12 bytes, else its first 4 bytes, buffer
    0 and its offset)."""
    import pyarrow as pa

    k = len(start)
    length = (stop - start).astype(np.int32)
    last = len(data) - 1
    v = np.zeros((k, 4), dtype=np.int32)  # length, prefix, buffer 0, offset
    v[:, 0] = length
    if len(data) >= 4:
        # the first 4 bytes of each text, as the int32 at every byte offset (an unaligned
        # view); a text starting in the last 3 bytes is short, rewritten below
        at = np.ndarray((len(data) - 3,), dtype="<i4", buffer=data, strides=(1,))
        v[:, 1] = at[np.minimum(start, len(data) - 4)]
    v[:, 3] = start
    short = np.flatnonzero(length <= 12)
    if len(short):  # inline: the text itself, zero-padded
        j12 = np.arange(12)
        got = data[np.minimum(start[short, None] + j12, last)]
        got[j12[None, :] >= length[short, None]] = 0
        v.view(np.uint8).reshape(k, 16)[short, 4:16] = got
    return pa.Array.from_buffers(pa.string_view(), k, [None, pa.py_buffer(v), data_buf])
