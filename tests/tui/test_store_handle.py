"""The TUI's StoreHandle: a long batch of reads does not hold back a short one, and a run's
write connection is closed only after the reads sharing it are done."""

from __future__ import annotations

import threading
from pathlib import Path

from llmscope.store.db import Store
from llmscope.tui.data.store import StoreHandle
from tests.helpers.tui import make_db


def test_short_read_runs_while_a_long_batch_holds_the_reader(tmp_path: Path) -> None:
    h = StoreHandle(make_db(tmp_path / "h.duckdb"), read_only=True)
    inside, done = threading.Event(), threading.Event()
    order: list[str] = []

    def long_batch() -> None:
        with h.use() as store:
            inside.set()
            done.wait(30)  # released by the short read below (a deadlock fails the wait)
            order.append("long " + str(store.execute("SELECT count(*) FROM runs").fetchone()[0]))

    t = threading.Thread(target=long_batch)
    t.start()
    assert inside.wait(30)
    with h.use() as store:  # would block until the long batch ended if batches were serialised
        order.append("short " + str(store.execute("SELECT count(*) FROM results").fetchone()[0]))
    done.set()
    t.join(30)
    assert order == ["short 24", "long 1"]  # make_db: 12 items x 2 variants, one run
    assert h.store is None  # the read-only connection is closed after the last batch
    h.close()


def test_writer_closes_after_the_reads_sharing_it(tmp_path: Path) -> None:
    h = StoreHandle(make_db(tmp_path / "w.duckdb"), read_only=False)
    writer = h.open_writer()
    inside, go = threading.Event(), threading.Event()
    got: list[int] = []

    def reader() -> None:
        with h.use() as store:
            assert store is writer
            inside.set()
            go.wait(30)
            got.append(int(store.execute("SELECT count(*) FROM results").fetchone()[0]))

    t = threading.Thread(target=reader)
    t.start()
    assert inside.wait(30)
    closer = threading.Thread(target=h.release_writer)  # the run ends while the read is in flight
    closer.start()
    closer.join(0.2)
    assert closer.is_alive() and h.writing  # waiting for the read, not closing under it
    go.set()
    t.join(30)
    closer.join(30)
    assert got == [24] and not h.writing
    with Store(tmp_path / "w.duckdb") as s:  # the file is free again
        assert s.execute("SELECT count(*) FROM runs").fetchone()[0] == 1
