"""CLI commands of the machine-psychology toolkit II: `surprisal`, `rerun` and `probeval`.

`llmscope surprisal RUN [-o words.csv|words.parquet] [--rt FILE]` writes the
word-level surprisal table of a syntaxgym run (long format, one row per item,
condition and word) and, with reading times, fits rt ~ surprisal + length
(+ log frequency) on held-out words.

`llmscope rerun RUN --where FILTER [--model M] [--opt k=v]` runs only the selected
items of a stored run again (another model or options) as a new run whose
`runs.meta.rerun_of` names the old one. FILTER is a SQL condition (DuckDB) over the
old run's rows: columns item_id, variant, correct, error, prediction, gold,
confidence, flagged, and every item field; the words `failing`, `errored` and
`flagged` are shorthands. Only one expression is accepted (llmscope/where.py): no
statements, subqueries, file or table functions.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llmscope.analysis.rows import format_p
from llmscope.cli_common import CLIError, check_endpoints, config_from_args, open_store, parse_opts

if TYPE_CHECKING:
    import pandas as pd

# pandas, the task registry and the store are imported by the commands that use them: the CLI
# registers these parsers for every command, and importing them here cost every `llmscope`
# invocation ~0.6 s (docs/PERFORMANCE.md, round 5)

WHERE_SHORTHANDS = {
    "failing": "correct = 0",
    "errored": "error IS NOT NULL",
    "flagged": "flagged",
}
RESULT_COLUMNS = ("item_id", "variant", "correct", "error", "prediction", "gold", "confidence")


def _cli_error(msg: str) -> Exception:
    return CLIError(msg)


def cmd_surprisal(args: argparse.Namespace) -> int:
    import pandas as pd

    from llmscope.analysis.syntaxgym import rt_fit, word_frame
    from llmscope.engine.tasks.registry import task_has

    out = args.output
    if out and Path(out).suffix.lower() not in (".csv", ".parquet", ".tsv"):
        raise _cli_error(f"-o must end in .csv, .tsv or .parquet, got {out!r}")
    store = open_store(args.db, read_only=True)
    try:
        run = store.find_run(args.run)
        if run is None:
            raise _cli_error(f"no run {args.run!r} in {args.db}")
        if not task_has(run.get("task"), "regions"):
            raise _cli_error(f"run {run['run_id']} is a {run.get('task')} run; word surprisal needs a syntaxgym run")
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
            raise _cli_error(f"reading-time file not found: {path}")
        try:
            rts = pd.read_parquet(path) if path.suffix.lower() == ".parquet" else pd.read_csv(
                path, sep="\t" if path.suffix.lower() == ".tsv" else ",")
        except (ValueError, OSError, pd.errors.ParserError) as e:
            raise _cli_error(f"{path}: cannot read reading times: {str(e).splitlines()[0]}") from e
        try:
            fit = rt_fit(words, rts, folds=args.folds)
        except ValueError as e:
            raise _cli_error(f"{path}: {e}") from e
        if args.json:
            print(json.dumps(fit.__dict__, indent=1))
        else:
            print(f"rt ~ {' + '.join(fit.predictors)}: {fit.n_words} words, {fit.n_folds}-fold held out by sentence")
            print(f"  held-out R2 {fit.r2_heldout:.4f} (without surprisal {fit.r2_heldout_baseline:.4f}); "
                  f"delta log-lik per word {fit.delta_ll_per_word:.5f} nats")
            print("  coefficients (all words): " + ", ".join(f"{k} {v:.4g}" for k, v in fit.coef.items()))
    return 0


def selection_frame(df: pd.DataFrame) -> pd.DataFrame:
    """The old run's rows as the table a --where filter sees (result columns + item fields)."""
    import pandas as pd

    from llmscope.store.db import decode_json
    base = df[[c for c in RESULT_COLUMNS if c in df]].copy()
    base["flagged"] = df["extra"].map(_flag) if "extra" in df else False
    fields = df["fields"].map(lambda s: decode_json(s) if isinstance(s, str) else {}) if "fields" in df else None
    if fields is not None:
        flat = pd.DataFrame(list(fields), index=df.index)
        for c in flat.columns:
            if c not in base and all(isinstance(v, (str, int, float, bool, type(None))) for v in flat[c]):
                base[c] = flat[c]
    return base


