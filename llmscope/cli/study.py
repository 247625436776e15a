"""`llmscope study run FILE` and `llmscope study status FILE|NAME` (docs/studies.md)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from llmscope.cli.common import CLIError, ParserContext, open_store
from llmscope.engine.textsafety import for_terminal


def add_parsers(sub: Any, ctx: ParserContext) -> None:
    """Register `study run` and `study status` under the main parser's subcommands."""
    p = sub.add_parser(
        "study", help="run a study file (suites x models x options) and show its grid"
    )
    ssub = p.add_subparsers(dest="study_command", metavar="STUDY_COMMAND", required=True)

    r = ssub.add_parser(
        "run", help="run every cell of a study file as a normal run (finished cells are reused)"
    )
    r.add_argument("file", help="study file (YAML or TOML), see docs/studies.md")
    _add_db_flag(r)
    r.add_argument(
        "--jobs", type=int, default=4, help="API cells run at once (default 4; local models: one)"
    )
    r.add_argument(
        "--dry-run", action="store_true", help="list the cells and what each would do; run nothing"
    )
    r.add_argument(
        "--trust-study",
        action="store_true",
        help="send requests (and $OPENAI_API_KEY) to base URLs the study file names even when none "
        "of your flags, environment or config names them, and let it set trust_remote_code",
    )
    r.add_argument(
        "--replace",
        action="store_true",
        help="when the database holds a study of this name from another file: make this file "
        "the study (the other file's cells leave it; their runs stay)",
    )
    r.add_argument("--quiet", action="store_true", help="only warnings, errors and the final grid")
    _add_max_cells_flag(r)
    r.set_defaults(func=cmd_study_run)

    s = ssub.add_parser(
        "status", help="the study's grid: each cell's state, counts and headline metric"
    )
    s.add_argument("study", help="study file, or the name of a study recorded in the database")
    _add_db_flag(s)
    s.add_argument("--json", action="store_true", help="print the cells as JSON")
    _add_max_cells_flag(s)
    s.set_defaults(func=cmd_study_status)


def _add_max_cells_flag(p: Any) -> None:
    p.add_argument(
        "--max-cells",
        type=int,
        default=None,
        help="the most cells the study may have (default 10,000; checked before any is built)",
    )


def _add_db_flag(p: Any) -> None:
    """The study commands' --db flag (kept apart from the global --db)."""
    p.add_argument(
        "--db",
        dest="study_db",
        default=None,
        help="DuckDB file (default: the study's `db`, else the usual default)",
    )


def _load(path: str, max_cells: int | None = None) -> Any:
    from llmscope.studies.spec import MAX_CELLS, StudyError, load_study

    if max_cells is not None and max_cells < 1:
        raise CLIError(f"--max-cells must be 1 or more, got {max_cells}")
    try:
        return load_study(path, max_cells=MAX_CELLS if max_cells is None else max_cells)
    except StudyError as e:
        raise CLIError(str(e)) from None


def _db_for(args: argparse.Namespace, study: Any | None) -> str:
    if args.study_db:
        return str(args.study_db)
    if study is not None and study.db:
        p = Path(study.db).expanduser()
        return str(p if p.is_absolute() else (study.path.resolve().parent / p))
    return str(args.db)


