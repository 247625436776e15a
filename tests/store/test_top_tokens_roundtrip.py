"""Top tokens written through `write_results` read back value for value, odd ones included:
Unicode beyond the BMP, combining marks, control characters and JSON's own quote and
backslash in token text, empty lists, rows without any, floats that need 17 digits, subnormals,
-0.0, integers beyond 64 bits; NaN and infinities become None (JSON has no such numbers), as
every stored JSON value."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

from llmscope.engine.types import Result
from llmscope.store.db import Store

TOKENS = [
    "🙂",
    "e\u0301",
    "\u202eRTL",
    'a"b',
    "back\\slash",
    "new\nline\ttab",
    "\x00nul",
    "\x1f",
    " ",
    "",
    "日本語",
    "\ufffd",
    "𝔘𝔫𝔦",
    "NaN",
    " Infinity",
]
# rows from BIG on hold integers beyond 64 bits, which orjson refuses: their batch takes the
# stdlib encoder, the earlier batches orjson; both must store the same values
BIG = 256
FLOATS = [0.1, 1 / 3, 2.0**-1074, -0.0, sys.float_info.max, 0.30000000000000004, 1e-300, 1.0, 0.0]


def _tops(k: int) -> list[dict[str, Any]] | None:
    """Row k's top tokens: some rows none, some an empty list, the rest a mix of odd values."""
    if k % 7 == 3:
        return None
    if k % 7 == 5:
        return []
    out: list[dict[str, Any]] = []
    for j in range(1 + k % 4):
        v = FLOATS[(k + j) % len(FLOATS)]
        if (k + j) % 11 == 0:
            v = math.nan
        elif (k + j) % 13 == 0:
            v = -math.inf if j % 2 else math.inf
        out.append(
            {
                "token": TOKENS[(k * 3 + j) % len(TOKENS)],
                "id": 2**70 + k if j == 2 and k >= BIG else k * 10 + j,
                "prob": v,
            }
        )
    if k % 5 == 0:
        out.append(
            {"prob": 0.25, "token": "order", "extra": [1, "x", None]}
        )  # other keys, other order
    return out