def _flag(extra: Any) -> bool:
    from llmscope.store.db import decode_json

    e = decode_json(extra) if isinstance(extra, str) else (extra or {})
    return bool(isinstance(e, dict) and e.get("flagged"))


def select_items(df: pd.DataFrame, where: str) -> list[str]:
    """Item ids of the rows matching a filter (ValueError naming --where when refused or invalid).

    The filter must be one expression over the rows' columns (llmscope/where.py): no
    statements, subqueries, file or table functions."""
    import duckdb

    from llmscope.where import check_where, connect_sandboxed

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
    from llmscope.runstart import RerunOf, RunRequest, execute, prepare_run, start_run

    store = open_store(args.db)
    try:
        old = store.find_run(args.run)
        if old is None:
            raise _cli_error(f"no run {args.run!r} in {args.db}")
        try:
            ids = select_items(store.results_frame(old["run_id"]), args.where)
        except ValueError as e:
            raise _cli_error(str(e)) from e
        if not ids:
            raise _cli_error(f"--where {args.where!r} selects no items of run {old['run_id']}")
        opts = old.get("options") or {}
        rin = resume_inputs(old)  # where the run's suite is: its spec, or an external corpus
        task_opts = dict(opts.get("task") or {})
        task_opts.pop("task", None)
        task_opts.update(parse_opts(args.opt))
        model_arg = args.model if args.model is not None else opts.get("model_arg")
        reporter = ConsoleReporter(quiet=args.quiet)
        reporter.on_message("info", f"re-running {len(ids)} item(s) of {old['run_id']} selected by {args.where!r}")
        # The old run's backend config, with the flags given here (and another --model) on top.
        base = config_of_run(old)
        if args.model is not None:
            base = dataclasses.replace(base, model=args.model, kind="")
        req = RunRequest(suite_name=rin.suite_name or "", suite_path=rin.suite_path,
                         config=config_from_args(args, base), task_options=task_opts,
                         cache=not args.no_cache, rerun=RerunOf(old, args.where, ids),
                         model_arg=model_arg)
        # one way to start a run (llmscope/runstart.py): the response cache, the session record
        prep = prepare_run(store, req)
        check_endpoints(args, prep.config, reporter.on_message,
                        stored_in=f"run {old['run_id']} in {args.db}")
        started = start_run(store, prep, [reporter], db=args.db,
                            warn=lambda m: reporter.on_message("warning", m))
        prog = asyncio.run(execute(started, lambda m: reporter.on_message("info", m)))
        run_row = store.get_run(prog.run_id)
        if run_row and not args.no_report:
            print(format_rows(build_report(store, run_row)))
        print(f"rerun {prog.run_id} of {old['run_id']}: {len(ids)} item(s)", file=sys.stderr)
        store.checkpoint()  # the checked close (llmscope/cli.py `_cmd_run`)
        return 0 if prog.errors == 0 else 1
    finally:
        store.close()


def cmd_probeval(args: argparse.Namespace) -> int:
    """ProbEval of an answers file against a targets file, as the paper runs it."""
    from llmscope.analysis.probeval import load_answer_sets, load_targets, probeval, question_set

    for p in (args.targets, args.answers):
        if not Path(p).is_file():
            raise _cli_error(f"file not found: {p}")
    questions = load_targets(args.targets)
    answers = load_answer_sets(args.answers)
    shared = sorted(set(questions) & set(answers))
    if not shared:
        raise _cli_error(f"{args.answers} answers none of the {len(questions)} questions in {args.targets}")
    method, matcher, embed = _matcher(args)
    res = probeval({q: questions[q] for q in shared}, answers, embed, matcher=matcher)
    per = res.per_question.assign(question_set=res.per_question["qid"].map(question_set))
    sets = per.groupby("question_set")["kl"].agg(["mean", "count"]).reset_index()
    wrong = float(per["n_wrong"].sum() / max(1, per["n_model"].sum()))
    out = {"matcher": method, "mean_kl": res.mean_kl, "n_questions": len(per), "wrong_share": wrong,
           "by_question_set": sets.to_dict("records")}
    if matcher is not None:
        out["stopwords"] = matcher.stopwords_source
        out["wordnet_dir"] = matcher.wordnet_dir
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        print(f"ProbEval ({method} matching): mean KL {res.mean_kl:.4f} over {len(per)} questions; "
              f"{wrong:.1%} of answers matched no cluster")
        for r in sets.to_dict("records"):
            print(f"  {r['question_set']:<6} mean KL {r['mean']:.4f}  ({r['count']} questions)")
    return 0