# -- run ----------------------------------------------------------------------------------------
def _check_endpoints(study: Any, args: argparse.Namespace, say: Callable[[str, str], None]) -> None:
    """Before any request: a base URL written in a study file (someone else's file, perhaps)
    is used only when you name it yourself too, or pass --trust-study; every endpoint is printed."""
    from llmscope.cli.common import remember_endpoints
    from llmscope.engine.backend import BackendConfigError
    from llmscope.engine.openai import OPENAI_URL, expand_base_urls, public_url
    from llmscope.engine.openai.endpoints import check_base_url
    from llmscope.runs.settings import trusted_endpoints, untrusted_endpoints

    env = os.environ.get("OPENAI_BASE_URL")
    trusted = trusted_endpoints(getattr(args, "_settings", None))
    chosen: list[str] = []
    said: set[tuple[str, str]] = set()
    # Every cell's merged options: a base_url may come from the model entry, a suite entry, the
    # top-level `options` or a grid level, and each of them is the file's choice, not the user's.
    for cell in study.cells:
        m = cell.model
        if cell.options.get("trust_remote_code") and not args.trust_study:
            where = cell.sources.get("trust_remote_code") or str(study.path)
            raise CLIError(
                f"{where} sets trust_remote_code (it runs {m.label}'s own Python code); "
                "pass --trust-study to allow it"
            )
        if not m.is_api:
            continue
        where = cell.sources.get("base_url") or str(study.path)
        try:
            # an `@FILE` the study names is read as a list of URLs and never shown; a URL with
            # a key in it (user:KEY@) is refused before anything is printed or written
            urls = expand_base_urls(cell.options.get("base_url"))
            for u in urls:
                check_base_url(u)
        except BackendConfigError as e:
            raise CLIError(f"{where}, field 'base_url': {e}") from None
        if not urls:
            src = "$OPENAI_BASE_URL" if env else "default"
            for u in expand_base_urls(env) or [OPENAI_URL]:
                if (m.label, u) not in said:
                    said.add((m.label, u))
                    say("info", f"endpoint {public_url(u)} for {m.label} (from {src})")
            continue
        untrusted = untrusted_endpoints(urls, trusted)
        if untrusted and not args.trust_study:
            shown = ", ".join(public_url(u) for u in untrusted)
            raise CLIError(
                f"{where} sends requests (and $OPENAI_API_KEY) for model {m.label!r} to {shown}, "
                "which none of your flags, environment or config names; pass --trust-study to use it"
            )
        for u in urls:
            if (m.label, u) not in said:
                said.add((m.label, u))
                say("info", f"endpoint {public_url(u)} for {m.label} (from study {where})")
        chosen += [u for u in urls if u not in chosen]
    remember_endpoints(chosen)


class _Stop:
    """Ctrl-C, SIGTERM and SIGHUP cancel the study (each running cell stops as `llmscope run`
    does: flushed, `interrupted`); a second signal exits at once. Ignored signals stay ignored."""

    def __init__(self) -> None:
        self.received: int | None = None

    def attach(self, loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any]) -> None:
        import threading

        if threading.current_thread() is not threading.main_thread():
            return
        for name in ("SIGINT", "SIGTERM", "SIGHUP"):
            sig = getattr(signal, name, None)
            if sig is not None and signal.getsignal(sig) is not signal.SIG_IGN:
                loop.add_signal_handler(sig, self._on, sig, task)

    def _on(self, sig: int, task: asyncio.Task[Any]) -> None:
        if self.received is not None:
            os._exit(128 + sig)
        self.received = sig
        task.cancel()


