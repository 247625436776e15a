"""The run loop's pipelined writer (store/pipeline.py): it stores what `write_results` stores,
batch for batch, and a batch whose commit fails leaves nothing of itself, the batches before it
intact, the batches after it unwritten, and its error raised to the caller."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from llmscope.engine.types import Result
from llmscope.store import writes
from llmscope.store.db import Store


def _top(i: int) -> list[dict[str, object]]:
    return [{"token": f" t{i}.{j}", "id": 1000 * i + j, "prob": 0.5 / (j + 1)} for j in range(3)]


def _row(i: int, *, tops: bool = True, variant: str = "q1", tag: str = "") -> Result:
    p = (i % 10) / 10
    return Result(
        item_id=f"i{i:04d}",
        variant=variant,
        prompt=f"prompt {i}{tag}",
        probs={"yes": p, "no": 1 - p},
        other=0.0,
        top_tokens=_top(i) if tops else None,
        prediction="yes" if p > 0.5 else "no",
        gold="yes",
        correct=float(p > 0.5),
        confidence=max(p, 1 - p),
        n_tokens=i,
        latency_ms=1.5,
        extra={"n": i, "tag": tag} if tag else {},
    )


def _batches() -> list[list[Result]]:
    """Four batches: plain; no top tokens at all; one repeating a key of the first batch (its
    copy is dropped, the first batch's kept) and one key twice in itself; plain again."""
    b1 = [_row(i) for i in range(0, 50)]
    b2 = [_row(i, tops=False) for i in range(50, 80)]
    b3 = [_row(i) for i in range(80, 120)] + [_row(3, tag=" again")] + [_row(100, tag=" twice")]
    b4 = [_row(i, variant="q2") for i in range(0, 25)]
    return [b1, b2, b3, b4]


COLS = (
    "seq, item_id, variant, prompt, probs, other, prediction, gold, correct, confidence, n_tokens, "
    "latency_ms, error, extra, p_chosen, choice_method"
)


def _stored(st: Store) -> dict[str, Any]:
    rows = st.execute(f"SELECT {COLS} FROM results WHERE run_id = 'r' ORDER BY seq").fetchall()
    blobs = st.execute(
        "SELECT seq_lo, seq_hi, top_tokens FROM result_blobs WHERE run_id = 'r' ORDER BY seq_lo"
    ).fetchall()
    tops = {(r.item_id, r.variant): r.top_tokens for r in st.results("r")}
    return {"rows": rows, "blobs": blobs, "tops": tops}


def _open(path: Path) -> Store:
    st = Store(path)
    st.create_run({"run_id": "r", "suite_id": "s", "task": "yesno"})
    return st


def test_the_pipelined_writer_stores_what_write_results_stores(tmp_path: Path) -> None:
    batches = _batches()
    with _open(tmp_path / "serial.duckdb") as st:
        seq = 0
        for b in batches:
            seq += st.write_results("r", b, seq)
        serial = _stored(st)
    path = tmp_path / "piped.duckdb"
    st = _open(path)
    seq = 0
    with st.pipelined_writer("r") as w:
        for b in batches:
            seq += w.submit(b, seq)
        w.drain()
        # a reader of the same file in this process sees every row once drained
        with Store(path) as reader:
            assert reader.count_results("r") == (len(serial["rows"]), 0)
    piped = _stored(st)
    st.close()
    assert piped == serial
    # and what both store is what was given: 145 rows (147 less the two repeated keys), in seq
    # order, the first copy of a key kept, each row's own top tokens
    n = sum(len(b) for b in batches)
    assert len(piped["rows"]) == n - 2
    assert [r[0] for r in piped["rows"]] == [s for s in range(n) if s not in (120, 121)]
    by_key = {(r[1], r[2]): r for r in piped["rows"]}
    assert by_key[("i0003", "q1")][3] == "prompt 3" and by_key[("i0100", "q1")][3] == "prompt 100"
    assert piped["tops"][("i0007", "q1")] == _top(7) and piped["tops"][("i0060", "q1")] is None
    assert piped["tops"][("i0024", "q2")] == _top(24)
    # one blob per batch with top tokens (the second has none), over its seq range
    assert [(lo, hi) for lo, hi, _ in piped["blobs"]] == [(0, 49), (80, 119), (122, 146)]


def test_a_failed_commit_stores_nothing_of_its_batch_and_stops_the_writer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = writes.compress_top_tokens

    def compress(raw: bytes) -> bytes | None:
        # the second batch's blob fails on the worker, after its rows' INSERT ran in its
        # transaction (the rows go in first, then the blob, then COMMIT)
        if b" t50.0" in raw:
            raise OSError("No space left on device (simulated)")
        return real(raw)

    monkeypatch.setattr(writes, "compress_top_tokens", compress)
    b1, b2, b3, b4 = ([_row(i) for i in range(lo, lo + 50)] for lo in (0, 50, 100, 150))
    st = _open(tmp_path / "f.duckdb")
    w = st.pipelined_writer("r")
    assert w.submit(b1, 0) == 50
    assert w.submit(b2, 50) == 50  # prepared; batch 1 committed before it returned
    with pytest.raises(OSError, match="No space left"):
        w.submit(b3, 100)  # batch 2's failure surfaces here: batch 3 is not written
    with pytest.raises(OSError, match="No space left"):
        w.submit(b4, 150)
    with pytest.raises(OSError, match="No space left"):
        w.drain()
    with pytest.raises(OSError, match="No space left"):
        w.close()
    seqs = [
        r[0]
        for r in st.execute("SELECT seq FROM results WHERE run_id = 'r' ORDER BY seq").fetchall()
    ]
    assert seqs == list(range(50))  # batch 1 intact, nothing of batches 2-4
    assert st.execute("SELECT seq_lo, seq_hi FROM result_blobs").fetchall() == [(0, 49)]
    assert {r.item_id: r.top_tokens for r in st.results("r")} == {
        f"i{i:04d}": _top(i) for i in range(50)
    }
    # the keys the failed and unwritten batches reserved are free again: a later write stores them
    monkeypatch.setattr(writes, "compress_top_tokens", real)
    with st.pipelined_writer("r") as w2:
        for lo, b in ((50, b2), (100, b3), (150, b4)):
            w2.submit(b, lo)
        w2.submit(b1, 200)  # already stored: dropped
    assert st.count_results("r") == (200, 0)
    assert st.execute("SELECT count(DISTINCT item_id) FROM results").fetchall() == [(200,)]
    st.close()
