"""The asynchronous run loop: suite → task → backend → store, with progress reporting.

Work flows through a bounded window of in-flight items to the backend (one
batching thread for local models, concurrent HTTP requests for APIs). Results
are written in Arrow batches by a single writer thread, each batch in one
transaction, so a killed run loses at most the batch in flight and resumes
without duplicates (the store's key check on (run, item, variant); see store/writes.py).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime as dt
import hashlib
import json
import os
import socket
import time
from dataclasses import dataclass, field
from typing import Any

import llmscope
from llmscope.engine.backend import Backend, BackendConfigError, BackendError, BackendUnavailable
from llmscope.engine.ports import RunStore, RunSuite
from llmscope.engine.progress import NullReporter, Progress, Reporter
from llmscope.engine.tasks import Task, get_task
from llmscope.engine.textsafety import map_strings, repair_result, repair_text
from llmscope.engine.types import Result, Work

FLUSH_EVERY_S = 1.0
# A commit costs a fixed ~5 ms in DuckDB whatever its size: 4,096 rows per commit write ~2x
# faster than 512 (bench/store_bench.py). The time limit above still bounds what a kill loses
# to about one second of results whenever scoring is slower than 4,096 results/s.
FLUSH_ROWS = 4096
HEARTBEAT_S = (
    5.0  # how often a run records that its owner is alive (store.run_status.effective_status)
)


class RunBusy(BackendError):
    """The run is being written by another live process."""


@dataclass
class RunPlan:
    """Everything that defines a run's identity, plus how to execute it."""

    suite: RunSuite  # data/suites.py `Suite`
    model_label: str
    model_arg: str | None
    task_options: dict[str, Any] = field(default_factory=dict)
    backend_identity: dict[str, Any] = field(default_factory=dict)  # options that change results
    seed: int = 0
    limit: int | None = None
    run_id: str | None = None
    window: int = 64  # items in flight
    backend_config: dict[str, Any] | None = (
        None  # engine.config.BackendConfig.to_dict(), stored with the run
    )
    retry_errors: bool = True  # a reopened run scores its errored items again
    request_key: str | None = (
        None  # llmscope/runs/start.py: matches a request to this run before loading
    )
    meta: dict[str, Any] | None = None  # recorded in the run's meta (e.g. `rerun_of`)

    def task(self) -> Task:
        opts = dict(self.suite.task_options)
        opts.update(self.task_options)
        if self.suite.answers and "answers" not in opts:
            opts["answers"] = self.suite.answers
        opts.setdefault("templates", self.suite.templates)
        opts.setdefault("text_field", self.suite.text_field)
        return get_task(self.suite.task)(opts)

    def config(self, model_hash: str | None) -> dict[str, Any]:
        task_desc = self.task().describe()
        task_desc.pop("templates", None)  # covered by the suite id
        return {
            "suite_id": self.suite.suite_id,
            "model": self.model_arg or "default",
            "model_hash": model_hash,
            "task": task_desc,
            "backend": self.backend_identity,
            "seed": self.seed,
        }

    def derive_run_id(self, model_hash: str | None) -> str:
        blob = json.dumps(self.config(model_hash), sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


class RunInterrupted(Exception):
    """The run stopped early (Ctrl-C); everything scored so far is stored."""

    def __init__(self, run_id: str, done: int, total: int) -> None:
        self.run_id, self.done, self.total = run_id, done, total
        super().__init__(f"run {run_id} interrupted at {done}/{total}")


class Runner:
    """Executes one run plan against a backend and a store."""

    def __init__(
        self, plan: RunPlan, backend: Backend, store: RunStore, reporter: Reporter | None = None
    ) -> None:
        self.plan = plan
        self.backend = backend
        self.store = store
        self.reporter: Reporter = reporter or NullReporter()
        self.task = plan.task()
        self._writer = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="llmscope-writer"
        )
        self._buffer: list[Result] = []
        self._pending_write: asyncio.Future[Any] | None = None
        self._seq = 0
        self._tokens = 0
        self.run_id = ""
        self.retried_errors = 0
        self.progress: Progress | None = None
        self._session_started: dt.datetime | None = None

    # -- setup -----------------------------------------------------------------------------
    def prepare_run(self) -> tuple[dict[str, Any], list[Work]]:
        """Store the suite, create or reopen the run, and list the work still to do."""
        self.task.check_backend(self.backend)  # a capability the task needs is missing: stop here
        suite = self.plan.suite
        items = suite.items()
        self.store.add_suite(
            suite.suite_id, suite.name, suite.task, suite.spec, suite.source or "", items
        )
        # a server's model name or fingerprint may carry a lone surrogate: the run record is
        # stored as UTF-8, so the description is repaired as result rows are (textsafety)
        desc, _ = map_strings(self.backend.describe(), repair_text)
        config_hash = self.plan.derive_run_id(desc.get("model_hash"))
        run_id = self.plan.run_id or config_hash
        all_work = suite.work(self.plan.limit, self.task.options)
        existing = self.store.get_run(run_id)
        task_desc = self.task.describe()
        task_desc.pop("templates", None)
        owner = {
            "owner_pid": os.getpid(),
            "owner_host": socket.gethostname(),
            "heartbeat_at": _utcnow(),
            "error": None,
        }
        if self.plan.backend_config is not None:
            owner["backend_config"] = self.plan.backend_config
        self.retried_errors = 0
        self._session_started = _utcnow()
        if existing is None:
            self.store.create_run(
                {
                    "run_id": run_id,
                    "suite_id": suite.suite_id,
                    "suite_name": suite.name,
                    "task": suite.task,
                    "model": desc.get("model") or self.plan.model_label,
                    "model_path": desc.get("model_path"),
                    "model_hash": desc.get("model_hash"),
                    "backend": desc.get("backend"),
                    "dtype": desc.get("dtype"),
                    "device": desc.get("device"),
                    "batch_size": desc.get("batch_size"),
                    "template_hash": desc.get("template_hash"),
                    "seed": self.plan.seed,
                    "options": {
                        "task": task_desc,
                        "backend": self.plan.backend_identity,
                        "model_arg": self.plan.model_arg,
                        "limit": self.plan.limit,
                        **({"request_key": self.plan.request_key} if self.plan.request_key else {}),
                    },
                    "versions": {"llmscope": llmscope.__version__, **desc.get("versions", {})},
                    "meta": {"backend": desc, "suite": suite.describe(), **(self.plan.meta or {})},
                    "config_hash": config_hash,
                    "n_total": len(all_work),
                    "status": "running",
                    **owner,
                }
            )
        else:
            if existing["suite_id"] != suite.suite_id:
                raise BackendError(
                    f"run {run_id} belongs to suite {existing['suite_id']}, not {suite.suite_id}"
                )
            old = existing.get("meta") if isinstance(existing.get("meta"), dict) else {}
            was = (
                (old.get("backend") or {}).get("expected_model") if isinstance(old, dict) else None
            )
            now = desc.get("expected_model")
            if was and now and was != now:  # an API server that now serves another model
                raise BackendConfigError(
                    f"run {run_id} measured model {was!r}; the server now serves {now!r} (resume "
                    "it against the run's model)"
                )
            if existing.get("status") == "running" and existing.get("owner_pid") != os.getpid():
                raise RunBusy(
                    f"run {run_id} is being written by process {existing.get('owner_pid')} on "
                    f"{existing.get('owner_host')}; wait for it, or stop it first"
                )
            n_total = max(len(all_work), int(existing.get("n_total") or 0))
            if self.plan.retry_errors:
                self.retried_errors = self.store.delete_error_results(run_id)
            # A later session may ask for another --limit (the same run, more or fewer items):
            # `--resume` then continues what was asked last. The request key is added to runs
            # recorded before it existed, so the next identical request is matched before loading.
            opts = dict(existing.get("options") or {})
            opts["limit"] = self.plan.limit
            if self.plan.request_key and not opts.get("request_key"):
                opts["request_key"] = self.plan.request_key
            self.store.update_run(
                run_id,
                status="running",
                n_total=n_total,
                ended_at=None,
                options=opts,
                batch_size=desc.get("batch_size"),
                device=desc.get("device"),
                **owner,
            )
        self.run_id = run_id
        done = self.store.done_keys(run_id)
        todo = [w for w in all_work if (w.item.item_id, w.variant) not in done]
        self._seq = self.store.max_seq(run_id) + 1
        run = self.store.get_run(run_id) or {}
        n_done, n_err = self.store.count_results(run_id)
        scored_row = self.store.execute(
            "SELECT count(correct), coalesce(sum(correct), 0) FROM results WHERE run_id = ?",
            [run_id],
        ).fetchone()
        self.progress = Progress(
            run_id=run_id,
            total=int(run.get("n_total") or len(all_work)),
            done=n_done,
            skipped=n_done,
            stored=n_done,
            errors=n_err,
            scored=int(scored_row[0]) if scored_row else 0,
            correct=float(scored_row[1]) if scored_row else 0.0,
        )
        return run, todo

    # -- execution -------------------------------------------------------------------------
    async def run(self) -> Progress:
        run, todo = self.prepare_run()
        assert self.progress is not None
        prog = self.progress
        self.reporter.on_start(run, prog)
        t0 = time.perf_counter()
        last_report = 0.0
        window = asyncio.Semaphore(max(1, self.plan.window))
        in_flight: set[asyncio.Task[Result]] = set()
        loop = asyncio.get_running_loop()
        last_flush = last_beat = loop.time()
        status = "completed"
        cause: BaseException | None = None  # what ended the run, recorded in runs.error

        async def one(w: Work) -> Result:
            start = time.perf_counter()
            try:
                res = await self.task.score(w, self.backend)
            except BackendUnavailable:
                raise  # the server is gone: pause the run (below), no error row
            except BackendError as e:
                res = Result(
                    item_id=w.item.item_id,
                    variant=w.variant,
                    prompt=w.prompt,
                    gold=w.gold,
                    error=str(e) or type(e).__name__,
                )
            except asyncio.CancelledError:
                raise
            except Exception as e:  # a bug or bad item must fail the item, loudly, not the run
                res = Result(
                    item_id=w.item.item_id,
                    variant=w.variant,
                    prompt=w.prompt,
                    gold=w.gold,
                    error=f"{type(e).__name__}: {e}",
                )
            finally:
                window.release()
            if w.design:  # counterbalancing / few-shot levels (data/design.py)
                res.extra.setdefault(
                    "design", {k: v for k, v in w.design.items() if not k.startswith("_")}
                )
            # before the live channel, the store or any reporter sees it (engine/textsafety.py)
            repair_result(res)
            res.latency_ms = (time.perf_counter() - start) * 1000.0
            return res

        try:
            await self.task.prepare(
                self.backend
            )  # inside: a failure or signal here still ends the run truthfully
            it = iter(todo)
            exhausted = False
            while not exhausted or in_flight:
                while not exhausted and not window.locked():
                    w = next(it, None)
                    if w is None:
                        exhausted = True
                        break
                    await window.acquire()
                    in_flight.add(asyncio.ensure_future(one(w)))
                if not in_flight:
                    break
                done_set, in_flight = await asyncio.wait(
                    in_flight, timeout=FLUSH_EVERY_S, return_when=asyncio.FIRST_COMPLETED
                )
                fresh = [d.result() for d in done_set]
                if fresh:
                    self._accumulate(fresh, prog)
                    self.reporter.on_results(fresh, prog)
                now = loop.time()
                if len(self._buffer) >= FLUSH_ROWS or (
                    self._buffer and now - last_flush >= FLUSH_EVERY_S
                ):
                    await self._flush()
                    last_flush = now
                if now - last_beat >= HEARTBEAT_S:
                    self._heartbeat()
                    last_beat = now
                if now - last_report >= 0.25:
                    self._update_rates(prog, t0)
                    self.reporter.on_progress(prog)
                    last_report = now
        except (asyncio.CancelledError, KeyboardInterrupt, BackendUnavailable) as e:
            status = "interrupted"
            if isinstance(e, BackendUnavailable):
                self.reporter.on_message("warning", str(e))
            for t in in_flight:
                t.cancel()
            # Keep what finished before the interrupt; drop the rest (it is re-run on resume).
            finished = [
                t.result()
                for t in in_flight
                if t.done() and not t.cancelled() and t.exception() is None
            ]
            if finished:
                self._accumulate(finished, prog)
        except BaseException as e:
            status = "failed"
            cause = e
            raise
        finally:
            # Whatever happened, store what was scored and leave the run in a truthful state.
            failure: BaseException | None = None
            try:
                await self._flush(final=True)
            except Exception as e:  # e.g. StoreError: disk full; stored batches stay intact
                failure, status = e, "failed"
            self._update_rates(prog, t0)
            prog.status = status
            try:
                self._finish_run(prog, status, failure or cause)
            except Exception as e:
                failure = failure or e
                try:  # the short form, so that the record does not stay `running`
                    self.store.update_run(
                        self.run_id, status="failed", error=f"{type(failure).__name__}: {failure}"
                    )
                    prog.status = "failed"
                except Exception:
                    pass  # the owner check (effective_status) shows it `interrupted` once we exit
            self._writer.shutdown(wait=True)
            self.reporter.on_end(prog)
            if failure is not None:
                raise failure
        if status == "interrupted":
            raise RunInterrupted(self.run_id, prog.done, prog.total)
        return prog

    def _heartbeat(self) -> None:
        """Record that the owner is alive (skipped while a write holds the store)."""
        if self._pending_write is not None and not self._pending_write.done():
            return  # a write in flight proves liveness soon enough; never queue behind it
        try:
            self.store.update_run(self.run_id, heartbeat_at=_utcnow())
        except Exception:  # a failing heartbeat must not stop scoring; the final write reports
            pass

    def _finish_run(
        self, prog: Progress, status: str, failure: BaseException | None = None
    ) -> None:
        n_done, n_err = self.store.count_results(self.run_id)
        prog.done, prog.errors = n_done, n_err  # what is actually stored
        prog.stored = n_done
        if status == "completed":
            # The final status counts what the store holds, not what this session saw.
            n_ok = n_done - n_err
            if n_err:
                status = "completed_with_errors"
            elif n_ok < prog.total:
                status = "incomplete"
            prog.status = status
        meta = self.store.get_run(self.run_id) or {}
        old_meta = meta.get("meta")
        m: dict[str, Any] = dict(old_meta) if isinstance(old_meta, dict) else {}
        # Every session is appended to `meta.sessions`, never replaced. `last_session` and
        # `backend_stats` (read by analysis/api_method.py and older readers) are the latest
        # session that scored something: a session with nothing to do keeps the record it found.
        stats, _ = map_strings(self.backend.stats(), repair_text)
        last = {
            "seconds": round(prog.elapsed_s, 3),
            "items": prog.done - prog.skipped,
            "items_per_s": prog.items_per_s,
            "tokens_per_s": prog.tokens_per_s,
            "retried_errors": self.retried_errors,
        }
        sessions = [s for s in (m.get("sessions") or []) if isinstance(s, dict)]
        if not sessions and isinstance(
            m.get("last_session"), dict
        ):  # recorded before sessions were kept
            sessions.append({**m["last_session"], "backend_stats": m.get("backend_stats")})
        started = self._session_started
        sessions.append(
            {
                **last,
                "status": status,
                "limit": self.plan.limit,
                "backend_stats": stats,
                "started_at": started.isoformat() if started else None,
                "ended_at": _utcnow().isoformat(),
                "pid": os.getpid(),
                "host": socket.gethostname(),
            }
        )
        m["sessions"] = sessions
        if last["items"] > 0 or not isinstance(m.get("last_session"), dict):
            m["backend_stats"] = stats
            m["last_session"] = last
        end_fields: dict[str, Any] = {
            "status": status,
            "n_done": n_done,
            "n_errors": n_err,
            "meta": m,
            "heartbeat_at": _utcnow(),
            "error": f"{type(failure).__name__}: {failure}" if failure else None,
        }
        if status not in ("interrupted", "failed"):
            end_fields["ended_at"] = _utcnow()
        self.store.update_run(self.run_id, **end_fields)

    def _accumulate(self, fresh: list[Result], prog: Progress) -> None:
        self._buffer.extend(fresh)
        prog.done += len(fresh)
        for r in fresh:
            self._tokens += r.n_tokens or 0
            if r.error:
                prog.errors += 1
            elif r.correct is not None:
                prog.scored += 1
                prog.correct += r.correct

    def _update_rates(self, prog: Progress, t0: float) -> None:
        prog.elapsed_s = time.perf_counter() - t0
        new = prog.done - prog.skipped
        if prog.elapsed_s > 0:
            prog.items_per_s = new / prog.elapsed_s
            prog.tokens_per_s = self._tokens / prog.elapsed_s
        remaining = max(0, prog.total - prog.done)
        prog.eta_s = remaining / prog.items_per_s if prog.items_per_s > 0 else None
        prog.backend = self.backend.stats()

    async def _flush(self, final: bool = False) -> None:
        """Hand the buffer to the writer thread; at most one write in flight."""
        if self._pending_write is not None:
            await self._pending_write
            self._pending_write = None
        if not self._buffer:
            return
        batch, self._buffer = self._buffer, []
        seq = self._seq
        self._seq += len(batch)
        loop = asyncio.get_running_loop()
        fut = loop.run_in_executor(self._writer, self.store.write_results, self.run_id, batch, seq)

        def committed(f: asyncio.Future[Any], n: int = len(batch)) -> None:
            if self.progress is not None and not f.cancelled() and f.exception() is None:
                self.progress.stored += n

        fut.add_done_callback(committed)
        if final:
            await fut
        else:
            self._pending_write = asyncio.ensure_future(fut)
