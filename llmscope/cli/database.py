"""Commands on the database file: `runs`, `migrate` and `import`.

`runs` lists its runs, `migrate` upgrades its schema, `import` stores published results as runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from llmscope.cli.common import CLIError, ParserContext, discard_if_unused, open_store


def cmd_runs(args: argparse.Namespace) -> int:
    import datetime as dt
    import json

    from llmscope.engine.textsafety import for_terminal

    store = open_store(args.db, read_only=True)
    try:
        recs = store.run_records()
    finally:
        store.close()
    if args.json:

        def _iso(v: Any) -> Any:  # times as ISO 8601 to the millisecond; NaN as null
            if isinstance(v, dt.datetime):
                return v.isoformat(timespec="milliseconds")
            return None if isinstance(v, float) and v != v else v

        print(
            json.dumps(
                [{k: _iso(v) for k, v in r.items()} for r in recs],
                separators=(",", ":"),
                default=str,
            )
        )
        return 0
    if not recs:
        print("(no runs)")
        return 0
    for r in recs:
        # the headline metric (metrics cache; worldsense_accuracy for a WorldSense run), named
        a = r["accuracy"]
        acc = "" if a is None or a != a else f"{r['metric']} {a:.3f}"
        # a run row written by hand or by an old version may lack any of these: shown as "-"
        suite, model, status = (
            ("-" if v is None or v != v else str(v))
            for v in (r["suite_name"], r["model"], r["status"])
        )
        line = (
            f"{r['run_id']}  {suite:<20} {model[:32]:<32} {status:<22} "
            f"{r['n_done']}/{r['n_total']}  {acc}  {r['started_at']}"
        )
        print(for_terminal(line))  # names from a shared file: shown, never obeyed (bidi, ANSI)
    return 0


def cmd_migrate(args: argparse.Namespace) -> int:
    """Read-only commands never change a file; this one upgrades it (as `run` or the TUI would)."""
    from llmscope.store.db import SCHEMA_VERSION, file_schema_version

    if not Path(args.db).exists():
        raise CLIError(f"no database at {args.db} (pass --db)")
    before = file_schema_version(args.db)
    store = open_store(args.db)  # a write open migrates (all or nothing) or says why not
    try:
        store.checkpoint()
    finally:
        store.close()
    if before == SCHEMA_VERSION:
        print(f"{args.db} is already at schema {SCHEMA_VERSION}; nothing changed")
    else:
        print(
            f"{args.db}: schema {before} -> {SCHEMA_VERSION} (older llmscope versions cannot open it now)"
        )
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from llmscope.engine.textsafety import for_terminal
    from llmscope.io.importers import published

    if not args.paths and args.kind != "commonsense-models":
        raise CLIError(f"import {args.kind}: give the files to import")
    if len(args.paths) > 1 and args.kind == "commonsense-models":
        raise CLIError("import commonsense-models: give one CSV (or none for the one in ../shared)")
    created = not Path(args.db).exists()
    store = open_store(args.db)
    try:
        if args.kind == "worldsense":
            msgs = published.import_worldsense(store, Path(args.paths[0]))
        elif args.kind == "lm-eval":
            from llmscope.io.importers.lm_eval import import_lm_eval

            msgs = import_lm_eval(
                store, [Path(p) for p in args.paths], suite_spec=args.suite, model=args.model
            )
        elif args.kind == "commonsense-models":
            from llmscope.console import StepProgress
            from llmscope.io.importers.commonsense_models import import_commonsense_models

            with StepProgress("import", 1) as bar:  # the model count is known once the file is read

                def on_model(i: int, n: int, name: str) -> None:
                    bar.set_total(n)
                    bar.step(name)
                    if i:
                        bar.advance()

                msgs = import_commonsense_models(
                    store,
                    Path(args.paths[0]) if args.paths else None,
                    suite_path=args.suite_path,
                    suite_name=args.suite,
                    on_model=on_model,
                )
        elif args.kind == "syntaxgym-results":
            from llmscope.io.importers.syntaxgym_results import import_syntaxgym_results

            msgs = import_syntaxgym_results(
                store, [Path(p) for p in args.paths], suite_path=args.suite_path
            )
        elif args.kind == "answers":
            msgs = published.import_answer_sets(
                store, [Path(p) for p in args.paths], suite_path=args.suite_path, model=args.model
            )
        else:
            msgs = published.import_results(
                store, [Path(p) for p in args.paths], suite_path=args.suite_path
            )
        store.checkpoint()
    except BaseException:
        discard_if_unused(store, created)  # a refused file to import: no empty database left
        raise
    finally:
        store.close()
    for m in msgs:
        print(for_terminal(m))  # model names and ids from the imported file: shown, never obeyed
    return 0


def add_parsers(sub: Any, ctx: ParserContext) -> None:
    """Register `runs`, `migrate` and `import`."""
    s = sub.add_parser("runs", help="list runs in the database")
    ctx.db_arg(s)
    ctx.json_arg(s, "the runs")
    s.set_defaults(func=cmd_runs)

    s = sub.add_parser(
        "migrate", help="upgrade a database written by an older llmscope to this version's schema"
    )
    ctx.db_arg(s)
    s.set_defaults(func=cmd_migrate)

    s = sub.add_parser(
        "import",
        help="import published results (worldsense DIR | results FILE... | answers FILE... | "
        "lm-eval SAMPLES.jsonl... | commonsense-models [CSV] | syntaxgym-results CSV...)",
    )
    ctx.db_arg(s)
    s.add_argument(
        "kind",
        choices=[
            "worldsense",
            "results",
            "answers",
            "lm-eval",
            "commonsense-models",
            "syntaxgym-results",
        ],
        help="what the files are",
    )
    s.add_argument(
        "paths",
        nargs="*",
        help="the folder (worldsense) or files to import (commonsense-models: "
        "all_models_binarythresh.csv, default the one in ../shared)",
    )
    s.add_argument(
        "--suite-path",
        help="commonsense statements CSV (results, commonsense-models), CFC "
        "targets file (answers) or SyntaxGym test-suite folder (syntaxgym-results)",
    )
    s.add_argument("--model", help="name of the imported answer set (answers) or model (lm-eval)")
    s.add_argument(
        "--suite",
        help="lm-eval: the task YAML or suite the samples were scored on (default: "
        "rebuilt from the samples); commonsense-models: commonsense (default) or "
        "commonsense-sample (the published answers to the sample's statements only)",
    )
    s.set_defaults(func=cmd_import)
