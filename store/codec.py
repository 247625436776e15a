"""Values to and from stored columns: JSON text, finite floats, Arrow batches, top-token blobs.

`decode_json` is the one JSON decoder of stored columns.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
import sys
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson
import ormsgpack
import pyarrow as pa
import pyarrow.compute as pc
import zstandard

from llmscope.engine.types import Result
from llmscope.store.errors import StoreError
from llmscope.store.schema import RESULT_SCHEMA

if TYPE_CHECKING:
    import pandas as pd

# The `results` columns that hold JSON text (open shapes); every reader gets them decoded
# from the store (`decode_json`, `Store.results_frame(decoded=True)`, `Store.item_detail`).
JSON_RESULT_COLUMNS = ("probs", "top_tokens", "option_scores", "extra")

_ORJSON_OPTS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS


def encode_json(v: Any) -> str | None:
    """JSON text for a column; NaN/inf become null. orjson first: it is ~8x faster on result rows."""
    if v is None:
        return None
    try:
        return orjson.dumps(v, default=_json_default, option=_ORJSON_OPTS).decode()
    except (orjson.JSONEncodeError, TypeError):
        # what orjson refuses (integers beyond 64 bits, lone surrogates): the stdlib, with NaN
        # and infinities made null in the value as orjson does (replacing "NaN" in the text
        # also changed strings holding it, and left Infinity in)
        return json.dumps(
            _finite_tree(v),
            ensure_ascii=False,
            allow_nan=False,
            default=lambda o: _finite_tree(_json_default(o)),
        )


def _finite_tree(v: Any) -> Any:
    """`v` with every non-finite float (in dicts, lists and tuples) as None."""
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {k: _finite_tree(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_finite_tree(x) for x in v]
    return v


def _json_default(o: Any) -> Any:
    if hasattr(o, "item"):
        return o.item()
    if hasattr(o, "__dict__"):
        return o.__dict__
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def _finite(x: float | None) -> float | None:
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def is_null(v: Any) -> bool:
    """Whether a stored value read back is missing: None, NaT or NaN."""
    if v is None:
        return True
    if isinstance(v, float):
        return math.isnan(v)
    # NaT exists only once pandas is loaded; commands that never load it (`runs`) never see one
    pd = sys.modules.get("pandas")
    return pd is not None and v is pd.NaT


def _json_many(values: Iterable[Any]) -> list[str | None]:
    """`encode_json` of each value; orjson in one comprehension, the careful path only for a value it refuses."""
    dumps, opts, default = orjson.dumps, _ORJSON_OPTS, _json_default
    try:
        return [
            None if v is None else dumps(v, default=default, option=opts).decode() for v in values
        ]
    except (orjson.JSONEncodeError, TypeError):
        return [encode_json(v) for v in values]


def _json_array(values: Sequence[Any]) -> pa.Array:
    """`_json_many` as an Arrow string array, built from orjson's bytes without a Python str
    per value (Arrow checks the UTF-8 in one pass). Values orjson takes only with the careful
    options (non-string keys, objects needing `default`) go through `_json_many`: same text."""
    dumps, opt = orjson.dumps, orjson.OPT_SERIALIZE_NUMPY
    try:
        encoded = [None if v is None else dumps(v, option=opt) for v in values]
        return pa.array(encoded, type=pa.binary()).cast(pa.string())
    except (orjson.JSONEncodeError, TypeError, pa.ArrowInvalid):
        return pa.array(_json_many(values), type=pa.string())


def _finite_array(values: Sequence[Any]) -> pa.Array:
    """float64 with NaN/inf (and None) as null, converted in Arrow rather than per value."""
    try:
        arr = pa.array(values, type=pa.float64())
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
        return pa.array([_finite(v) for v in values], type=pa.float64())
    if arr.null_count == len(arr):
        return arr
    return pc.if_else(pc.is_finite(arr), arr, pa.scalar(None, pa.float64()))


def column_list(v: Any) -> list[Any]:
    """A column given as a Python sequence or an Arrow array, as a list."""
    return v.to_pylist() if isinstance(v, (pa.Array, pa.ChunkedArray)) else list(v)


def _decoded_probs(p: Any) -> Any:
    if isinstance(p, str):
        try:
            return orjson.loads(p)
        except orjson.JSONDecodeError:
            return None
    return p


def p_chosen_array(probs: Sequence[Any], preds: Sequence[Any]) -> pa.Array:
    """probs[prediction] per row (probs as dicts or JSON text)."""
    vals = []
    for p, x in zip(probs, preds, strict=True):
        d = _decoded_probs(p) if p is not None and x is not None else None
        vals.append(d.get(x) if isinstance(d, dict) else None)
    return _finite_array(vals)


def choice_method_array(extras: Sequence[Any]) -> pa.Array:
    """extra.choice_method per row (extras as dicts or JSON text; bulk imports repeat a few texts)."""
    out = []
    memo: dict[str, str | None] = {}
    for e in extras:
        if isinstance(e, str) and e in memo:
            out.append(memo[e])
            continue
        d = _decoded_probs(e) if e else None
        m = d.get("choice_method") if isinstance(d, dict) else None
        m = m if isinstance(m, str) else None
        if isinstance(e, str):
            memo[e] = m
        out.append(m)
    return pa.array(out, type=pa.string())


def _finite_columns(cols: Sequence[Sequence[Any]]) -> list[pa.Array] | None:
    """`_finite_array` of each column in one numpy conversion (None and NaN/inf as null), or
    None where numpy takes a value differently (then each column goes through `_finite_array`)."""
    try:
        arr = np.array(cols, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        return None
    if arr.shape != (len(cols), len(cols[0])):  # a value that is itself a sequence
        return None
    bad = ~np.isfinite(arr)
    return [pa.array(a, mask=m) for a, m in zip(arr, bad, strict=True)]


def results_to_arrow(
    run_id: str,
    rs: Sequence[Result],
    start_seq: int,
    now: dt.datetime,
    *,
    tops_inline: bool = True,
    keys: list[tuple[str, str]] | None = None,
) -> pa.Table:
    """Column-wise conversion of results to the `results` table's Arrow schema (floats are
    checked for NaN/inf in numpy; JSON columns encoded by orjson per value). `tops_inline=False`
    leaves `top_tokens` null (the store writes them as the batch's blob, `encode_top_tokens`).
    `keys`: a list that receives each row's (item_id, variant), in order (the store's key
    check; from the lists this pass builds anyway, not another pass over the results)."""
    n = len(rs)
    if not n:
        return RESULT_SCHEMA.empty_table()
    # the fields in one pass over the objects, appended to a list per field: the rows of a batch
    # lie scattered in memory among their top tokens (a pass per column cost ~2x), and a tuple
    # per row (attrgetter, zip) set off the cyclic GC over every live object (~3x)
    cols: list[list[Any]] = [[] for _ in range(14)]
    (
        item_ids,
        variants,
        prompts,
        probs,
        other,
        option_scores,
        preds,
        golds,
        correct,
        confidence,
        ntok,
        latency,
        errors,
        extras,
    ) = cols
    (
        a_id,
        a_var,
        a_prompt,
        a_probs,
        a_other,
        a_os,
        a_pred,
        a_gold,
        a_corr,
        a_conf,
        a_ntok,
        a_lat,
        a_err,
        a_extra,
    ) = [c.append for c in cols]
    for r in rs:
        a_id(r.item_id)
        a_var(r.variant)
        a_prompt(r.prompt)
        a_probs(r.probs)
        a_other(r.other)
        a_os(r.option_scores)
        a_pred(r.prediction)
        a_gold(r.gold)
        a_corr(r.correct)
        a_conf(r.confidence)
        a_ntok(r.n_tokens)
        a_lat(r.latency_ms)
        a_err(r.error)
        a_extra(r.extra)
    if keys is not None:
        keys.extend(zip(item_ids, variants, strict=True))
    try:
        n_tokens = pa.array([v or 0 for v in ntok], type=pa.int32())
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
        n_tokens = pa.array([int(v or 0) for v in ntok], type=pa.int32())
    methods = [e.get("choice_method") if e else None for e in extras]
    p_yes = [p.get("yes") if p else None for p in probs]
    p_no = [p.get("no") if p else None for p in probs]
    p_chosen = [
        p.get(x) if p and x is not None else None for p, x in zip(probs, preds, strict=True)
    ]
    float_cols = (p_yes, p_no, other, correct, confidence, latency, p_chosen)
    floats = _finite_columns(float_cols) or [_finite_array(c) for c in float_cols]
    # the run id, seq and time filled in Arrow from one value (a Python object per row cost
    # ~0.8 ms of a 4,096-row write's ~7 ms here)
    arrays = [
        pa.repeat(pa.scalar(run_id, type=pa.string()), n),
        pa.array(item_ids, type=pa.string()),
        pa.array(variants, type=pa.string()),
        pa.array(np.arange(start_seq, start_seq + n, dtype=np.int64)),
        pa.array(prompts, type=pa.string()),
        _json_array(probs),
        floats[0],
        floats[1],
        floats[2],
        _json_array([r.top_tokens for r in rs]) if tops_inline else pa.nulls(n, type=pa.string()),
        _json_array(option_scores),
        pa.array(preds, type=pa.string()),
        pa.array(golds, type=pa.string()),
        floats[3],
        floats[4],
        n_tokens,
        floats[5],
        pa.array(errors, type=pa.string()),
        _json_array([e or None for e in extras]),
        pa.repeat(pa.scalar(now, type=pa.timestamp("us")), n),
        floats[6],
        pa.array([m if isinstance(m, str) else None for m in methods], type=pa.string()),
        pa.nulls(n, type=pa.int64()),
    ]
    return pa.Table.from_arrays(arrays, schema=RESULT_SCHEMA)


def encode_top_tokens(tops: Sequence[Any]) -> bytes | None:
    """One batch's top tokens (a list per row, or None) as the blob stored in `result_blobs`:
    zstd level 1 over one MessagePack array (`pack_top_tokens`; None when no row has any). One
    encoding and one compression per batch instead of a JSON text per row: the per-row cost of
    top tokens was more than half of a write (docs/PERFORMANCE.md, "Writing results")."""
    raw = pack_top_tokens(tops)
    return None if raw is None else finish_top_tokens(tops, raw)


# The IEEE bits of the NaN that arithmetic produces (Python's, numpy's, torch's and the x86
# default, of either sign; a float32 NaN widened to float64 is one of these too) and of both
# infinities: what `_msgpack_nonfinite` looks for after a MessagePack float64 marker (0xcb)
_NONFINITE_BITS = np.array(
    [0x7FF8000000000000, 0xFFF8000000000000, 0x7FF0000000000000, 0xFFF0000000000000],
    dtype=np.uint64,
)


def _msgpack_nonfinite(raw: bytes) -> bool:
    """Whether a MessagePack text holds a float64 NaN or infinity (`_NONFINITE_BITS`), found
    with numpy (which releases the GIL: this runs on the store's encoder thread). A byte 0xcb
    inside another value can look like a marker: at worst the batch takes the JSON path.
    Written by hand: no MessagePack encoder turns non-finite floats into nil as JSON does."""
    b = np.frombuffer(raw, dtype=np.uint8)
    at = np.flatnonzero(b[:-8] == 0xCB)
    at = at[(b[at + 1] & 0x7F) == 0x7F]  # exponent's high bits set: rare, then the whole value
    if not len(at):
        return False
    bits = np.zeros(len(at), dtype=np.uint64)
    for k in range(1, 9):
        bits = (bits << np.uint64(8)) | b[at + k].astype(np.uint64)
    return bool(np.isin(bits, _NONFINITE_BITS).any())


def pack_top_tokens(tops: Sequence[Any]) -> bytes | None:
    """One MessagePack array of the rows' top tokens (ormsgpack, one call per batch), or the
    JSON array of `top_tokens_json` where ormsgpack refuses a value (numpy scalars,
    non-string keys, integers beyond 64 bits, lone surrogates). None when no row has any top
    tokens. `finish_top_tokens` checks what MessagePack would keep and JSON would not, then
    compresses. Against orjson's JSON of the same list: 40 % smaller, and its compression
    ~2.5x cheaper (docs/PERFORMANCE.md, "Writing results")."""
    if all(t is None for t in tops):
        return None
    try:
        return ormsgpack.packb(tops)
    except (ormsgpack.MsgpackEncodeError, TypeError):
        return top_tokens_json(tops)


def finish_top_tokens(tops: Sequence[Any], raw: bytes) -> bytes:
    """The stored blob of `pack_top_tokens(tops)`'s text: compressed, unless the MessagePack
    holds NaN or an infinity, which JSON stores as null; then the batch is stored as JSON, so
    every blob decodes to the values `encode_json` would have stored. `decode_top_tokens`
    reads both (a JSON array starts with `[`, a MessagePack array never does)."""
    if raw[:1] != b"[" and _msgpack_nonfinite(raw):
        raw = top_tokens_json(tops) or b"[]"
    return compress_top_tokens(raw)


def top_tokens_json(tops: Sequence[Any]) -> bytes | None:
    """The top tokens as one JSON array (None when no row has any): the blob's text for a
    batch MessagePack cannot hold as JSON would (`pack_top_tokens`), and of blobs written
    before it."""
    if all(t is None for t in tops):
        return None
    try:
        return orjson.dumps(tops, option=orjson.OPT_SERIALIZE_NUMPY)
    except (orjson.JSONEncodeError, TypeError):
        # what orjson refuses with the fast options (non-string keys, odd objects): the
        # careful encoder per row, the same text `encode_json` stores in a column
        return (
            "[" + ",".join("null" if t is None else (encode_json(t) or "null") for t in tops) + "]"
        ).encode()


def compress_top_tokens(raw: bytes) -> bytes:
    """A blob's text compressed (releases the GIL while it compresses)."""
    # zstd level 1. On 100k bench rows, 20 top tokens each, as JSON: 0.28 CPU s, 22 MB (stdlib
    # zlib level 1: 0.74 s, 29 MB; lz4: 0.19 s but 45 MB for DuckDB to write); as
    # MessagePack: ~0.07 s, 15 MB
    return zstandard.ZstdCompressor(level=1).compress(raw)


def decode_top_tokens(blob: bytes) -> list[Any]:
    """The per-row list of an `encode_top_tokens` blob (MessagePack; JSON for blobs written
    before it and for batches MessagePack could not hold as JSON does)."""
    raw = zstandard.ZstdDecompressor().decompress(blob)
    if raw[:1] == b"[":
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            v = decode_json(raw)
        else:
            # decode_json's values, with its scan for integers beyond 64 bits done by numpy
            # (`decode_json_many`): its regex took ~0.1 s over a 4,096-row blob's text
            v = decode_json_many([text])[0]
    else:
        try:
            v = ormsgpack.unpackb(raw)
        except (ormsgpack.MsgpackDecodeError, ValueError, TypeError) as e:
            raise StoreError(f"a stored top-tokens blob does not decode ({e})") from e
    if not isinstance(v, list):
        raise StoreError("a stored top-tokens blob does not hold a list")
    return v


_LONG_DIGITS = re.compile(r"-?[0-9]{19,}")


def decode_json(v: Any, default: Any = None) -> Any:
    """A stored JSON column's value decoded: text is parsed (`default` when it does not parse),
    anything else (None, an already decoded value) is returned as it is. The one JSON decoder
    for stored columns; code outside store/ calls this or gets decoded values from `Store`."""
    if isinstance(v, (bytes, str)):
        try:
            text = v if isinstance(v, str) else v.decode("utf-8", "replace")
            if any(not (-(2**63) <= int(m) <= 2**64 - 1) for m in _LONG_DIGITS.findall(text)):
                raise orjson.JSONDecodeError(
                    "orjson reads integers beyond 64 bits as floats", "", 0
                )
            return orjson.loads(v)
        except orjson.JSONDecodeError:
            try:  # what orjson refuses and the stdlib reads (NaN, integers beyond 64 bits)
                return json.loads(v)
            except (json.JSONDecodeError, UnicodeDecodeError):
                return default
    return v


def decode_json_cell(v: Any) -> Any:
    """`decode_json` of one cell of a stored JSON text column read into pandas: a missing value
    (NaN in pandas' string dtype, which is truthy, so `cell or {}` would hand back a float) is None."""
    return None if isinstance(v, float) and math.isnan(v) else decode_json(v)


_DIGITS_AS_ZERO = bytes(48 if 48 <= i <= 57 else i for i in range(256))


def _has_wide_int(text: str) -> bool:
    """Whether ``text`` holds an integer orjson cannot read exactly: `decode_json`'s
    ``_LONG_DIGITS`` test, with the digit runs found by numpy. Written by hand because the
    regex tries every position of every run of digits (probabilities have 17-digit runs):
    1.8 s over a 1M-row `probs` column, against ~0.1 s."""
    raw = text.encode("utf-8", "surrogatepass")
    # a run of 19 digits at all? (every digit made "0", one substring search in C: ~5x faster
    # than the scan below, which then runs only for texts that have one)
    if b"0" * 19 not in raw.translate(_DIGITS_AS_ZERO):
        return False
    b = np.frombuffer(raw, dtype=np.uint8)
    digit = ((b >= 48) & (b <= 57)).astype(np.int8)
    edges = np.diff(np.concatenate(([0], digit, [0])).astype(np.int8))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    wide = (ends - starts) >= 19
    for s, e in zip(starts[wide].tolist(), ends[wide].tolist(), strict=True):
        v = int(raw[s:e])
        if s > 0 and raw[s - 1] == 45:  # "-": the regex's optional sign
            v = -v
        if not (-(2**63) <= v <= 2**64 - 1):
            return True
    return False


def decode_json_many(values: Iterable[Any], default: Any = None) -> list[Any]:
    """`decode_json` of each value (a stored column's), with one scan of all the texts for
    integers beyond orjson's range instead of one per text: a 1M-row yes/no report decoded
    its `probs` column per row through the scan (~1.5 s)."""
    vals = list(values)
    texts = [v for v in vals if isinstance(v, str)]
    if len(texts) < len(vals) and any(isinstance(v, bytes) for v in vals):
        return [decode_json(v, default) for v in vals]
    # decode_json's test, over the texts in chunks (digit runs never cross the newlines)
    if any(_has_wide_int("\n".join(texts[i : i + 65536])) for i in range(0, len(texts), 65536)):
        return [
            decode_json(v, default) for v in vals
        ]  # some text needs the stdlib: each as decode_json does
    loads = orjson.loads
    if len(texts) == len(vals):
        try:  # every value text that orjson reads: one C-level map, no per-value Python frame
            return list(map(loads, vals))
        except orjson.JSONDecodeError:
            pass  # some text orjson refuses: value by value below
    out: list[Any] = []
    for v in vals:
        if isinstance(v, str):
            try:
                out.append(loads(v))
            except orjson.JSONDecodeError:
                out.append(decode_json(v, default))  # NaN and the like: what the stdlib reads
        else:
            out.append(v)
    return out


STORED_JSON_COLUMNS = (*JSON_RESULT_COLUMNS, "fields", "options", "item_fields", "item_options")


def decode_frame(df: pd.DataFrame, columns: Iterable[str] = STORED_JSON_COLUMNS) -> pd.DataFrame:
    """A copy of a frame of stored rows with its JSON columns (those present) decoded."""
    import pandas as pd

    out = df.copy()
    for c in columns:
        if c in out.columns:
            out[c] = pd.Series(
                [None if is_null(v) else decode_json(v) for v in out[c]],
                index=out.index,
                dtype=object,
            )
    return out
