"""`llmscope rerun`: selected items of a stored run, scored again as a new linked run.

`llmscope rerun RUN --where FILTER [--model M] [--opt k=v]` runs only the selected items of a
stored run again (another model or options) as a new run whose `runs.meta.rerun_of` names
the old one.

FILTER is a SQL condition (DuckDB) over the old run's rows: columns item_id, variant,
correct, error, prediction, gold, confidence, flagged, and every item field; the words
`failing`, `errored` and `flagged` are shorthands. Only one expression is accepted
(llmscope/runs/where.py): no statements, subqueries, file or table functions.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llmscope.cli.common import (
    CLIError,
    ParserContext,
    add_report_flags,
    add_request_flags,
    check_endpoints,
    check_stored_code,
    config_from_args,
    open_store,
    parse_opts,
    unset_flag,
)
from llmscope.engine.textsafety import for_terminal

if TYPE_CHECKING:
    import pandas as pd

# pandas, the task registry and the store are imported by the commands that use them: the CLI
# registers these parsers for every command, and importing them here cost every `llmscope`
# invocation ~0.6 s (docs/PERFORMANCE.md, "Command start-up")

WHERE_SHORTHANDS = {
    "failing": "correct = 0",
    "errored": "error IS NOT NULL",
    "flagged": "flagged",
}
RESULT_COLUMNS = ("item_id", "variant", "correct", "error", "prediction", "gold", "confidence")


def selection_frame(df: pd.DataFrame) -> pd.DataFrame:
    """The old run's rows as the table a --where filter sees (result columns + item fields)."""
    import pandas as pd

    from llmscope.store.db import decode_json

    base = df[[c for c in RESULT_COLUMNS if c in df]].copy()
    base["flagged"] = df["extra"].map(_flag) if "extra" in df else False
    fields = (
        df["fields"].map(lambda s: decode_json(s) if isinstance(s, str) else {})
        if "fields" in df
        else None
    )
    if fields is not None:
        flat = pd.DataFrame(list(fields), index=df.index)
        for c in flat.columns:
            if c not in base and all(
                isinstance(v, (str, int, float, bool, type(None))) for v in flat[c]
            ):
                base[c] = flat[c]
    return base


def _flag(extra: Any) -> bool:
    from llmscope.store.db import decode_json

    e = decode_json(extra) if isinstance(extra, str) else (extra or {})
    return bool(isinstance(e, dict) and e.get("flagged"))


def select_items(df: pd.DataFrame, where: str) -> list[str]:
    """Item ids of the rows matching a filter (ValueError naming --where when refused or invalid).

    The filter must be one expression over the rows' columns (llmscope/runs/where.py): no
    statements, subqueries, file or table functions."""
    import duckdb

    from llmscope.runs.where import check_where, connect_sandboxed

    cond = WHERE_SHORTHANDS.get(where.strip(), where)
    sel = selection_frame(df)
    con = connect_sandboxed()
    try:
        con.register("r", sel)
        ids = con.execute(check_where(cond, sel.columns, con)).fetchall()
    except duckdb.Error as e:
        cols = ", ".join(sel.columns)
        raise ValueError(f"--where {where!r}: {str(e).splitlines()[0]} (columns: {cols})") from e
    finally:
        con.close()
    keep = {i for (i,) in ids}
    order = list(dict.fromkeys(df["item_id"]))
    return [i for i in order if i in keep]


