"""The model thread: queued jobs drained, grouped by kind, cut into batches; out-of-memory back-off."""

from __future__ import annotations

import queue
import time
from collections import defaultdict
from typing import Any

from llmscope.engine.backend import BackendError
from llmscope.engine.hf.generation import Generation
from llmscope.engine.hf.jobs import Job, as_backend_error, fail, resolve
from llmscope.engine.hf.scoring import Scoring


class ModelThread(Scoring, Generation):
    """The worker thread's loop and batch sizing (state set by `HFBackend.__init__`)."""

    batch_size: int
    max_batch_size: int
    grow_after: int
    _ok_streak: int
    _grown_since_oom: bool
    _torch_threads: int
    _queue: queue.Queue[list[Job] | None]

    def _worker(self) -> None:
        import torch

        torch.set_grad_enabled(False)
        torch.set_num_threads(self._torch_threads)  # this thread's intra-op pool only, once
        self._torch_threads = torch.get_num_threads()
        while True:
            item = self._queue.get()
            if item is None:
                return
            jobs = list(item)
            # Drain what is already waiting so neighbours in length share a batch; a burst
            # still being tokenised joins as long as parts keep arriving within 2 ms.
            deadline = time.perf_counter() + 0.002
            while len(jobs) < self.max_batch_size * 8:
                try:
                    nxt = self._queue.get(timeout=max(0.0, deadline - time.perf_counter()))
                except queue.Empty:
                    break
                if nxt is None:
                    self._queue.put(None)
                    break
                jobs.extend(nxt)
                deadline = time.perf_counter() + 0.002
            self._run_jobs(jobs)

    def _run_jobs(self, jobs: list[Job]) -> None:
        by_kind: dict[str, list[Job]] = defaultdict(list)
        for j in jobs:
            if not j.call.dead():
                by_kind[j.kind].append(j)
        for kind, group in by_kind.items():
            if kind == "gen":
                for j in group:
                    self._run_safely([j], self._run_generate)
                continue
            if kind == "next":
                group.sort(key=lambda j: -j.length)
                runner = self._run_next
            else:
                # The options of one context stay adjacent, longest contexts first.
                group.sort(key=lambda j: (-len(j.ctx), j.ctx, -j.payload.n_cont))
                runner = self._run_loglik
            i = 0
            while i < len(group):
                n, rows = self._cut(kind, group, i)
                i += self._run_with_backoff(group[i : i + n], runner, rows)

    def _cut(self, kind: str, group: list[Job], i: int) -> tuple[int, int]:
        """How many jobs from `i` make the next batch, and its row count (≤ batch_size).

        A loglik batch runs one row per context, then one row per multi-token option of a
        shared context; each pass holds at most batch_size rows.
        """
        bs = self.batch_size
        if kind != "loglik":
            n = min(bs, len(group) - i)
            return n, n
        if self.tree_mask:  # one row per context (per chunk of a context's many options)
            j = i
            rows = 0
            while j < len(group):
                k = j + 1
                while k < len(group) and group[k].ctx == group[j].ctx:
                    k += 1
                chunks = self._tree_chunks([x.payload.n_cont for x in group[j:k]])
                if rows + len(chunks) > bs:
                    if rows == 0:  # a context with more chunks than a batch holds: split it
                        return sum(len(c) for c in chunks[:bs]), bs
                    break
                rows += len(chunks)
                j = k
            return j - i, rows
        rows1 = rows2 = n = 0
        j = i
        while j < len(group):
            k = j + 1
            while k < len(group) and group[k].ctx == group[j].ctx:
                k += 1
            multi = sum(1 for x in group[j:k] if x.payload.n_cont > 1)
            if self.context_cache and k - j > 1:
                r1, r2 = 1, multi
            else:  # one row per multi-token option, one for all one-token options
                r1, r2 = multi + (multi < k - j), 0
            if rows1 + r1 > bs or rows2 + r2 > bs:
                if n == 0:  # one context with more options than a batch holds: split it
                    take = m = singles = 0
                    while j + take < k:
                        one = group[j + take].payload.n_cont == 1
                        if m >= bs and (not one or not self.context_cache):
                            break
                        m += not one
                        singles += one
                        take += 1
                    extra = 1 if singles and not self.context_cache else 0
                    return take, max(1, m + extra)
                break
            rows1 += r1
            rows2 += r2
            n += k - j
            j = k
        return n, max(rows1, rows2)

    def _run_with_backoff(self, batch: list[Job], runner: Any, rows: int) -> int:
        """Run a batch; returns how many jobs were settled (0: re-cut at a smaller size)."""
        import torch

        try:
            t0 = time.perf_counter()
            results = runner(batch)
            self._stats["forward_seconds"] += time.perf_counter() - t0
            self._stats["batches"] += 1
            self._stats["tokens"] += sum(j.length for j in batch)
            for j, r in zip(batch, results, strict=True):
                resolve(j, r)
            self._batch_ok(rows)
            return len(batch)
        except torch.OutOfMemoryError:
            if len(batch) == 1 or rows <= 1:
                for j in batch:
                    fail(j, BackendError("out of memory even with batch size 1"))
                return len(batch)
            if self.device.startswith("cuda"):
                torch.cuda.empty_cache()
            self._batch_oom(rows)
            return 0
        except Exception as e:  # one bad batch must not kill the worker; items get the error
            if len(batch) == 1:
                fail(batch[0], e if isinstance(e, BackendError) else as_backend_error(e))
                return 1
            # retry one by one so only the offending item fails
            for j in batch:
                self._run_safely([j], runner)
            return len(batch)

    def _batch_ok(self, rows: int) -> None:
        # Only a full batch shows that the current size fits.
        if self.batch_size >= self.max_batch_size or rows < self.batch_size:
            return
        self._ok_streak += 1
        if self._ok_streak >= self.grow_after:
            self.batch_size = min(self.max_batch_size, self.batch_size + (self.batch_size + 1) // 2)
            self._ok_streak = 0
            self._grown_since_oom = True
            self._stats["batch_regrowths"] += 1

    def _batch_oom(self, rows: int) -> None:
        if self._grown_since_oom:
            self.grow_after *= 2  # the larger size failed again: be slower to try it next time
        self._grown_since_oom = False
        self._ok_streak = 0
        self.batch_size = max(1, min(self.batch_size, rows) // 2)
        self._stats["oom_backoffs"] += 1

    def _run_safely(self, batch: list[Job], runner: Any) -> None:
        try:
            for j, r in zip(batch, runner(batch), strict=True):
                resolve(j, r)
        except Exception as e:
            for j in batch:
                fail(j, e if isinstance(e, BackendError) else as_backend_error(e))
