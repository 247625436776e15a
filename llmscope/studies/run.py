"""Running a study (llmscope/studies/spec.py): every cell as a normal run through llmscope/runs/start.py.

Order: cells are checked and matched to their stored runs first (no model loaded); a cell whose
run is complete is reused, one with a stored run resumes it. Local-model cells run one at a
time, grouped by model, inside `engine.hf.loading.keep_loaded()` so each local model is loaded
once for all its cells; API cells run beside them, at most `jobs` at a time. A cell that fails
is recorded (`study_cells.state = 'error'`, with the message) and the others go on. Cancelling
the task (Ctrl-C, SIGTERM) stops every running cell the way `llmscope run` stops: what was
scored is stored, the run is `interrupted`, and the next `study run` resumes it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from llmscope.studies.spec import Cell, Study
from llmscope.studies.store import LiveStart, publish_study, record_cell, record_study, tag_run

Say = Callable[[str, str], None]  # (level, text)


@dataclass
class CellOutcome:
    """What one cell did in this `study run`."""

    cell: Cell
    state: str  # done | done_with_errors | partial | interrupted | error | reused | planned
    run_id: str | None = None
    message: str = ""


class CellReporter:
    """Prints a cell's start, its end and a progress line every few seconds (engine Reporter)."""

    def __init__(
        self,
        cell: Cell,
        say: Say,
        every_s: float = 10.0,
        on_run: Callable[[str], None] | None = None,
    ) -> None:
        self.cell, self.say, self.every_s, self.on_run = cell, say, every_s, on_run
        self._last = time.monotonic()

    def on_start(self, run: dict[str, Any], progress: Any) -> None:
        if self.on_run is not None and run.get("run_id"):
            self.on_run(str(run["run_id"]))  # the cell's run, known once the runner created it
        self.say(
            "info",
            f"[{self.cell.key}] run {run.get('run_id')}: {progress.done}/{progress.total} stored",
        )

    def on_results(self, results: list[Any], progress: Any) -> None:
        pass

    def on_progress(self, progress: Any) -> None:
        now = time.monotonic()
        if now - self._last >= self.every_s:
            self._last = now
            self.say("info", f"[{self.cell.key}] {progress.done}/{progress.total}")

    def on_message(self, level: str, text: str) -> None:
        self.say(level, f"[{self.cell.key}] {text}")

    def on_end(self, progress: Any) -> None:
        self.say(
            "info",
            f"[{self.cell.key}] {progress.status}: {progress.done}/{progress.total}"
            + (f", {progress.errors} errors" if progress.errors else ""),
        )


def _plan_for(study: Study) -> tuple[dict[str, Any], str, str] | None:
    if not study.plan:
        return None
    from llmscope.runs.plan import plan_hash, read_plan

    return read_plan(study.plan), plan_hash(study.plan), study.plan


def _model_key(prep: Any) -> str:
    cfg = prep.config
    return repr(
        (
            cfg.model,
            cfg.device,
            cfg.dtype,
            cfg.revision,
            cfg.adapter,
            cfg.load_in_8bit,
            cfg.load_in_4bit,
            cfg.trust_remote_code,
        )
    )


_STATES = {"completed": "done", "completed_with_errors": "done_with_errors"}


