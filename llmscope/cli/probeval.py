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
    m = _matching(args)
    res = probeval({q: questions[q] for q in shared}, answers, m.embed, matcher=m.matcher, settings=m.settings)
    per = res.per_question.assign(question_set=res.per_question["qid"].map(question_set))
    sets = per.groupby("question_set")["kl"].agg(["mean", "count"]).reset_index()
    wrong = float(per["n_wrong"].sum() / max(1, per["n_model"].sum()))
    out = {"matcher": m.settings.matcher, "settings": m.settings.as_dict(), "mean_kl": res.mean_kl,
           "n_questions": len(per), "wrong_share": wrong, "by_question_set": sets.to_dict("records"),
           "per_question": per[["qid", "kl", "n_model", "n_wrong"]].to_dict("records")}
    if m.matcher is not None:
        out["stopwords"] = m.matcher.stopwords_source
        out["wordnet_dir"] = m.matcher.wordnet_dir
    if m.note:
        out["fallback"] = m.note
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        print(f"ProbEval ({m.settings.describe()}): mean KL {res.mean_kl:.4f} over {len(per)} questions; "
              f"{wrong:.1%} of answers matched no cluster")
        for r in sets.to_dict("records"):
            print(f"  {r['question_set']:<6} mean KL {r['mean']:.4f}  ({r['count']} questions)")
    return 0


def _settings(args: argparse.Namespace) -> Any:
    """ProbEvalSettings from the --matcher ... --preprocess flags (defaults: the paper's)."""
    from llmscope.analysis.probeval import ProbEvalSettings

    return ProbEvalSettings(matcher=args.matcher, unmatched=args.unmatched, ties=args.ties,
                            assignment=args.assignment, partitions=args.partitions, stopwords=args.stopwords,
                            smoothing=args.smoothing, preprocess=args.preprocess)


def _matching(args: argparse.Namespace) -> Any:
    """The matcher the flags ask for; a missing WordNet or embedder falls back with a warning
    that names the method actually used."""
    from llmscope.analysis.probeval import resolve_matching
    from llmscope.report import _default_embedder

    m = resolve_matching(_settings(args), wordnet_dir=args.wordnet_dir, embedder=_default_embedder)
    if m.note:
        print(f"llmscope: warning: {m.note}", file=sys.stderr)
    return m


