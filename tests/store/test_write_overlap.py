"""`write_results` encodes a batch's top-tokens blob on a worker thread while it inserts the
rows: what is stored is byte for byte the blob of the sequential path, and a value the encoder
refuses still leaves nothing written."""

from __future__ import annotations

import ormsgpack
import pytest
import zstandard

from llmscope.engine.types import Result
from llmscope.store.db import Store


def _tops(i: int) -> list[dict[str, object]] | None:
    if i % 5 == 3:
        return None  # a row without top tokens: null in the blob's list
    return [{"token": f' é{i}"{j}\\', "id": 100 + j, "prob": 0.5 / (j + 1)} for j in range(4)]


def _rows(n: int, start: int = 0, tops=_tops) -> list[Result]:
    return [
        Result(
            item_id=f"i{i:04d}",
            variant="q1",
            prompt=f"P {i}",
            probs={"yes": 0.6, "no": 0.3},
            other=0.1,
            top_tokens=tops(i),
            prediction="yes",
            gold="yes",
            correct=1.0,
        )
        for i in range(start, start + n)
    ]


def test_stored_blob_is_the_sequential_bytes(tmp_path):
    db = tmp_path / "w.duckdb"
    rows = _rows(300)
    # a duplicate key inside the batch and one already stored: skipped rows keep their entry
    batch = [*rows[:200], rows[5], *rows[200:]]
    with Store(str(db)) as st:
        st.create_run({"run_id": "r", "suite_id": "s", "task": "yesno"})
        st.write_results("r", _rows(1, 250), start_seq=10_000)  # i0250 stored first
        st.write_results("r", batch, start_seq=0)
        blobs = st.execute(
            "SELECT seq_lo, top_tokens FROM result_blobs ORDER BY blob_id"
        ).fetchall()
        n = st.count_results("r")[0]
        back = {r.item_id: r.top_tokens for r in st.results("r")}
    # the expected bytes built here from ormsgpack and zstd directly (level 1, as documented)
    want = zstandard.ZstdCompressor(level=1).compress(
        ormsgpack.packb([r.top_tokens for r in batch])
    )
    assert blobs[1] == (0, want)
    assert n == 300
    assert back == {f"i{i:04d}": _tops(i) for i in range(300)}


def test_refused_value_writes_nothing(tmp_path):
    db = tmp_path / "w.duckdb"

    def bad(i: int) -> list[dict[str, object]] | None:
        return [{"token": object()}] if i == 7 else _tops(i)

    with Store(str(db)) as st:
        st.create_run({"run_id": "r", "suite_id": "s", "task": "yesno"})
        with pytest.raises(TypeError):
            st.write_results("r", _rows(20, tops=bad))
        assert st.count_results("r")[0] == 0
        assert st.execute("SELECT count(*) FROM result_blobs").fetchone() == (0,)
        assert st.write_results("r", _rows(20)) == 20  # the store still writes
        assert st.count_results("r")[0] == 20