async def run_study(
    study: Study,
    store: Any,
    *,
    db: str,
    jobs: int = 4,
    say: Say,
    check_endpoint: Callable[[Cell, Any], None] | None = None,
    progress_every_s: float = 10.0,
    replace: bool = False,
) -> list[CellOutcome]:
    """Run every cell of `study` into `store` (opened for writing); returns each cell's outcome.

    `check_endpoint(cell, config)` is called before an API cell's first request (the CLI prints
    the endpoint and refuses an untrusted one by raising). Raises StudyConflict (nothing run)
    when another study file holds the name, unless `replace` (llmscope/studies/store.py), and
    StudyError (nothing run) for a factor level that changes nothing (llmscope/studies/checks.py)."""
    from llmscope.engine.hf.loading import keep_loaded
    from llmscope.engine.runner import RunBusy, RunInterrupted
    from llmscope.runs.start import RunComplete, execute, prepare_run, start_run
    from llmscope.studies.checks import check_levels

    check_levels(study)  # a level that changes nothing: refused before anything is written
    record_study(store, study, replace=replace)
    plan = _plan_for(study)
    outcomes: dict[str, CellOutcome] = {}
    ready: list[tuple[Cell, Any]] = []
    keys: dict[str, str] = {}
    # each cell as known before any runs (for readers while this process holds the file)
    start: dict[str, LiveStart] = {}

    def fail(cell: Cell, msg: str, run_id: str | None = None) -> None:
        record_cell(store, study.name, cell.key, "error", run_id, msg)
        outcomes[cell.key] = CellOutcome(cell, "error", run_id, msg)
        say("error", f"[{cell.key}] {msg}")

    for cell in study.cells:
        planned = (
            plan
            if plan is not None and plan[0].get("suite") in (cell.suite.suite, cell.suite.label)
            else None
        )
        try:
            prep = prepare_run(store, cell.request(planned))
        except RunComplete as e:
            tag_run(store, e.run_id, study.name, cell.key)
            state = "done_with_errors" if e.n_errors else "done"
            record_cell(store, study.name, cell.key, state, e.run_id)
            outcomes[cell.key] = CellOutcome(
                cell, "reused", e.run_id, f"run {e.run_id} is complete"
            )
            start[cell.key] = LiveStart(state, e.run_id, e.n_asked, e.n_errors, e.n_asked)
            say("info", f"[{cell.key}] run {e.run_id} is already complete: reused")
            continue
        except RunBusy as e:
            fail(cell, str(e))
            continue
        except Exception as e:  # a bad suite, option or model argument: this cell only
            fail(cell, f"{type(e).__name__}: {e}" if not _user_error(e) else str(e))
            continue
        if prep.request_key in keys:
            fail(
                cell,
                f"the same run as cell [{keys[prep.request_key]}] (no option of the grid changes what "
                "it measures)",
            )
            continue
        keys[prep.request_key] = cell.key
        if prep.existing is not None:
            tag_run(store, str(prep.existing["run_id"]), study.name, cell.key)
            rid = str(prep.existing["run_id"])
            start[cell.key] = LiveStart("partial", rid, prep.n_have, 0, prep.n_asked)
        ready.append((cell, prep))
    for key, out in outcomes.items():
        if out.state == "error":
            start[key] = LiveStart("error", out.run_id, error=out.message)
    publish_study(db, study, start)

    async def run_cell(cell: Cell, prep: Any) -> None:
        runner = None
        try:
            if check_endpoint is not None and prep.config.kind == "openai":
                check_endpoint(cell, prep.config)
            rep = CellReporter(
                cell,
                say,
                progress_every_s,
                lambda rid: record_cell(store, study.name, cell.key, "running", rid),
            )
            started = await asyncio.to_thread(
                start_run, store, prep, [rep], db=db, warn=lambda m: rep.on_message("warning", m)
            )
            runner = started.runner
            started.plan.meta = {**(started.plan.meta or {}), "studies": {study.name: cell.key}}
            prog = await execute(started, lambda m: rep.on_message("info", m))
            tag_run(store, prog.run_id, study.name, cell.key)
            state = _STATES.get(prog.status, "partial")
            record_cell(store, study.name, cell.key, state, prog.run_id)
            outcomes[cell.key] = CellOutcome(cell, state, prog.run_id, prog.status)
        except (RunInterrupted, asyncio.CancelledError) as e:
            rid = runner.run_id if runner is not None and runner.run_id else None
            if rid:
                tag_run(store, rid, study.name, cell.key)
            record_cell(store, study.name, cell.key, "partial" if rid else "not_started", rid)
            outcomes[cell.key] = CellOutcome(cell, "interrupted", rid, "interrupted")
            if isinstance(e, asyncio.CancelledError):
                raise
        except Exception as e:  # a failing cell never stops the others
            rid = runner.run_id if runner is not None and runner.run_id else None
            if rid:
                tag_run(store, rid, study.name, cell.key)
            fail(cell, str(e) if _user_error(e) else f"{type(e).__name__}: {e}", rid)

    local = [(c, p) for c, p in ready if p.config.kind != "openai"]
    api = [(c, p) for c, p in ready if p.config.kind == "openai"]
    order: dict[str, int] = {}
    for _c, p in local:  # a model's cells together, models in the order the file lists them
        order.setdefault(_model_key(p), len(order))
    local.sort(key=lambda cp: (order[_model_key(cp[1])], cp[0].position))

    async def local_lane() -> None:
        failed: dict[str, str] = {}
        with keep_loaded():
            for cell, prep in local:
                mk = _model_key(prep)
                if mk in failed:
                    fail(cell, failed[mk])
                    continue
                await run_cell(cell, prep)
                out = outcomes.get(cell.key)
                if (
                    out is not None
                    and out.state == "error"
                    and out.run_id is None
                    and "load" in out.message
                ):
                    failed[mk] = (
                        out.message
                    )  # the model did not load: its other cells would not either

    gate = asyncio.Semaphore(max(1, jobs))

    async def api_cell(cell: Cell, prep: Any) -> None:
        async with gate:
            await run_cell(cell, prep)

    # A failure outside any one cell (the database itself: a full disk invalidates DuckDB's
    # connection, so every later write fails too) stops the study: the other cells are cancelled
    # (each stores what it can, as on Ctrl-C) and that one error is raised, once, with no
    # task left to fail again while asyncio shuts down.
    fatal: list[Exception] = []
    tasks: list[asyncio.Task[None]] = []

    async def guarded(coro: Any) -> None:
        try:
            await coro
        except asyncio.CancelledError:
            if not fatal:
                raise
        except Exception as e:
            if not fatal:
                fatal.append(e)
                for t in tasks:
                    if t is not asyncio.current_task():
                        t.cancel()

    tasks = [
        asyncio.create_task(guarded(c)) for c in (local_lane(), *(api_cell(c, p) for c, p in api))
    ]
    try:
        await asyncio.gather(*tasks)
    finally:
        # cancelled from outside (Ctrl-C): gather has passed the cancellation on to every cell
        # (once: a second one would cut a cell's final flush short); wait for them to stop
        await asyncio.gather(*tasks, return_exceptions=True)
    if fatal:
        raise fatal[0]
    return [outcomes.get(c.key) or CellOutcome(c, "not_started") for c in study.cells]


def _user_error(e: BaseException) -> bool:
    from llmscope.data.suites import SuiteError
    from llmscope.engine.backend import BackendConfigError
    from llmscope.engine.config import ConfigError
    from llmscope.engine.models import ModelSpecError

    return isinstance(e, (SuiteError, ConfigError, BackendConfigError, ModelSpecError))