def cmd_study_run(args: argparse.Namespace) -> int:
    from llmscope.store.db import StoreError
    from llmscope.studies.checks import check_levels
    from llmscope.studies.run import run_study
    from llmscope.studies.spec import StudyError
    from llmscope.studies.store import StudyConflict

    study = _load(args.file, args.max_cells)
    try:
        check_levels(study)  # before anything runs, --dry-run included
    except StudyError as e:
        raise CLIError(str(e)) from None
    db = _db_for(args, study)
    if args.jobs < 1:
        raise CLIError(f"--jobs must be 1 or more, got {args.jobs}")

    def say(level: str, text: str) -> None:
        if level == "info" and args.quiet:
            return
        prefix = "" if level == "info" else f"{level}: "
        print(for_terminal(f"{prefix}{text}"), file=sys.stderr, flush=True)

    if args.dry_run:
        return _dry_run(study, db, args.replace)
    _check_endpoints(study, args, say)
    say("info", f"study {study.name}: {len(study.cells)} cells into {db}")
    store = open_store(db)
    stop = _Stop()
    outcomes: list[Any] = []
    try:

        async def main() -> list[Any]:
            task = asyncio.current_task()
            assert task is not None
            stop.attach(asyncio.get_running_loop(), task)
            return await run_study(
                study, store, db=db, jobs=args.jobs, say=say, replace=args.replace
            )

        try:
            outcomes = asyncio.run(main())
        except StudyConflict as e:
            raise CLIError(str(e)) from None
        except (StoreError, OSError) as e:  # the database failed under every cell (a full disk)
            raise CLIError(
                f"study {study.name} stopped: {e}. Every cell's rows committed before it are kept; "
                "run the same command again to resume"
            ) from None
        except (asyncio.CancelledError, KeyboardInterrupt):
            stop.received = stop.received or signal.SIGINT
        try:
            store.checkpoint()
        except StoreError as e:
            raise CLIError(f"study {study.name}: {e}") from e
    finally:
        store.close()
    if stop.received is not None:
        print(
            f"\ninterrupted: every cell scored so far is stored in {db}. Run the same command again to "
            "resume the rest.",
            file=sys.stderr,
        )
        return 128 + int(stop.received)
    _print_status(study.name, db, study.cells)
    failed = [o for o in outcomes if o.state == "error"]
    return 1 if failed or any(o.state in ("done_with_errors", "partial") for o in outcomes) else 0


def _dry_run(study: Any, db: str, replace: bool = False) -> int:
    """Each cell and what `study run` would do with it, from the database read-only, no model loaded."""
    from llmscope.runs.start import RunComplete, prepare_run
    from llmscope.studies.store import study_conflict

    store = open_store(db, read_only=True) if Path(db).exists() else None
    try:
        conflict = study_conflict(store, study) if store is not None else None
        if conflict is not None and not replace:
            raise CLIError(conflict)
        for c in study.cells:
            req = c.request()
            if store is None:
                what = "new run"
            else:
                try:
                    prep = prepare_run(store, req)
                    what = (
                        f"resume run {prep.existing['run_id']} ({prep.n_have}/{prep.n_asked} stored)"
                        if prep.existing is not None
                        else "new run"
                    )
                except RunComplete as e:
                    what = f"reuse run {e.run_id} (complete)"
                except Exception as e:
                    what = f"error: {e}"
            print(for_terminal(f"{c.key}: {what}"))
    finally:
        if store is not None:
            store.close()
    print(f"{len(study.cells)} cells; nothing was run (--dry-run)", file=sys.stderr)
    return 0


# -- status -------------------------------------------------------------------------------------
def cmd_study_status(args: argparse.Namespace) -> int:
    from llmscope.studies.store import study_conflict, study_names, study_record

    target = str(args.study)
    study = _load(target, args.max_cells) if Path(target).is_file() else None
    db = _db_for(args, study)
    name = study.name if study is not None else target
    if study is None and not Path(db).exists():
        raise CLIError(
            f"no study file {target!r}, and no database at {db} to look the name up in (pass --db)"
        )
    if study is not None and not Path(db).exists():
        from llmscope.studies.store import CellRow

        rows = [
            CellRow(
                name, c.key, c.position, c.suite.label, c.model.label, dict(c.levels), "not_started"
            )
            for c in study.cells
        ]
        return _emit(args, name, db, rows)
    from llmscope.store.db import StoreLocked

    try:  # a file a study (or a run) writes now: a copy as of its last flush (open_store says so)
        store = open_store(db, read_only=True)
    except StoreLocked as e:  # a copy that could not be taken: the cells' live channels instead
        return _emit(args, name, db, _live_rows(name, db, study), held=str(e))
    try:
        conflict = study_conflict(store, study) if study is not None else None
        if conflict is not None:
            raise CLIError(conflict.split("; give this")[0] + f"; `study status {name}` shows it")
        if study is None and study_record(store, name) is None:
            known = study_names(store)
            raise CLIError(
                f"no study {name!r} in {db}; recorded studies: {', '.join(known) or '(none)'}"
                " (or give the study file)"
            )
        rows = _cells(store, name, study.cells if study is not None else None)
    finally:
        store.close()
    return _emit(args, name, db, rows)


