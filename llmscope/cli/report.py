"""Commands that read stored runs: `report`, `figure`, `export` and `compare`.

`report` prints the metrics, `figure` draws them, `export` writes per-item results, `compare`
runs paired tests between runs.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

from llmscope.cli.common import CLIError, ParserContext, open_store
from llmscope.engine.textsafety import for_terminal


def cmd_report(args: argparse.Namespace) -> int:
    from llmscope.analysis.api_method import fleet_notes
    from llmscope.report import build_report, explain_text, format_rows, worldsense_reports

    if getattr(args, "explain", False):
        print(explain_text())
        return 0
    store = open_store(args.db, read_only=True)
    try:
        if args.run:
            run = store.find_run(args.run)
            if run is None:
                raise CLIError(f"no run {args.run!r} in {args.db}")
            runs = [run]
        else:
            runs = [r for r in (store.get_run(x) for x in store.runs()["run_id"]) if r is not None]
        if args.by:
            _check_by(store, runs, args.by)
        from llmscope.console import StepProgress

        rows = []
        fleet: list[str] = []  # replicas that did not serve the run's model (left out, taken out)
        # a bar on a terminal (which run, how many left); nothing in a pipe
        with StepProgress("report", len(runs) * (2 if args.html else 1)) as bar:
            for run in runs:
                bar.step(f"metrics · {run.get('model')} ({run['run_id']})")
                rows += build_report(store, run, args.by)
                fleet += [f"{run['run_id']}: {line}" for line in fleet_notes(run)]
                bar.advance()
            ws_rows, ws_text = worldsense_reports(store, runs)
            if args.html:
                from llmscope.figures.html_report import write_page

                started: list[str] = []

                def on_run(run: dict[str, Any]) -> None:
                    if started:
                        bar.advance()
                    started.append(str(run["run_id"]))
                    bar.step(f"page · {run.get('model')} ({run['run_id']})")

                try:
                    write_page(
                        store,
                        runs,
                        rows,
                        args.html,
                        source=Path(args.db).name,
                        extra_rows=ws_rows,
                        on_run=on_run,
                    )
                except OSError as e:
                    raise CLIError(f"--html {args.html}: cannot write: {e.strerror or e}") from e
    finally:
        store.close()  # read-only: the metrics cache went to the file beside it (store/metrics_cache.py)
    if args.html:
        print(f"wrote {len(runs)} run(s) to {args.html}", file=sys.stderr)
    for line in fleet:  # on stderr: stdout stays the rows (a table or JSON)
        print(for_terminal(line), file=sys.stderr)
    if args.json:
        print(json.dumps(rows + ws_rows, indent=1, default=str))
    else:
        # a terminal's width: lines that would not fit wrap cleanly; a pipe or file: one line a row
        # stored text (groups, suite and model names) shown, never obeyed: bidi and ANSI controls
        print(
            for_terminal(
                format_rows(
                    rows, shutil.get_terminal_size().columns if sys.stdout.isatty() else None
                )
            )
        )
        for line in ws_text:
            print(for_terminal(line))
    return 0


RESULT_GROUP_COLUMNS = ("variant", "gold", "prediction", "item_id")


def _check_by(store: Any, runs: list[dict[str, Any]], by: list[str]) -> None:
    """Every --by must name an item field of each reported run's suite (or a result column)."""
    for run in runs:
        rows = store.execute(
            "SELECT DISTINCT unnest(json_keys(fields)) FROM items WHERE suite_id = ? AND fields IS NOT NULL",
            [run["suite_id"]],
        ).fetchall()
        known = sorted({str(r[0]) for r in rows} | set(RESULT_GROUP_COLUMNS))
        for name in by:
            if name not in known:
                raise CLIError(
                    f"--by {name}: not a field of suite {run.get('suite_name')} (run {run['run_id']}); "
                    f"allowed: {', '.join(known)}"
                )


