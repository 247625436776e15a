"""Integer codes of a stored text column, computed once per column and shared by the producers.

A 1M-row yes/no report factorized the same Arrow text columns (gold, prediction, variant,
item id) eight times over its producers, ~40 ms each (Arrow's hash encoding). The frames the
producers see share the column's Arrow array (``ctx.ok()`` is a shallow copy, column
selections keep it), so the codes are kept per Arrow array: the same array gives the same
codes, whichever producer asks first. The cache holds the array itself, so an id is never
reused while its entry lives; it keeps a few columns only.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

__all__ = ["factorize"]

_MAX = 8
_CACHE: dict[tuple[int, bool], tuple[Any, np.ndarray, Any]] = {}


def factorize(values: pd.Series, sort: bool = False) -> tuple[np.ndarray, Any]:
    """``pd.factorize(values, sort=sort, use_na_sentinel=True)`` (missing: -1), computed once
    per Arrow text column. The arrays returned are shared: do not write into them."""
    arr = values.array if isinstance(values, pd.Series) else None
    if not isinstance(arr, pd.arrays.ArrowStringArray):
        codes, uniques = pd.factorize(values, sort=sort, use_na_sentinel=True)
        return np.asarray(codes), uniques
    pa_arr = arr._pa_array  # type: ignore[attr-defined]  # the Arrow data, shared by the frames
    key = (id(pa_arr), sort)
    hit = _CACHE.get(key)
    if hit is not None and hit[0] is pa_arr:
        return hit[1], hit[2]
    codes, uniques = pd.factorize(values, sort=sort, use_na_sentinel=True)
    codes = np.asarray(codes)
    codes.flags.writeable = False
    if len(_CACHE) >= _MAX:
        _CACHE.pop(next(iter(_CACHE)))
    _CACHE[key] = (pa_arr, codes, uniques)
    return codes, uniques
