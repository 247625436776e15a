"""`llmscope probeval` and `probeval-validate`: ProbEval KL against clustered human answers.

`probeval` scores an answers file; `probeval-validate` checks how well the automatic KL agrees
with gold labels (the paper's protocols).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from llmscope.cli.common import CLIError, ParserContext

# the analysis modules are imported by the commands: the CLI registers every parser for every
# invocation (docs/PERFORMANCE.md, "Command start-up")


def warn_shared(questions: dict[str, Any], path: str) -> None:
    """One line on stderr per question whose targets list an answer in several clusters."""
    for qid, q in questions.items():
        for a, ks in q.shared.items():
            print(
                f"warning: {path}: question {qid} lists {a!r} in clusters {', '.join(ks)}; it counts "
                f"in the last one, {ks[-1]}, as in the reference implementation",
                file=sys.stderr,
            )


def cmd_probeval(args: argparse.Namespace) -> int:
    """ProbEval of an answers file against a targets file, as the paper runs it."""
    from llmscope.analysis.probeval import load_answer_sets, load_targets, probeval
    from llmscope.analysis.probeval_validation import question_set

    for p in (args.targets, args.answers):
        if not Path(p).is_file():
            raise CLIError(f"file not found: {p}")
    questions = load_targets(args.targets)
    warn_shared(questions, args.targets)
    answers = load_answer_sets(args.answers)
    shared = sorted(set(questions) & set(answers))
    if not shared:
        raise CLIError(
            f"{args.answers} answers none of the {len(questions)} questions in {args.targets}"
        )
    m = _matching(args)
    res = probeval(
        {q: questions[q] for q in shared}, answers, m.embed, matcher=m.matcher, settings=m.settings
    )
    per = res.per_question.assign(question_set=res.per_question["qid"].map(question_set))
    sets = per.groupby("question_set")["kl"].agg(["mean", "count"]).reset_index()
    wrong = float(per["n_wrong"].sum() / max(1, per["n_model"].sum()))
    out = {
        "matcher": m.settings.matcher,
        "settings": m.settings.as_dict(),
        "mean_kl": res.mean_kl,
        "n_questions": len(per),
        "wrong_share": wrong,
        "by_question_set": sets.to_dict("records"),
        "per_question": per[["qid", "kl", "n_model", "n_wrong"]].to_dict("records"),
    }
    if m.matcher is not None:
        out["stopwords"] = m.matcher.stopwords_source
        out["wordnet_dir"] = m.matcher.wordnet_dir
    if m.note:
        out["fallback"] = m.note
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        print(
            f"ProbEval ({m.settings.describe()}): mean KL {res.mean_kl:.4f} over {len(per)} questions; "
            f"{wrong:.1%} of answers matched no cluster"
        )
        for r in sets.to_dict("records"):
            print(f"  {r['question_set']:<6} mean KL {r['mean']:.4f}  ({r['count']} questions)")
    return 0


def _settings(args: argparse.Namespace) -> Any:
    """ProbEvalSettings from the --matcher ... --preprocess flags (defaults: the paper's)."""
    from llmscope.analysis.probeval import ProbEvalSettings

    return ProbEvalSettings(
        matcher=args.matcher,
        unmatched=args.unmatched,
        ties=args.ties,
        assignment=args.assignment,
        partitions=args.partitions,
        stopwords=args.stopwords,
        smoothing=args.smoothing,
        preprocess=args.preprocess,
    )


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
        raise CLIError(f"{path}: cannot read labelled answers: {e}") from None
    if isinstance(data, dict) and isinstance(data.get("annotated_prediction_data"), dict):
        data = data["annotated_prediction_data"]
    if not isinstance(data, dict):
        raise CLIError(
            f"{path}: expected {{qid: [[answer, cluster], ...]}} or the reference's "
            "annotated_prediction_data"
        )
    pools: dict[str, list[tuple[str, str, int]]] = {}
    for qid, v in data.items():
        if isinstance(v, dict) and all(isinstance(x, dict) and "cluster" in x for x in v.values()):
            pools[str(qid)] = [
                (str(a), str(x["cluster"]), int(x.get("count", 1))) for a, x in v.items()
            ]
        elif isinstance(v, list) and all(isinstance(x, list | tuple) and len(x) == 2 for x in v):
            pools[str(qid)] = [(str(a), str(c), 1) for a, c in v]
        else:
            raise CLIError(
                f"{path}: question {qid!r}: expected [[answer, cluster], ...] or "
                "{answer: {cluster, count}}"
            )
    if not set(pools) & set(questions):
        raise CLIError(f"{path}: none of its {len(pools)} questions are in the targets file")
    return pools


def cmd_probeval_validate(args: argparse.Namespace) -> int:
    """Spearman rho between automatic and gold KL: the paper's Table 2 protocol (default) or
    the held-out-half check."""
    from llmscope.analysis.probeval import load_targets, score_question
    from llmscope.analysis.probeval_validation import (
        gold_cluster_kl,
        held_out_validation,
        load_gold_labels,
        mixture_validation,
        spearman_validation,
    )

    for p in (args.targets, args.gold, args.pool):
        if p is not None and not Path(p).is_file():
            raise CLIError(f"file not found: {p}")
    if not 0 < args.frac < 1:
        raise CLIError(f"--frac must be between 0 and 1 (exclusive), got {args.frac}")
    if args.sets < 3 or args.runs < 1:
        raise CLIError(
            f"--sets must be at least 3 and --runs at least 1 (got {args.sets}, {args.runs})"
        )
    protocol = args.protocol or ("held-out" if args.gold else "mixture")
    if protocol == "mixture" and args.gold:
        raise CLIError("--gold belongs to --protocol held-out; the mixture protocol takes --pool")
    if protocol == "held-out" and args.pool:
        raise CLIError("--pool belongs to --protocol mixture; the held-out protocol takes --gold")
    questions = load_targets(args.targets)
    warn_shared(questions, args.targets)
    m = _matching(args)
    if protocol == "mixture":
        if args.gold:
            raise CLIError(
                "--gold belongs to --protocol held-out; the mixture protocol takes --pool"
            )
        pools = _load_pools(args.pool, questions) if args.pool else None
        try:
            mv = mixture_validation(
                questions,
                settings=m.settings,
                matcher=m.matcher,
                embed=m.embed,
                pools=pools,
                n_sets=args.sets,
                runs=args.runs,
                sampling=args.sampling,
                seed=args.seed,
            )
        except ValueError as e:
            raise CLIError(f"{args.targets}: {e}") from None
        pool = (
            f"labelled answers {args.pool}"
            if args.pool
            else "the reference's CFC pool (the human answers)"
        )
        n_nan = int(mv.per_question["rho"].isna().sum())
        out = {
            "protocol": "mixture",
            "matcher": mv.settings.matcher,
            "settings": mv.settings.as_dict(),
            "rho": mv.rho,
            "rho_per_run": mv.rho_per_run,
            "n_questions": mv.n_questions,
            "sets": mv.n_sets,
            "runs": args.runs,
            "sampling": mv.sampling,
            "seed": args.seed,
            "pool": pool,
            "undefined_rho": n_nan,
            "per_question": mv.per_question.to_dict("records"),
        }
        if m.note:
            out["fallback"] = m.note
        if args.json:
            print(json.dumps(out, indent=1))
        else:
            spread = (
                f", runs {min(mv.rho_per_run):.3f}-{max(mv.rho_per_run):.3f}"
                if args.runs > 1
                else ""
            )
            print(
                f"ProbEval validation, Table 2 protocol ({m.settings.describe()}; {args.sampling} sampling from "
                f"{pool}): mean Spearman rho {mv.rho:.3f} over {mv.n_questions} questions x {args.sets} answer "
                f"sets, {args.runs} run(s){spread}, seed {args.seed}"
                + (f"; {n_nan} question-run(s) with a constant KL left out" if n_nan else "")
            )
        return 0
    if args.gold:
        try:
            gold = load_gold_labels(args.gold)
        except ValueError as e:
            raise CLIError(str(e)) from None
        shared = sorted(q for q in set(questions) & set(gold) if questions[q].clusters)
        auto_kl = {
            q: score_question(
                questions[q],
                [a for a, _ in gold[q]],
                m.embed,
                matcher=m.matcher,
                settings=m.settings,
            ).kl
            for q in shared
        }
        gold_kl = {q: gold_cluster_kl(questions[q], [c for _, c in gold[q]]) for q in shared}
        source = f"gold labels {args.gold}"
    else:
        auto_kl, gold_kl = held_out_validation(
            questions,
            m.embed,
            frac=args.frac,
            seed=args.seed,
            matcher=m.matcher,
            settings=m.settings,
        )
        source = f"held-out human answers (frac {args.frac}, seed {args.seed})"
    try:
        v = spearman_validation(auto_kl, gold_kl)
    except ValueError as e:
        raise CLIError(f"{args.targets}: {e}") from None
    out = {
        "protocol": "held-out",
        "matcher": m.settings.matcher,
        "settings": m.settings.as_dict(),
        "source": source,
        "rho": v.rho,
        "p_value": v.p_value,
        "ci_low": v.ci_low,
        "ci_high": v.ci_high,
        "n_questions": v.n_questions,
        "per_question": [
            {"qid": q, "auto_kl": auto_kl[q], "gold_kl": gold_kl[q]}
            for q in sorted(set(auto_kl) & set(gold_kl))
        ],
    }
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        ci = "" if v.ci_low is None else f" [{v.ci_low:.3f}, {v.ci_high:.3f}]"
        from llmscope.analysis.rows import format_p

        print(
            f"ProbEval validation, held-out protocol ({m.settings.describe()} vs {source}): Spearman rho "
            f"{v.rho:.3f}{ci} (95% interval), p {format_p(v.p_value)}, {v.n_questions} questions"
        )
    return 0


# (flag, choices with the default first, help) for each ProbEval choice flag.
_CHOICE_FLAGS: tuple[tuple[str, list[str], str], ...] = (
    (
        "--matcher",
        ["wordnet", "embedding", "exact"],
        "wordnet: ProtoQA WordNet matching (the paper's, default); embedding: MiniLM cosine "
        "(an alternative to WordNet); exact: normalised string match only",
    ),
    (
        "--unmatched",
        ["bucket", "discard"],
        'answers matched to no cluster: a "wrong" category in both distributions (default, '
        "the reference code) or discarded",
    ),
    (
        "--ties",
        ["split", "first"],
        "an answer tied between clusters: split evenly (default) or all to the first",
    ),
    (
        "--assignment",
        ["best", "one-to-one"],
        "best: each answer to its best cluster(s) (default, the reference); one-to-one: "
        "ProtoQA's linear_sum_assignment, one answer per cluster",
    ),
    (
        "--partitions",
        ["contiguous", "subsets"],
        "WordNet parts: contiguous token runs (default, more_itertools.partitions) or any subsets",
    ),
    (
        "--stopwords",
        ["nltk", "sklearn"],
        "stop words removed before WordNet matching: nltk's English list (default) or scikit-learn's",
    ),
    (
        "--smoothing",
        ["add-one", "model-only"],
        "add-one: one dummy answer in every category of both sides (default); model-only: the "
        "human side unsmoothed (the reference's automatic-clustering path)",
    ),
    (
        "--preprocess",
        ["protoqa", "normalize"],
        "model answers before WordNet matching: lower case, first 50 characters (default, "
        "ProtoQA's) or llmscope's normalisation (punctuation and leading article dropped)",
    ),
)


def _add_settings_flags(p: Any) -> None:
    """The ProbEval choice flags; every default is the paper's (its reference code's)."""
    for flag, choices, help_text in _CHOICE_FLAGS:
        p.add_argument(flag, choices=choices, default=choices[0], help=help_text)
    p.add_argument(
        "--wordnet-dir",
        help="folder with WordNet 3.0 files (default $WORDNET_DIR or /usr/share/wordnet)",
    )


def add_parsers(sub: Any, ctx: ParserContext) -> None:
    """Register `probeval` and `probeval-validate`."""
    p = sub.add_parser(
        "probeval", help="ProbEval KL of an answers file against clustered human answers"
    )
    p.add_argument("targets", help="CFC/ProtoQA *_targets.jsonl (human answers and clusters)")
    p.add_argument("answers", help='answers JSON: {"model_answers": {qid: [answer, ...]}}')
    _add_settings_flags(p)
    p.add_argument("--json", action="store_true", help="print the per-question KL table as JSON")
    p.set_defaults(func=cmd_probeval)

    v = sub.add_parser(
        "probeval-validate", help="Spearman correlation of automatic and gold ProbEval KL"
    )
    v.add_argument("targets", help="CFC/ProtoQA *_targets.jsonl (human answers and clusters)")
    v.add_argument(
        "--protocol",
        choices=["mixture", "held-out"],
        default=None,
        help="mixture: the paper's Table 2 (answer sets sampled from model, human and uniform "
        "mixtures; the default without --gold); held-out: a held-out half of the human "
        "answers, or --gold labels",
    )
    v.add_argument(
        "--pool",
        metavar="FILE",
        help="mixture: labelled model answers to sample from ({qid: [[answer, "
        "cluster], ...]} or the reference's annotated_prediction_data); default the reference's CFC "
        "pool (every human answer with its cluster, and one answer 'wrong')",
    )
    v.add_argument(
        "--sets", type=int, default=50, help="mixture: answer sets per question (default 50)"
    )
    v.add_argument("--runs", type=int, default=10, help="mixture: runs averaged (default 10)")
    v.add_argument(
        "--sampling",
        choices=["centered", "diverse"],
        default="centered",
        help="mixture: centered (z*model + w1*human + w2*uniform, z in [0.5, 1]; default) or diverse "
        "(w*human + (1-w)*uniform)",
    )
    v.add_argument(
        "--gold",
        metavar="FILE",
        help="held-out: gold labels {qid: [[answer, cluster], ...]} instead "
        "of a held-out half of the human answers",
    )
    _add_settings_flags(v)
    v.add_argument(
        "--frac",
        type=float,
        default=0.5,
        help="held-out: share of human answers held out (default 0.5)",
    )
    v.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the sampling or of the held-out split (default 0)",
    )
    v.add_argument(
        "--json", action="store_true", help="print rho and the per-question figures as JSON"
    )
    v.set_defaults(func=cmd_probeval_validate)
