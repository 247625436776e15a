"""The run loop's writer: each batch's GIL-bound half (conversion, key check, top tokens' JSON)
overlapped with the previous batch's DuckDB half (INSERTs, blob, COMMIT), one transaction per
batch, committed in order.

`Store.write_results` runs both halves one after the other, so one call costs their sum
(docs/PERFORMANCE.md, "Fourth pass"). Here `submit` prepares batch k+1 on the calling thread
while batch k commits on this writer's DuckDB thread (DuckDB releases the GIL while it works),
then waits for batch k's commit before it queues batch k+1's: at most one commit in flight, one
statement stream on the connection (the store's lock), commits in `submit` order. When
`submit` returns, every batch before the one just given is committed; after `drain` (or
`close`), all of them.

A failed commit stores nothing of its batch (its transaction is rolled back), forgets the
key index (so the keys it reserved are read again from the table) and stops the writer: the
batches after it are not committed, and the error is raised by the next `submit`, `drain` or
`close`.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING

from llmscope.store.errors import StoreError

if TYPE_CHECKING:
    from collections.abc import Iterable

    from llmscope.engine.types import Result
    from llmscope.store.db import Store
    from llmscope.store.writes import PreparedBatch


class PipelinedWriter:
    """Writes one run's batches of results, preparing the next while the last commits."""

    def __init__(self, store: Store, run_id: str) -> None:
        if store._in_tx:
            raise StoreError(
                "a pipelined writer commits its own transactions; not inside transaction()"
            )
        self.store = store
        self.run_id = run_id
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="llmscope-commit")
        self._inflight: Future[None] | None = None
        self._inflight_keys: set[tuple[str, str]] = set()
        self._failure: BaseException | None = None
        self._closed = False
        self._guard = threading.Lock()  # one submit/drain at a time

    def submit(self, results: Iterable[Result], start_seq: int) -> int:
        """Prepare this batch, wait for the previous batch's commit, queue this one's.
        Returns the results given; raises the first failed commit's error (this batch is then
        not written)."""
        rs = list(results)
        with self._guard:
            self._check_open()
            if not rs:
                return 0
            # the keys of the batch still committing count as taken (a forgotten index is read
            # again from the table, which does not hold them yet)
            batch = self.store._prepare_results(self.run_id, rs, start_seq, self._inflight_keys)
            try:
                self._wait()
            except BaseException:
                self.store._release_prepared(batch)
                raise
            self._inflight_keys = batch.keys
            self._inflight = self._thread.submit(self._commit, batch)
        return len(rs)

    def _commit(self, batch: PreparedBatch) -> None:
        self.store._commit_prepared(batch)

    def _wait(self) -> None:
        """Wait for the commit in flight; remember and raise its failure."""
        fut, self._inflight = self._inflight, None
        self._inflight_keys = set()
        if fut is not None:
            try:
                fut.result()
            except BaseException as e:
                self._failure = e
                raise
        elif self._failure is not None:
            raise self._failure

    def _check_open(self) -> None:
        if self._failure is not None:
            raise self._failure
        if self._closed:
            raise StoreError("the pipelined writer is closed")

    def busy(self) -> bool:
        """Whether a commit is in flight (it holds the store's lock)."""
        fut = self._inflight
        return fut is not None and not fut.done()

    def drain(self) -> None:
        """Wait until every submitted batch is committed; raises the first failure."""
        with self._guard:
            self._wait()

    def close(self) -> None:
        """Drain, then stop the DuckDB thread (raises the first failure, once it stopped)."""
        try:
            if not self._closed:
                self.drain()
        finally:
            self._closed = True
            self._thread.shutdown(wait=True)

    def __enter__(self) -> PipelinedWriter:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is None:
            self.close()
            return
        try:  # an error in the caller's block: finish what is queued, keep the caller's error
            self.close()
        except BaseException:
            pass