def _stored(v: Any) -> Any:
    """What JSON keeps of a value: NaN and infinities as None, everything else as it is."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _stored(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_stored(x) for x in v]
    return v


def _same(a: Any, b: Any) -> bool:
    """Equal value for value, with the float's sign and type (-0.0 is not 0.0, 1.0 is not 1)."""
    if isinstance(a, float) or isinstance(b, float):
        return type(a) is type(b) and (a == b and math.copysign(1, a) == math.copysign(1, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def test_odd_top_tokens_round_trip(tmp_path: Path) -> None:
    n = 300
    rows = [
        Result(
            item_id=f"i{k:03d}",
            variant="q1",
            prompt="p",
            probs={"yes": 0.5, "no": 0.5},
            top_tokens=_tops(k),
            prediction="yes",
            gold="yes",
            correct=1.0,
        )
        for k in range(n)
    ]
    with Store(tmp_path / "t.duckdb") as st:
        st.create_run({"run_id": "r", "suite_id": "s", "task": "yesno"})
        seq = 0
        for lo in range(0, n, 128):  # several batches, as the run loop writes them
            seq += st.write_results("r", rows[lo : lo + 128], start_seq=seq)
    with Store(tmp_path / "t.duckdb", read_only=True) as st:
        got = {r.item_id: r.top_tokens for r in st.results("r")}
        detail = st.item_detail("r", "i004").variants[0]["top_tokens"]
    assert len(got) == n
    for k in range(n):
        want = _stored(_tops(k))
        assert _same(got[f"i{k:03d}"], want), (k, got[f"i{k:03d}"], want)
    assert _same(detail, _stored(_tops(4)))
    # the cases the data was built to hold are there
    for part in (range(BIG), range(BIG, n)):
        flat = [t for k in part for t in (_tops(k) or [])]
        assert any(isinstance(t["prob"], float) and math.isnan(t["prob"]) for t in flat)
        assert any(t["prob"] == math.inf for t in flat) and any(
            t["prob"] == -math.inf for t in flat
        )
        assert {t["token"] for t in flat} >= {"NaN", " Infinity"}
    assert any(t.get("id", 0) > 2**64 for k in range(BIG, n) for t in (_tops(k) or []))
    assert {t["token"] for k in range(n) for t in (_tops(k) or [])} >= set(TOKENS)


def _blob_texts(path: Path) -> list[bytes]:
    """Each stored top-tokens blob of a file, decompressed (zstd, read here independently)."""
    import duckdb
    import zstandard

    con = duckdb.connect(str(path), read_only=True)
    try:
        rows = con.execute("SELECT top_tokens FROM result_blobs ORDER BY blob_id").fetchall()
    finally:
        con.close()
    return [zstandard.ZstdDecompressor().decompress(r[0]) for r in rows]


def _write_batches(path: Path, batches: list[list[Any]]) -> dict[str, Any]:
    """Write each batch of top-token lists as one `write_results` call; the rows read back."""
    with Store(path) as st:
        st.create_run({"run_id": "r", "suite_id": "s", "task": "yesno"})
        seq = 0
        for b, tops in enumerate(batches):
            rows = [
                Result(item_id=f"b{b}i{k:03d}", variant="q1", top_tokens=t)
                for k, t in enumerate(tops)
            ]
            seq += st.write_results("r", rows, start_seq=seq)
    with Store(path, read_only=True) as st:
        return {r.item_id: r.top_tokens for r in st.results("r")}


def test_blobs_are_messagepack_unless_json_would_store_other_values(tmp_path: Path) -> None:
    """A batch of finite top tokens is stored as MessagePack and reads back value for value
    (odd tokens, 17-digit floats, subnormals, -0.0, 1.0 as a float, empty lists, rows without
    any); a batch holding NaN, an infinity, a numpy float32 or an integer beyond 64 bits is
    stored as JSON, as before, and reads back what JSON keeps."""
    import numpy as np
    import orjson
    import ormsgpack

    finite = [
        t
        if t is None
        else [
            x
            for x in t
            if isinstance(x["prob"], float) and math.isfinite(x["prob"]) and x.get("id", 0) < 2**64
        ]
        for t in map(_tops, range(BIG))
    ]
    nan_batch = [
        [{"token": "a", "id": 1, "prob": 0.5}],
        [{"token": "b", "id": 2, "prob": math.nan}],
    ]
    inf_batch = [[{"token": "c", "id": 3, "prob": -math.inf}]]
    f32_batch = [[{"token": "d", "id": 4, "prob": np.float32(0.1)}]]
    big_batch = [[{"token": "e", "id": 2**70, "prob": 0.25}]]
    got = _write_batches(
        tmp_path / "t.duckdb", [finite, nan_batch, inf_batch, f32_batch, big_batch]
    )
    texts = _blob_texts(tmp_path / "t.duckdb")
    assert len(texts) == 5
    # the finite batch: MessagePack (an array header, not JSON's "["), the very values written
    assert texts[0][:1] != b"[" and _same(ormsgpack.unpackb(texts[0]), finite)
    assert all(_same(got[f"b0i{k:03d}"], finite[k]) for k in range(BIG))
    assert any(t == [] for t in finite) and any(t is None for t in finite)
    flat = [x["prob"] for t in finite for x in (t or [])]
    assert (
        2.0**-1074 in flat and 1.0 in flat and any(math.copysign(1, v) < 0 for v in flat if v == 0)
    )
    # the others: JSON arrays, as orjson / the stdlib write them
    assert all(t[:1] == b"[" for t in texts[1:])
    assert got["b1i000"] == [{"token": "a", "id": 1, "prob": 0.5}]
    assert got["b1i001"] == [{"token": "b", "id": 2, "prob": None}]
    assert got["b2i000"] == [{"token": "c", "id": 3, "prob": None}]
    want_f32 = orjson.loads(orjson.dumps(f32_batch[0], option=orjson.OPT_SERIALIZE_NUMPY))
    assert got["b3i000"] == want_f32 and want_f32[0]["prob"] == 0.1  # float32's shortest text
    assert got["b4i000"] == [{"token": "e", "id": 2**70, "prob": 0.25}]


def test_bytes_that_only_look_like_a_nan_keep_their_values(tmp_path: Path) -> None:
    """An integer whose MessagePack bytes read like a float64 NaN (marker 0xcb, then the NaN's
    bits) sends its batch the JSON way; the values read back are the ones written."""
    import ormsgpack

    tops = [[0xCB7FF80000000000, 0, {"token": "x", "id": 7, "prob": 0.5}]]
    assert bytes.fromhex("cb7ff8000000000000") in ormsgpack.packb(tops)  # what the test is about
    got = _write_batches(tmp_path / "t.duckdb", [tops])
    assert got["b0i000"] == tops[0]
    assert _blob_texts(tmp_path / "t.duckdb")[0][:1] == b"["


def test_json_blobs_written_before_messagepack_still_read(tmp_path: Path) -> None:
    """A file whose blob is the JSON array the store wrote before (zstd over orjson's text)."""
    import duckdb
    import orjson
    import zstandard

    tops = [[{"token": " yes", "id": 5, "prob": 0.75}], None]
    path = tmp_path / "t.duckdb"
    _write_batches(path, [tops])
    old = zstandard.ZstdCompressor(level=1).compress(orjson.dumps(tops))
    con = duckdb.connect(str(path))
    con.execute("UPDATE result_blobs SET top_tokens = ?", [old])
    con.close()
    with Store(path, read_only=True) as st:
        got = {r.item_id: r.top_tokens for r in st.results("r")}
    assert got == {"b0i000": tops[0], "b0i001": None}