def _matcher(args: argparse.Namespace) -> tuple[str, Any, Any]:
    """(method, WordNet matcher or None, embedder or None) for --matcher; a missing WordNet
    or embedder falls back with a warning that names the method actually used."""
    matcher = embed = None
    method = args.matcher
    if method == "wordnet":
        from llmscope.analysis.wordnet_match import WordNetMatcher, WordNetUnavailable

        try:
            matcher = WordNetMatcher(args.wordnet_dir)
        except WordNetUnavailable as e:
            print(f"llmscope: warning: {e}; using the embedding matcher instead", file=sys.stderr)
            method = "embedding"
    if method == "embedding":
        from llmscope.report import _default_embedder

        embed = _default_embedder()
        if embed is None:
            print("llmscope: warning: no sentence embedder installed; exact matching only", file=sys.stderr)
            method = "exact"
    return method, matcher, embed


def cmd_probeval_validate(args: argparse.Namespace) -> int:
    """The paper's validation: Spearman rho between automatic and gold-cluster KL over questions."""
    from llmscope.analysis.probeval import (
        gold_cluster_kl,
        held_out_validation,
        load_gold_labels,
        load_targets,
        score_question,
        spearman_validation,
    )

    for p in (args.targets, args.gold):
        if p is not None and not Path(p).is_file():
            raise _cli_error(f"file not found: {p}")
    if not 0 < args.frac < 1:
        raise _cli_error(f"--frac must be between 0 and 1 (exclusive), got {args.frac}")
    questions = load_targets(args.targets)
    method, matcher, embed = _matcher(args)
    if args.gold:
        try:
            gold = load_gold_labels(args.gold)
        except ValueError as e:
            raise _cli_error(str(e)) from None
        shared = sorted(q for q in set(questions) & set(gold) if questions[q].clusters)
        auto_kl = {q: score_question(questions[q], [a for a, _ in gold[q]], embed, matcher=matcher).kl
                   for q in shared}
        gold_kl = {q: gold_cluster_kl(questions[q], [c for _, c in gold[q]]) for q in shared}
        source = f"gold labels {args.gold}"
    else:
        auto_kl, gold_kl = held_out_validation(questions, embed, frac=args.frac, seed=args.seed, matcher=matcher)
        source = f"held-out human answers (frac {args.frac}, seed {args.seed})"
    try:
        v = spearman_validation(auto_kl, gold_kl)
    except ValueError as e:
        raise _cli_error(f"{args.targets}: {e}") from None
    out = {"matcher": method, "source": source, "rho": v.rho, "p_value": v.p_value, "ci_low": v.ci_low,
           "ci_high": v.ci_high, "n_questions": v.n_questions,
           "per_question": [{"qid": q, "auto_kl": auto_kl[q], "gold_kl": gold_kl[q]}
                            for q in sorted(set(auto_kl) & set(gold_kl))]}
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        ci = "" if v.ci_low is None else f" [{v.ci_low:.3f}, {v.ci_high:.3f}]"
        print(f"ProbEval validation ({method} matching vs {source}): Spearman rho {v.rho:.3f}{ci} "
              f"(95% interval), p {format_p(v.p_value)}, {v.n_questions} questions")
    return 0