def _load_pools(path: str, questions: dict[str, Any]) -> dict[str, list[tuple[str, str, int]]]:
    """Labelled answers to sample from: the reference's ``{"annotated_prediction_data": {qid:
    {answer: {"cluster", "count"}}}}`` or ``{qid: [[answer, cluster], ...]}``."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise _cli_error(f"{path}: cannot read labelled answers: {e}") from None
    if isinstance(data, dict) and isinstance(data.get("annotated_prediction_data"), dict):
        data = data["annotated_prediction_data"]
    if not isinstance(data, dict):
        raise _cli_error(f"{path}: expected {{qid: [[answer, cluster], ...]}} or the reference's "
                         "annotated_prediction_data")
    pools: dict[str, list[tuple[str, str, int]]] = {}
    for qid, v in data.items():
        if isinstance(v, dict) and all(isinstance(x, dict) and "cluster" in x for x in v.values()):
            pools[str(qid)] = [(str(a), str(x["cluster"]), int(x.get("count", 1))) for a, x in v.items()]
        elif isinstance(v, list) and all(isinstance(x, list | tuple) and len(x) == 2 for x in v):
            pools[str(qid)] = [(str(a), str(c), 1) for a, c in v]
        else:
            raise _cli_error(f"{path}: question {qid!r}: expected [[answer, cluster], ...] or "
                             "{answer: {cluster, count}}")
    if not set(pools) & set(questions):
        raise _cli_error(f"{path}: none of its {len(pools)} questions are in the targets file")
    return pools


def cmd_probeval_validate(args: argparse.Namespace) -> int:
    """Spearman rho between automatic and gold KL: the paper's Table 2 protocol (default) or
    the held-out-half check."""
    from llmscope.analysis.probeval import (
        gold_cluster_kl,
        held_out_validation,
        load_gold_labels,
        load_targets,
        mixture_validation,
        score_question,
        spearman_validation,
    )

    for p in (args.targets, args.gold, args.pool):
        if p is not None and not Path(p).is_file():
            raise _cli_error(f"file not found: {p}")
    if not 0 < args.frac < 1:
        raise _cli_error(f"--frac must be between 0 and 1 (exclusive), got {args.frac}")
    if args.sets < 3 or args.runs < 1:
        raise _cli_error(f"--sets must be at least 3 and --runs at least 1 (got {args.sets}, {args.runs})")
    protocol = args.protocol or ("held-out" if args.gold else "mixture")
    if protocol == "mixture" and args.gold:
        raise _cli_error("--gold belongs to --protocol held-out; the mixture protocol takes --pool")
    if protocol == "held-out" and args.pool:
        raise _cli_error("--pool belongs to --protocol mixture; the held-out protocol takes --gold")
    questions = load_targets(args.targets)
    m = _matching(args)
    if protocol == "mixture":
        if args.gold:
            raise _cli_error("--gold belongs to --protocol held-out; the mixture protocol takes --pool")
        pools = _load_pools(args.pool, questions) if args.pool else None
        try:
            mv = mixture_validation(questions, settings=m.settings, matcher=m.matcher, embed=m.embed, pools=pools,
                                    n_sets=args.sets, runs=args.runs, sampling=args.sampling, seed=args.seed)
        except ValueError as e:
            raise _cli_error(f"{args.targets}: {e}") from None
        pool = f"labelled answers {args.pool}" if args.pool else "the reference's CFC pool (the human answers)"
        n_nan = int(mv.per_question["rho"].isna().sum())
        out = {"protocol": "mixture", "matcher": mv.settings.matcher, "settings": mv.settings.as_dict(),
               "rho": mv.rho, "rho_per_run": mv.rho_per_run, "n_questions": mv.n_questions, "sets": mv.n_sets,
               "runs": args.runs, "sampling": mv.sampling, "seed": args.seed, "pool": pool,
               "undefined_rho": n_nan, "per_question": mv.per_question.to_dict("records")}
        if m.note:
            out["fallback"] = m.note
        if args.json:
            print(json.dumps(out, indent=1))
        else:
            spread = f", runs {min(mv.rho_per_run):.3f}-{max(mv.rho_per_run):.3f}" if args.runs > 1 else ""
            print(f"ProbEval validation, Table 2 protocol ({m.settings.describe()}; {args.sampling} sampling from "
                  f"{pool}): mean Spearman rho {mv.rho:.3f} over {mv.n_questions} questions x {args.sets} answer "
                  f"sets, {args.runs} run(s){spread}, seed {args.seed}"
                  + (f"; {n_nan} question-run(s) with a constant KL left out" if n_nan else ""))
        return 0
    if args.gold:
        try:
            gold = load_gold_labels(args.gold)
        except ValueError as e:
            raise _cli_error(str(e)) from None
        shared = sorted(q for q in set(questions) & set(gold) if questions[q].clusters)
        auto_kl = {q: score_question(questions[q], [a for a, _ in gold[q]], m.embed, matcher=m.matcher,
                                     settings=m.settings).kl for q in shared}
        gold_kl = {q: gold_cluster_kl(questions[q], [c for _, c in gold[q]]) for q in shared}
        source = f"gold labels {args.gold}"
    else:
        auto_kl, gold_kl = held_out_validation(questions, m.embed, frac=args.frac, seed=args.seed,
                                               matcher=m.matcher, settings=m.settings)
        source = f"held-out human answers (frac {args.frac}, seed {args.seed})"
    try:
        v = spearman_validation(auto_kl, gold_kl)
    except ValueError as e:
        raise _cli_error(f"{args.targets}: {e}") from None
    out = {"protocol": "held-out", "matcher": m.settings.matcher, "settings": m.settings.as_dict(),
           "source": source, "rho": v.rho, "p_value": v.p_value, "ci_low": v.ci_low,
           "ci_high": v.ci_high, "n_questions": v.n_questions,
           "per_question": [{"qid": q, "auto_kl": auto_kl[q], "gold_kl": gold_kl[q]}
                            for q in sorted(set(auto_kl) & set(gold_kl))]}
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        ci = "" if v.ci_low is None else f" [{v.ci_low:.3f}, {v.ci_high:.3f}]"
        from llmscope.analysis.rows import format_p

        print(f"ProbEval validation, held-out protocol ({m.settings.describe()} vs {source}): Spearman rho "
              f"{v.rho:.3f}{ci} (95% interval), p {format_p(v.p_value)}, {v.n_questions} questions")
    return 0


def _add_settings_flags(p: Any) -> None:
    """The ProbEval choice flags; every default is the paper's (its reference code's)."""
    p.add_argument("--matcher", choices=["wordnet", "embedding", "exact"], default="wordnet",
                   help="wordnet: ProtoQA WordNet matching (the paper's, default); embedding: MiniLM cosine "
                        "(llmscope's earlier rule); exact: normalised string match only")
    p.add_argument("--unmatched", choices=["bucket", "discard"], default="bucket",
                   help='answers matched to no cluster: a "wrong" category in both distributions (default, '
                        "the reference code) or discarded")
    p.add_argument("--ties", choices=["split", "first"], default="split",
                   help="an answer tied between clusters: split evenly (default) or all to the first")
    p.add_argument("--assignment", choices=["best", "one-to-one"], default="best",
                   help="best: each answer to its best cluster(s) (default, the reference); one-to-one: "
                        "ProtoQA's linear_sum_assignment, one answer per cluster")
    p.add_argument("--partitions", choices=["contiguous", "subsets"], default="contiguous",
                   help="WordNet parts: contiguous token runs (default, more_itertools.partitions) or any subsets")
    p.add_argument("--stopwords", choices=["nltk", "sklearn"], default="nltk",
                   help="stop words removed before WordNet matching: nltk's English list (default) or scikit-learn's")
    p.add_argument("--smoothing", choices=["add-one", "model-only"], default="add-one",
                   help="add-one: one dummy answer in every category of both sides (default); model-only: the "
                        "human side unsmoothed (the reference's automatic-clustering path)")
    p.add_argument("--preprocess", choices=["protoqa", "normalize"], default="protoqa",
                   help="model answers before WordNet matching: lower case, first 50 characters (default, "
                        "ProtoQA's) or llmscope's normalisation (punctuation and leading article dropped)")
    p.add_argument("--wordnet-dir", help="folder with WordNet 3.0 files (default $WORDNET_DIR or /usr/share/wordnet)")


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
    _add_settings_flags(p)
    p.add_argument("--json", action="store_true", help="print the per-question KL table as JSON")
    p.set_defaults(func=cmd_probeval)

    v = sub.add_parser("probeval-validate", help="Spearman correlation of automatic and gold ProbEval KL")
    v.add_argument("targets", help="CFC/ProtoQA *_targets.jsonl (human answers and clusters)")
    v.add_argument("--protocol", choices=["mixture", "held-out"], default=None,
                   help="mixture: the paper's Table 2 (answer sets sampled from model, human and uniform "
                        "mixtures; the default without --gold); held-out: a held-out half of the human "
                        "answers, or --gold labels")
    v.add_argument("--pool", metavar="FILE", help="mixture: labelled model answers to sample from ({qid: [[answer, "
                   "cluster], ...]} or the reference's annotated_prediction_data); default the reference's CFC "
                   "pool (every human answer with its cluster, and one answer 'wrong')")
    v.add_argument("--sets", type=int, default=50, help="mixture: answer sets per question (default 50)")
    v.add_argument("--runs", type=int, default=10, help="mixture: runs averaged (default 10)")
    v.add_argument("--sampling", choices=["centered", "diverse"], default="centered",
                   help="mixture: centered (z*model + w1*human + w2*uniform, z in [0.5, 1]; default) or diverse "
                        "(w*human + (1-w)*uniform)")
    v.add_argument("--gold", metavar="FILE", help="held-out: gold labels {qid: [[answer, cluster], ...]} instead "
                   "of a held-out half of the human answers")
    _add_settings_flags(v)
    v.add_argument("--frac", type=float, default=0.5, help="held-out: share of human answers held out (default 0.5)")
    v.add_argument("--seed", type=int, default=0, help="seed of the sampling or of the held-out split (default 0)")
    v.add_argument("--json", action="store_true", help="print rho and the per-question figures as JSON")
    v.set_defaults(func=cmd_probeval_validate)
