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