def add_parsers(sub: Any, db_arg: Any) -> None:
    """Register `surprisal`, `rerun`, `probeval` and `probeval-validate` on the CLI's subparsers."""
    s = sub.add_parser("surprisal", help="word-level surprisal of a syntaxgym run; optional reading-time model")
    db_arg(s)
    s.add_argument("run", help="run id or prefix ('last')")
    s.add_argument("-o", "--output", help="write the word table to FILE.csv, .tsv or .parquet (default stdout)")
    s.add_argument("--rt", metavar="FILE", help="reading times (csv/tsv/parquet): item_id, condition, word_index, "
                   "rt[, frequency]; fits rt ~ surprisal + length (+ log frequency) on held-out words")
    s.add_argument("--folds", type=int, default=10, help="cross-validation folds over sentences (default 10)")
    s.add_argument("--json", action="store_true", help="print the reading-time fit as JSON")
    s.set_defaults(func=cmd_surprisal)

    r = sub.add_parser("rerun", help="re-run selected items of a stored run as a new linked run")
    db_arg(r)
    r.add_argument("run", help="run id or prefix ('last')")
    r.add_argument("--where", required=True,
                   help="one SQL expression over the old rows (item_id, variant, correct, error, prediction, "
                        "gold, confidence, flagged, item fields) or failing | errored | flagged; no "
                        "statements, subqueries or file functions")
    r.add_argument("--model", help="model for the new run (default: the old run's)")
    r.add_argument("--opt", action="append", metavar="KEY=VALUE", help="task option (JSON value), repeatable")
    # Unset flags keep the old run's backend config (defaults None, as for `run --resume`).
    r.add_argument("--batch-size", type=int, default=None, help="prompts per forward pass (default: the old run's)")
    r.add_argument("--device", default=None, help="auto, cpu, cuda, cuda:1, mps (default: the old run's)")
    r.add_argument("--dtype", default=None, help="auto, float32, bfloat16, float16 (default: the old run's)")
    r.add_argument("--threads", type=int, default=None, help="torch threads on CPU (default: torch's choice)")
    r.add_argument("--sp-prefix", action="store_true", default=None,
                   help="append the bare SentencePiece word-boundary piece to chat prompts")
    r.add_argument("--seed", type=int, default=None, help="sampling seed (default: the old run's)")
    r.add_argument("--base-url", action="append", default=None,
                   help="OpenAI-compatible endpoint(s) for an API model (default: the old run's)")
    r.add_argument("--trust-db", action="store_true",
                   help="send requests (and $OPENAI_API_KEY) to the old run's stored base URL without asking")
    r.add_argument("--concurrency", type=int, default=None, help="API requests in flight (default: the old run's)")
    r.add_argument("--top-logprobs", type=int, default=None, help="top log-probabilities asked of an API")
    r.add_argument("--max-retries", type=int, default=None, help="retries per API request (default 6)")
    r.add_argument("--timeout", type=float, default=None, help="API request timeout in seconds")
    r.add_argument("--samples", type=int, default=None, help="samples per item when an API gives no logprobs")
    r.add_argument("--reasoning", action="store_true", default=None, help="treat the API model as a reasoning model")
    r.add_argument("--no-cache", action="store_true",
                   help="do not reuse or store responses in the shared response cache")
    r.add_argument("--quiet", action="store_true", help="no progress line, only warnings and the report")
    r.add_argument("--no-report", action="store_true", help="do not print the report when the run ends")
    r.set_defaults(func=cmd_rerun)

    p = sub.add_parser("probeval", help="ProbEval KL of an answers file against clustered human answers")
    p.add_argument("targets", help="CFC/ProtoQA *_targets.jsonl (human answers and clusters)")
    p.add_argument("answers", help='answers JSON: {"model_answers": {qid: [answer, ...]}}')
    p.add_argument("--matcher", choices=["wordnet", "embedding"], default="wordnet",
                   help="wordnet: ProtoQA WordNet matching with even splits (the paper's); embedding: MiniLM cosine")
    p.add_argument("--wordnet-dir", help="folder with WordNet 3.0 files (default $WORDNET_DIR or /usr/share/wordnet)")
    p.add_argument("--json", action="store_true", help="print the per-question KL table as JSON")
    p.set_defaults(func=cmd_probeval)

    v = sub.add_parser("probeval-validate", help="Spearman correlation of automatic and gold-cluster ProbEval KL")
    v.add_argument("targets", help="CFC/ProtoQA *_targets.jsonl (human answers and clusters)")
    v.add_argument("--gold", metavar="FILE", help='gold labels {qid: [[answer, cluster], ...]}; default: a held-out '
                   "half of the human answers, labelled by their clusters in TARGETS")
    v.add_argument("--matcher", choices=["wordnet", "embedding", "exact"], default="wordnet",
                   help="the automatic matcher under test: wordnet (the paper's, default), embedding (MiniLM "
                   "cosine) or exact (normalised string match only)")
    v.add_argument("--wordnet-dir", help="folder with WordNet 3.0 files (default $WORDNET_DIR or /usr/share/wordnet)")
    v.add_argument("--frac", type=float, default=0.5, help="share of human answers held out (default 0.5)")
    v.add_argument("--seed", type=int, default=0, help="seed of the held-out split (default 0)")
    v.add_argument("--json", action="store_true", help="print rho, its interval and the per-question KLs as JSON")
    v.set_defaults(func=cmd_probeval_validate)