def _cells(store: Any, name: str, cells: Any) -> list[Any]:
    from llmscope.studies.store import study_cells

    return study_cells(store, name, cells)


def _print_status(name: str, db: str, cells: Any) -> None:
    store = open_store(db, read_only=True)
    try:
        rows = _cells(store, name, cells)
    finally:
        store.close()
    print(for_terminal(format_grid(name, db, rows)))


def _live_rows(name: str, db: str, study: Any | None) -> list[Any]:
    """Cells from the live channel: runs' progress (no metric: the pipeline reads the database)."""
    from llmscope.studies.store import live_cell_rows

    shape = (
        [(c.key, c.position, c.suite.label, c.model.label, dict(c.levels)) for c in study.cells]
        if study is not None
        else None
    )
    return live_cell_rows(db, name, shape)


def _emit(
    args: argparse.Namespace, name: str, db: str, rows: list[Any], held: str | None = None
) -> int:
    if args.json:
        out: dict[str, Any] = {"study": name, "db": db, "cells": [r.to_dict() for r in rows]}
        if held:
            out["live"] = held
        print(json.dumps(out, indent=1, default=str))
    else:
        if held:
            print(
                for_terminal(
                    f"{held}; showing each cell's live channel (no metrics until the file is free)"
                )
            )
        print(for_terminal(format_grid(name, db, rows)))
    return 0


def _cell_text(r: Any) -> str:
    counts = f"{r.n_done - r.n_errors}/{r.n_total}" if r.n_total else ""
    if r.state == "not_started":
        return "not started"
    if r.state == "error":
        return "error" + (f" ({counts})" if r.run_id else "")
    state = r.state.replace("_", " ")
    metric = ""
    if r.value is not None:
        ci = f" [{r.ci95[0]:.3f}, {r.ci95[1]:.3f}]" if r.ci95 else ""
        n = f" n={r.n}" if r.n is not None else ""
        metric = f"{r.metric} {r.value:.3f}{ci}{n} "
    return f"{metric}{state} {counts}".strip()


def format_grid(name: str, db: str, rows: list[Any]) -> str:
    """Models (and the grid's other factors) down, suites across; each cell's headline metric
    with its 95% interval, state and results stored; errors listed under the grid."""
    suites = list(dict.fromkeys(r.suite for r in rows))
    lines_keys = list(dict.fromkeys((r.model, tuple(sorted(r.levels.items()))) for r in rows))
    by = {(r.model, tuple(sorted(r.levels.items())), r.suite): r for r in rows}
    header = [
        "model"
        + (
            "".join(f" {k}" for k, _ in lines_keys[0][1]) if lines_keys and lines_keys[0][1] else ""
        ),
        *suites,
    ]
    table = [header]
    for model, levels in lines_keys:
        label = model + "".join(f" {k}={v}" for k, v in levels)
        table.append(
            [
                label,
                *(
                    _cell_text(by[(model, levels, s)]) if (model, levels, s) in by else "-"
                    for s in suites
                ),
            ]
        )
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.state] = counts.get(r.state, 0) + 1
    summary = ", ".join(f"{n} {s.replace('_', ' ')}" for s, n in counts.items())
    out = [f"study {name} ({db}): {len(rows)} cells: {summary}"]
    out += [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in table
    ]
    wider = [
        r
        for r in rows
        if r.run_items is not None and r.n_items is not None and r.run_items > r.n_items
    ]
    if wider:
        out.append("read on the study's items only (each suite's cells on one item set):")
        out += [
            f"  [{r.cell}] run {r.run_id} holds {r.run_items} items; {r.n_items} are the study's"
            for r in wider
        ]
    errs = [r for r in rows if r.state == "error" and r.error]
    if errs:
        out.append("errors:")
        out += [f"  [{r.cell}] {r.error}" for r in errs]
    return "\n".join(out)
