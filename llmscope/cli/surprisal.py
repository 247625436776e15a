"""`llmscope surprisal`: word-level surprisal of a syntaxgym run, and a reading-time model.

`llmscope surprisal RUN [-o words.csv|words.parquet] [--rt FILE]` writes the word-level surprisal
table of a syntaxgym run (long format, one row per item, condition and word) and, with
reading times, a fit of rt ~ surprisal + length (+ log frequency) on held-out words.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from llmscope.cli.common import CLIError, ParserContext, open_store

# pandas and the analysis modules are imported by the command: the CLI registers every parser
# for every invocation (docs/PERFORMANCE.md, "Command start-up")


def cmd_surprisal(args: argparse.Namespace) -> int:
    import pandas as pd

    from llmscope.analysis.syntaxgym import rt_fit, word_frame
    from llmscope.engine.tasks.registry import task_has

    out = args.output
    if out and Path(out).suffix.lower() not in (".csv", ".parquet", ".tsv"):
        raise CLIError(f"-o must end in .csv, .tsv or .parquet, got {out!r}")
    store = open_store(args.db, read_only=True)
    try:
        run = store.find_run(args.run)
        if run is None:
            raise CLIError(f"no run {args.run!r} in {args.db}")
        if not task_has(run.get("task"), "regions"):
            raise CLIError(
                f"run {run['run_id']} is a {run.get('task')} run; word surprisal needs a syntaxgym run"
            )
        words = word_frame(store.results_frame(run["run_id"]), run)
    finally:
        store.close()
    if out:
        if out.lower().endswith(".parquet"):
            words.to_parquet(out, index=False)
        else:
            words.to_csv(out, index=False, sep="\t" if out.lower().endswith(".tsv") else ",")
        print(f"wrote {len(words)} words to {out}", file=sys.stderr)
    elif not args.rt:
        words.to_csv(sys.stdout, index=False)
    if args.rt:
        path = Path(args.rt)
        if not path.is_file():
            raise CLIError(f"reading-time file not found: {path}")
        try:
            rts = (
                pd.read_parquet(path)
                if path.suffix.lower() == ".parquet"
                else pd.read_csv(path, sep="\t" if path.suffix.lower() == ".tsv" else ",")
            )
        except (ValueError, OSError, pd.errors.ParserError) as e:
            raise CLIError(f"{path}: cannot read reading times: {str(e).splitlines()[0]}") from e
        try:
            fit = rt_fit(words, rts, folds=args.folds)
        except ValueError as e:
            raise CLIError(f"{path}: {e}") from e
        if args.json:
            print(json.dumps(fit.__dict__, indent=1))
        else:
            print(
                f"rt ~ {' + '.join(fit.predictors)}: {fit.n_words} words, {fit.n_folds}-fold held out by sentence"
            )
            print(
                f"  held-out R2 {fit.r2_heldout:.4f} (without surprisal {fit.r2_heldout_baseline:.4f}); "
                f"delta log-lik per word {fit.delta_ll_per_word:.5f} nats"
            )
            print(
                "  coefficients (all words): "
                + ", ".join(f"{k} {v:.4g}" for k, v in fit.coef.items())
            )
    return 0


def add_parsers(sub: Any, ctx: ParserContext) -> None:
    """Register `surprisal`."""
    s = sub.add_parser(
        "surprisal", help="word-level surprisal of a syntaxgym run; optional reading-time model"
    )
    ctx.db_arg(s)
    s.add_argument("run", help="run id or prefix ('last')")
    s.add_argument(
        "-o", "--output", help="write the word table to FILE.csv, .tsv or .parquet (default stdout)"
    )
    s.add_argument(
        "--rt",
        metavar="FILE",
        help="reading times (csv/tsv/parquet): item_id, condition, word_index, "
        "rt[, frequency]; fits rt ~ surprisal + length (+ log frequency) on held-out words",
    )
    s.add_argument(
        "--folds", type=int, default=10, help="cross-validation folds over sentences (default 10)"
    )
    s.add_argument("--json", action="store_true", help="print the reading-time fit as JSON")
    s.set_defaults(func=cmd_surprisal)