def cmd_rerun(args: argparse.Namespace) -> int:
    import asyncio
    import dataclasses

    from llmscope.console import ConsoleReporter
    from llmscope.engine.config import config_of_run, resume_inputs
    from llmscope.report import build_report, format_rows
    from llmscope.runs.start import RerunOf, RunRequest, execute, prepare_run, start_run

    if not Path(args.db).exists():  # a stored run is needed: no empty file made to say so
        raise CLIError(f"no database at {args.db} (pass --db)")
    store = open_store(args.db)
    try:
        old = store.find_run(args.run)
        if old is None:
            raise CLIError(f"no run {args.run!r} in {args.db}")
        try:
            ids = select_items(store.results_frame(old["run_id"]), args.where)
        except ValueError as e:
            raise CLIError(str(e)) from e
        if not ids:
            raise CLIError(f"--where {args.where!r} selects no items of run {old['run_id']}")
        opts = old.get("options") or {}
        rin = resume_inputs(old)  # where the run's suite is: its spec, or an external corpus
        task_opts = dict(opts.get("task") or {})
        task_opts.pop("task", None)
        task_opts.update(parse_opts(args.opt))
        model_arg = args.model if args.model is not None else opts.get("model_arg")
        reporter = ConsoleReporter(quiet=args.quiet)
        reporter.on_message(
            "info", f"re-running {len(ids)} item(s) of {old['run_id']} selected by {args.where!r}"
        )
        # The old run's backend config, with the flags given here (and another --model) on top.
        base = config_of_run(old)
        if args.model is not None:
            base = dataclasses.replace(base, model=args.model, kind="")
        req = RunRequest(
            suite_name=rin.suite_name or "",
            suite_path=rin.suite_path,
            config=config_from_args(args, base),
            task_options=task_opts,
            cache=not args.no_cache,
            rerun=RerunOf(old, args.where, ids),
            model_arg=model_arg,
        )
        # one way to start a run (llmscope/runs/start.py): the response cache, the session record
        prep = prepare_run(store, req)
        check_stored_code(args, prep.config, f"run {old['run_id']} in {args.db}")
        check_endpoints(
            args, prep.config, reporter.on_message, stored_in=f"run {old['run_id']} in {args.db}"
        )
        started = start_run(
            store, prep, [reporter], db=args.db, warn=lambda m: reporter.on_message("warning", m)
        )
        prog = asyncio.run(execute(started, lambda m: reporter.on_message("info", m)))
        run_row = store.get_run(prog.run_id)
        if run_row and not args.no_report:
            print(for_terminal(format_rows(build_report(store, run_row))))
        print(f"rerun {prog.run_id} of {old['run_id']}: {len(ids)} item(s)", file=sys.stderr)
        store.checkpoint()  # the checked close (llmscope/cli/run.py `_cmd_run`)
        return 0 if prog.errors == 0 else 1
    finally:
        store.close()


def add_parsers(sub: Any, ctx: ParserContext) -> None:
    """Register `rerun`."""
    r = sub.add_parser("rerun", help="re-run selected items of a stored run as a new linked run")
    ctx.db_arg(r)
    r.add_argument("run", help="run id or prefix ('last')")
    r.add_argument(
        "--where",
        required=True,
        help="one SQL expression over the old rows (item_id, variant, correct, error, prediction, "
        "gold, confidence, flagged, item fields) or failing | errored | flagged; no "
        "statements, subqueries or file functions",
    )
    r.add_argument("--model", help="model for the new run (default: the old run's)")
    r.add_argument(
        "--opt", action="append", metavar="KEY=VALUE", help="task option (JSON value), repeatable"
    )
    # Unset flags keep the old run's backend config (defaults None, as for `run --resume`).
    r.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="prompts per forward pass (default: the old run's)",
    )
    r.add_argument(
        "--device", default=None, help="auto, cpu, cuda, cuda:1, mps (default: the old run's)"
    )
    r.add_argument(
        "--dtype", default=None, help="auto, float32, bfloat16, float16 (default: the old run's)"
    )
    r.add_argument(
        "--threads", type=int, default=None, help="torch threads on CPU (default: torch's choice)"
    )
    unset_flag(
        r, "--sp-prefix", "append the bare SentencePiece word-boundary piece to chat prompts"
    )
    r.add_argument("--seed", type=int, default=None, help="sampling seed (default: the old run's)")
    r.add_argument(
        "--base-url",
        action="append",
        default=None,
        help="OpenAI-compatible endpoint(s) for an API model (default: the old run's)",
    )
    r.add_argument(
        "--trust-db",
        action="store_true",
        help="send requests (and $OPENAI_API_KEY) to the old run's stored base URL without "
        "asking; allow the model's own code if the old run was made with --trust-remote-code",
    )
    r.add_argument(
        "--concurrency",
        type=int,
        default=None,
        help="API requests in flight (default: the old run's)",
    )
    r.add_argument(
        "--top-logprobs", type=int, default=None, help="top log-probabilities asked of an API"
    )
    add_request_flags(r)
    r.add_argument(
        "--no-cache",
        action="store_true",
        help="do not reuse or store responses in the shared response cache",
    )
    add_report_flags(r)
    r.set_defaults(func=cmd_rerun)