def cmd_figure(args: argparse.Namespace) -> int:
    from llmscope.figures.make import FigureError, load_runs, write_figure

    store = open_store(args.db, read_only=True)
    try:
        if bool(args.run) == bool(args.suite):
            raise CLIError("figure: give --run (repeatable) or --suite NAME (one of them)")
        runs = []
        for rid in args.run or []:
            run = store.find_run(rid)
            if run is None:
                raise CLIError(f"no run {rid!r} in {args.db}")
            runs.append(run)
        if args.suite:
            from llmscope.analysis.irt import runs_of_suite

            runs = runs_of_suite(store, suite_name=args.suite)
            if not runs:
                raise CLIError(f"figure: no run of suite {args.suite!r} in {args.db}")
        from llmscope.console import StepProgress

        try:
            # a bar on a terminal while each run's metrics are read (computed once, then cached)
            with StepProgress("figure", len(runs) + 1) as bar:

                def on_run(run: dict[str, Any]) -> None:
                    bar.step(f"metrics · {run.get('model')} ({run['run_id']})")
                    bar.advance()

                data = load_runs(store, runs, on_run=on_run)
                bar.step(f"drawing {args.kind}")
                write_figure(args.kind, data, args.output, style=args.style, item=args.item)
        except FigureError as e:
            raise CLIError(str(e)) from e
    finally:
        store.close()  # read-only: the metrics cache went to the file beside it
    print(f"wrote the {args.kind} figure of {len(runs)} run(s) to {args.output}", file=sys.stderr)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from llmscope.io.export import ExportError, export_run

    store = open_store(args.db, read_only=True)
    try:
        run = store.find_run(args.run)
        if run is None:
            raise CLIError(f"no run {args.run!r} in {args.db}")
        if args.format == "parquet" and not args.output:
            raise CLIError("--format parquet writes a binary file: pass -o FILE")
        n = export_run(store, run, args.format, args.output, force=args.force, raw=args.raw)
    except ExportError as e:
        raise CLIError(str(e)) from e
    finally:
        store.close()
    if args.output:
        print(f"wrote {n} rows to {args.output}", file=sys.stderr)
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from llmscope.compare import CompareError, compare_runs, format_compare

    paths = args.db if isinstance(args.db, list) else [args.db]
    stores = []
    try:
        for path in dict.fromkeys(paths):  # the same file twice is opened once
            stores.append(open_store(path, read_only=True))
        out = compare_runs(stores, args.runs, all_items=args.all_items)
    except CompareError as e:
        raise CLIError(str(e)) from e
    finally:
        for st in stores:
            st.close()
    print(
        json.dumps(out, indent=1, default=str) if args.json else for_terminal(format_compare(out))
    )
    return 0


def add_parsers(sub: Any, ctx: ParserContext) -> None:
    """Register `report`, `figure`, `export` and `compare`."""
    s = sub.add_parser("report", help="accuracy with 95%% CIs and other metrics")
    ctx.db_arg(s)
    s.add_argument("--run", help="run id or prefix (default: every run)")
    s.add_argument("--by", action="append", help="group by this item field (repeatable)")
    ctx.json_arg(s, "metric rows")
    s.add_argument(
        "--explain", action="store_true", help="print how every metric is computed and exit"
    )
    s.add_argument(
        "--html",
        metavar="FILE",
        help="also write one self-contained offline page (metrics, figures, "
        "failing items, method record)",
    )
    s.set_defaults(func=cmd_report)

    from llmscope.figures.make import KINDS

    s = sub.add_parser("figure", help="draw a publication figure of runs (pdf, svg or png)")
    ctx.db_arg(s)
    s.add_argument(
        "kind",
        choices=list(KINDS),
        help="what to draw: "
        + "; ".join(f"{k}: {v.title}" for k, v in KINDS.items()).replace("%", "%%"),
    )  # argparse formats help with %
    s.add_argument(
        "--run", action="append", help="run id or prefix ('last'); repeat to overlay runs"
    )
    s.add_argument(
        "--suite", help="every run of this suite (its name) instead of --run (e.g. for irt)"
    )
    s.add_argument("-o", "--output", required=True, help="file to write: .pdf, .svg or .png")
    s.add_argument(
        "--style",
        help="matplotlib style name or .mplstyle file applied over the defaults "
        "(a journal's settings)",
    )
    s.add_argument("--item", help="surprisal: the item to draw (default: the first)")
    s.set_defaults(func=cmd_figure)

    s = sub.add_parser("export", help="write a run's per-item results")
    ctx.db_arg(s)
    s.add_argument("--run", required=True, help="run id or prefix ('last' for the newest)")
    s.add_argument(
        "--format",
        choices=["jsonl", "csv", "parquet", "worldsense", "lm-eval"],
        default="jsonl",
        help="output format (default %(default)s; worldsense: the authors' results-file shape; "
        "lm-eval: a folder of samples_<task>_<run>.jsonl and results_<run>.json, -o DIR)",
    )
    s.add_argument(
        "-o", "--output", help="file (folder for lm-eval); default: stdout for text formats"
    )
    s.add_argument("--force", action="store_true", help="replace an existing output file")
    s.add_argument(
        "--raw",
        action="store_true",
        help="CSV: write cells starting with = + - @ tab CR unchanged (default: prefix ' so "
        "spreadsheets show them as text)",
    )
    s.set_defaults(func=cmd_export)

    s = sub.add_parser("compare", help="compare runs on the same suite (paired tests)")
    s.add_argument(
        "--db",
        action="append",
        default=argparse.SUPPRESS,
        metavar="FILE",
        help="database holding the runs; repeat to compare runs from several files "
        f"(runs are then looked up in every file; default {ctx.default_db})",
    )
    s.add_argument(
        "runs", nargs="+", help="run ids or prefixes (FILE:RUN picks the file explicitly)"
    )
    ctx.json_arg(s, "the comparison")
    s.add_argument(
        "--all-items",
        action="store_true",
        help="runs holding different items: each run's accuracy on all its own items (default: on "
        "the items every run holds; the paired difference is on those either way)",
    )
    s.set_defaults(func=cmd_compare)
