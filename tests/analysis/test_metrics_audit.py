"""docs/METRICS.md audited against the code: each metric `llmscope report --json` prints for a
small run of every built-in task type (yes/no, choice incl. human choice counts, rating,
generation incl. ProbEval, minimal pairs, SyntaxGym, contamination) of the embedded model is
recomputed from the rows `llmscope export --format jsonl` writes, by hand with numpy / scipy (and sacrebleu /
rouge-score, the reference implementations the definitions name), never with llmscope's metric
code. Intervals are checked where the definition states a closed form (Wilson, Student t,
cluster-t with one row per item, profile likelihood); bootstrap intervals (ece, mce, ece_raw,
mce_raw, commonsensicality, human_ll_per_choice, sg_score overall, probeval_kl) are not
recomputed. `test_every_printed_metric_is_audited` fails on a printed metric this file does not audit.

Not recomputed (SKIPPED, with reasons): pragmatics-choice's condition-level fits, the MiniLM
embedding cosine of generation, and ProbEval's KL and wrong share (the sample-to-cluster
matching is not in the exported rows; their n and range are checked).
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import unicodedata
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import optimize, stats

pytestmark = pytest.mark.slow


def _cli(*args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "llmscope", *args], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _ece_mce(conf: np.ndarray, correct: np.ndarray) -> tuple[float, float]:
    """10 equal-width bins [i/10, (i+1)/10), the last closed; by hand."""
    ece, mce = 0.0, 0.0
    for i in range(10):
        lo, hi = i / 10, (i + 1) / 10
        m = (conf >= lo) & ((conf < hi) if i < 9 else (conf <= hi))
        if m.any():
            gap = abs(correct[m].mean() - conf[m].mean())
            ece += m.sum() / len(conf) * gap
            mce = max(mce, gap)
    return ece, mce


SUITES: tuple[tuple[str, list[str]], ...] = (
    ("commonsense-sample", ["--limit", "12"]),
    ("mc-sample", ["--limit", "10", "--opt", 'schemes=["acc_norm"]']),
    ("rating-sample", ["--limit", "10"]),
    ("generation-sample", ["--limit", "6"]),
    ("minimal-pairs", ["--limit", "8"]),
    ("syntax-sample", ["--limit", "12"]),
    ("contamination-sample", ["--limit", "3", "--opt", "max_new_tokens=24"]),
    # the suite's own extra schemes (free generation, MiniLM embedding...) left out: time
    ("pragmatics-choice", ["--limit", "6", "--opt", 'schemes=["acc_norm"]']),
    ("probeval-oneshot", ["--limit", "2"]),
)
CHOICE = ("mc-sample", "pragmatics-choice")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    d = tmp_path_factory.mktemp("audit")
    db = str(d / "a.duckdb")
    out: dict[str, Any] = {}
    for suite, extra in SUITES:
        _cli(
            "run", "--suite", suite, "--db", db, "--threads", "1", "--quiet", "--no-report", *extra
        )
    report = json.loads(_cli("report", "--db", db, "--json"))
    for suite, _ in SUITES:
        rows = [r for r in report if r.get("suite") == suite]
        run_id = rows[0]["run"]
        lines = _cli("export", "--db", db, "--run", run_id, "--format", "jsonl").splitlines()
        out[suite] = (
            {(r["metric"], json.dumps(r["group"], sort_keys=True)): r["value"] for r in rows},
            [json.loads(x) for x in lines],
            {(r["metric"], json.dumps(r["group"], sort_keys=True)): r for r in rows},
        )
    return out


def _get(rep: dict, metric: str, **group: Any) -> float:
    return rep[(metric, json.dumps(group, sort_keys=True))]


def test_yesno_metrics_recomputed_from_exported_rows(runs: dict[str, Any]) -> None:
    rep, rows, _ = runs["commonsense-sample"]
    ok = [r for r in rows if r["error"] is None]
    py = np.array([r["p_yes"] for r in ok])
    pn = np.array([r["p_no"] for r in ok])
    po = np.array([r["p_other"] for r in ok])
    scored = [r for r in ok if r["correct"] is not None]
    corr = np.array([r["correct"] for r in scored])
    assert _get(rep, "accuracy") == pytest.approx(corr.mean())
    assert _get(rep, "mean_p_yes") == pytest.approx(py.mean())
    assert _get(rep, "mean_p_no") == pytest.approx(pn.mean())
    assert _get(rep, "mean_p_other") == pytest.approx(po.mean())
    assert np.allclose(po, 1 - py - pn, atol=1e-6)
    assert _get(rep, "pred_yes_rate") == pytest.approx(np.mean(py > pn))
    assert _get(rep, "off_format_rate") == pytest.approx(np.mean(po > py + pn))
    g = [(r["p_yes"] > r["p_no"], r["gold"] == "yes") for r in ok if r["gold"] in ("yes", "no")]
    assert _get(rep, "gold_yes_rate") == pytest.approx(np.mean([b for _, b in g]))
    assert _get(rep, "yes_bias") == pytest.approx(np.mean([float(a) - float(b) for a, b in g]))
    # ece: confidence renormalised over yes/no; ece_raw: the raw P(pred)
    conf = np.array([max(r["p_yes"], r["p_no"]) / (r["p_yes"] + r["p_no"]) for r in scored])
    assert np.allclose(conf, [r["confidence"] for r in scored])
    ece, mce = _ece_mce(conf, corr)
    assert _get(rep, "ece") == pytest.approx(ece) and _get(rep, "mce") == pytest.approx(mce)
    raw = np.array([r["probs"][r["prediction"]] for r in scored])
    ece_raw, mce_raw = _ece_mce(raw, corr)
    assert _get(rep, "ece_raw") == pytest.approx(ece_raw) and _get(rep, "mce_raw") == pytest.approx(
        mce_raw
    )
    assert ece_raw != pytest.approx(ece)  # SmolLM2 leaves mass on other tokens: the two differ
    # brier over the listed answers (not renormalised), brier_yes on P(yes)
    brier = [sum((p - (k == r["gold"])) ** 2 for k, p in r["probs"].items()) for r in scored]
    assert _get(rep, "brier") == pytest.approx(np.mean(brier))
    assert _get(rep, "brier_yes") == pytest.approx(
        np.mean([(r["p_yes"] - (r["gold"] == "yes")) ** 2 for r in scored])
    )
    assert _get(rep, "tie_rate") == pytest.approx(
        np.mean([r["p_yes"] == r["p_no"] for r in scored])
    )


@pytest.mark.parametrize("suite", CHOICE)
def test_choice_metrics_recomputed_from_exported_rows(runs: dict[str, Any], suite: str) -> None:
    rep, rows, _ = runs[suite]
    ok = [r for r in rows if r["error"] is None and r["correct"] is not None]
    corr = np.array([r["correct"] for r in ok])
    assert _get(rep, "accuracy") == pytest.approx(corr.mean())

    def method_acc(score: Any, strict: bool = True) -> float:
        hits = []
        for r in ok:
            opts = list(r["option_scores"])
            s = np.array([score(o, r["option_scores"][o]) for o in opts])
            gi = opts.index(r["gold"])
            best = s.max()
            hits.append(
                float(
                    s[gi] == best
                    and (np.sum(s == best) == 1 or not strict)
                    and (strict or int(np.argmax(s)) == gi)
                )
            )
        return float(np.mean(hits))

    assert _get(rep, "accuracy", method="raw") == pytest.approx(
        method_acc(lambda o, v: v["logprob"])
    )
    # per_char divides by the continuation " option" (its space counted) ...
    assert _get(rep, "accuracy", method="per_char") == pytest.approx(
        method_acc(lambda o, v: v["logprob"] / len(" " + o))
    )
    # ... lm-eval's acc_norm by the option text alone, first maximum credited
    assert _get(rep, "accuracy", method="acc_norm") == pytest.approx(
        method_acc(lambda o, v: v["logprob"] / len(o), strict=True)
    )
    assert _get(rep, "accuracy", method="mean_token") == pytest.approx(
        method_acc(lambda o, v: v["logprob"] / v["n_tokens"])
    )
    # expected accuracy (raw): softmax of the log-likelihoods at the gold option
    ea = []
    for r in ok:
        lp = np.array([v["logprob"] for v in r["option_scores"].values()])
        p = np.exp(lp - lp.max()) / np.exp(lp - lp.max()).sum()
        ea.append(p[list(r["option_scores"]).index(r["gold"])])
    assert _get(rep, "expected_accuracy", method="raw") == pytest.approx(np.mean(ea))
    # position: the first / last listed option chosen, and gold there
    for pos, i in (("first", 0), ("last", -1)):
        assert _get(rep, "chosen_rate", position=pos) == pytest.approx(
            np.mean([list(r["option_scores"])[i] == r["prediction"] for r in ok])
        )
        assert _get(rep, "gold_rate", position=pos) == pytest.approx(
            np.mean([list(r["option_scores"])[i] == r["gold"] for r in ok])
        )
    conf = np.array([max(r["probs"].values()) for r in ok])
    ece, mce = _ece_mce(conf, corr)
    assert _get(rep, "ece") == pytest.approx(ece) and _get(rep, "mce") == pytest.approx(mce)
    assert ("ece_raw", "{}") not in rep  # softmax over the options: nothing outside them
    brier = [sum((p - (k == r["gold"])) ** 2 for k, p in r["probs"].items()) for r in ok]
    assert _get(rep, "brier") == pytest.approx(np.mean(brier))
    # scheme_acc_range: max - min over the methods stored with each row of their accuracy
    names = list(ok[0]["extra"]["methods"])
    accs = [np.mean([r["extra"]["methods"][m]["correct"] for r in ok]) for m in names]
    got = _get(rep, "scheme_acc_range", schemes=len(names))
    assert got == pytest.approx(max(accs) - min(accs)) and not math.isnan(got)


Z95 = 1.959963984540054  # the standard normal's 97.5% quantile


def _wilson(k: float, n: int) -> list[float]:
    """Wilson score interval, by hand."""
    p = k / n
    centre = (p + Z95**2 / (2 * n)) / (1 + Z95**2 / n)
    half = Z95 * math.sqrt(p * (1 - p) / n + Z95**2 / (4 * n * n)) / (1 + Z95**2 / n)
    return [max(0.0, centre - half), min(1.0, centre + half)]


def _t_ci(v: np.ndarray, lo: float = -math.inf, hi: float = math.inf) -> list[float]:
    """Student t interval of a mean over independent values, clipped to [lo, hi]."""
    half = stats.t.ppf(0.975, len(v) - 1) * v.std(ddof=1) / math.sqrt(len(v))
    return [max(lo, v.mean() - half), min(hi, v.mean() + half)]


def _ci(full: dict, metric: str, **group: Any) -> list[float]:
    return full[(metric, json.dumps(group, sort_keys=True))]["ci95"]


def _items(suite: str) -> dict[str, dict]:
    """The built-in suite's item file, read directly (group fields, gold sentences)."""
    path = Path(__file__).resolve().parents[2] / "data" / "builtin" / suite / "items.jsonl"
    return {d["id"]: d for d in map(json.loads, path.read_text().splitlines()) if d}


# Metric names each task's audit recomputes; every name the report prints must be here or in
# SKIPPED, so a new metric fails this file until it is audited.
AUDITED: dict[str, set[str]] = {
    "commonsense-sample": set(
        "accuracy mean_p_yes mean_p_no mean_p_other pred_yes_rate off_format_rate gold_yes_rate"
        " yes_bias ece mce ece_raw mce_raw brier brier_yes tie_rate errors bin_accuracy"
        " bin_confidence variant_acc_range variant_acc_sd abstain_rate consensus awareness"
        " commonsensicality human_pearson human_spearman human_ll_uniform human_ll_empirical"
        " fit_alpha human_loglik human_ll_per_choice softmax_accuracy_fitted".split()
    ),
    "mc-sample": set(
        "accuracy expected_accuracy chosen_rate gold_rate ece mce brier scheme_acc_range errors"
        " tie_rate bin_accuracy bin_confidence scheme_disagreement_rate scheme_flip_rate"
        " abstain_rate softmax_accuracy".split()
    ),
    "pragmatics-choice": set(
        "accuracy expected_accuracy chosen_rate gold_rate ece mce brier scheme_acc_range errors"
        " tie_rate bin_accuracy bin_confidence scheme_disagreement_rate scheme_flip_rate"
        " abstain_rate softmax_accuracy human_tv_distance human_majority_agreement"
        " human_ll_uniform human_ll_empirical fit_alpha human_loglik human_ll_per_choice"
        " softmax_accuracy_fitted".split()
    ),
    "rating-sample": set(
        "accuracy ece mce bin_accuracy bin_confidence brier tie_rate abstain_rate"
        " human_rating_share model_rating_share errors".split()
    ),
    "generation-sample": set(
        "accuracy token_f1 bleu_mean chrf_mean rougeL_mean corpus_bleu corpus_chrf errors".split()
    ),
    "minimal-pairs": {
        "accuracy",
        "errors",
        "ece",
        "mce",
        "brier",
        "bin_accuracy",
        "bin_confidence",
        "tie_rate",
    },
    "probeval-oneshot": {"errors"},
    "syntax-sample": {"accuracy", "sg_score", "sg_score_micro", "errors"},
    "contamination-sample": {"flagged_rate", "min_k_prob", "ngram_overlap", "errors"},
}
# Printed but not recomputed here, with the reason.
SKIPPED: dict[str, set[str]] = {
    # MiniLM sentence embeddings: recomputing them would rerun the same embedder model
    "generation-sample": {"embed_cos_mean"},
    # softmax fits after aggregating items to conditions (option types aligned across items):
    # the fit itself is audited at the item level (fit_alpha) and in test_choicefit.py
    "pragmatics-choice": {"condition_fit_alpha", "condition_human_loglik"},
    # ProbEval matches each sample to a human answer cluster (MiniLM / WordNet) when the report
    # is computed; the assignment is not in the exported rows, so only n and range are checked
    # here (the matching and the KL: tests/analysis/test_probeval*.py)
    "probeval-oneshot": {"probeval_kl", "probeval_wrong_share"},
}


@pytest.mark.parametrize("suite", [s for s, _ in SUITES])
def test_every_printed_metric_is_audited(runs: dict[str, Any], suite: str) -> None:
    rep = runs[suite][0]
    printed = {m for m, _ in rep}
    assert printed <= AUDITED[suite] | SKIPPED.get(suite, set()), printed - AUDITED[suite]


def _reliability_bins(rep: dict, conf: np.ndarray, correct: np.ndarray) -> None:
    """bin_accuracy / bin_confidence: the non-empty bins of `ece`, by hand."""
    seen = set()
    for i in range(10):
        lo, hi = i / 10, (i + 1) / 10
        m = (conf >= lo) & ((conf < hi) if i < 9 else (conf <= hi))
        if m.any():
            b = f"{lo:.1f}-{hi:.1f}"
            seen.add(b)
            assert _get(rep, "bin_accuracy", bin=b) == pytest.approx(correct[m].mean())
            assert _get(rep, "bin_confidence", bin=b) == pytest.approx(conf[m].mean())
    assert {json.loads(g)["bin"] for m, g in rep if m == "bin_accuracy"} == seen


def test_bins_and_errors_of_yesno_and_choice(runs: dict[str, Any]) -> None:
    for suite in ("commonsense-sample", *CHOICE):
        rep, rows, _ = runs[suite]
        ok = [r for r in rows if r["error"] is None and r["correct"] is not None]
        conf = np.array([r["confidence"] for r in ok])
        _reliability_bins(rep, conf, np.array([r["correct"] for r in ok]))
        assert _get(rep, "errors") == sum(r["error"] is not None for r in rows)
        top2 = [sorted(r["probs"].values())[-2:] for r in ok]
        assert _get(rep, "tie_rate") == pytest.approx(np.mean([a == b for a, b in top2]))


def test_rating_metrics_recomputed_from_exported_rows(runs: dict[str, Any]) -> None:
    rep, rows, full = runs["rating-sample"]
    items = _items("rating-sample")
    ok = [r for r in rows if r["error"] is None]
    labels = ["1", "2", "3", "4", "5"]
    # prediction: the label of highest probability; correct: it equals the gold rating
    for r in ok:
        assert r["prediction"] == max(labels, key=lambda k: r["probs"][k])
        raw = r["extra"]["raw_probs"]
        assert r["probs"][r["prediction"]] == pytest.approx(
            raw[r["prediction"]] / sum(raw.values())
        )
    corr = np.array([float(r["prediction"] == r["gold"]) for r in ok])
    assert np.array_equal(corr, [r["correct"] for r in ok])
    assert _get(rep, "accuracy") == pytest.approx(corr.mean())
    assert _ci(full, "accuracy") == pytest.approx(_wilson(corr.sum(), len(corr)))
    for cat in {items[r["item_id"]]["category"] for r in ok}:
        c = [x for x, r in zip(corr, ok, strict=True) if items[r["item_id"]]["category"] == cat]
        assert _get(rep, "accuracy", category=cat) == pytest.approx(np.mean(c))
    conf = np.array([max(r["probs"].values()) for r in ok])
    ece, mce = _ece_mce(conf, corr)
    assert _get(rep, "ece") == pytest.approx(ece) and _get(rep, "mce") == pytest.approx(mce)
    _reliability_bins(rep, conf, corr)
    brier = [sum((p - (k == r["gold"])) ** 2 for k, p in r["probs"].items()) for r in ok]
    assert _get(rep, "brier") == pytest.approx(np.mean(brier))
    assert _ci(full, "brier") == pytest.approx(_t_ci(np.array(brier), 0.0, 2.0))
    top2 = [sorted(r["probs"].values())[-2:] for r in ok]
    assert _get(rep, "tie_rate") == pytest.approx(np.mean([a == b for a, b in top2]))
    abstain = [sum(r["extra"]["raw_probs"].values()) == 0 for r in ok]
    assert _get(rep, "abstain_rate") == pytest.approx(np.mean(abstain))
    assert _ci(full, "abstain_rate") == pytest.approx(_wilson(sum(abstain), len(ok)))
    for lab in labels:
        human = np.mean([round(float(items[r["item_id"]]["gold"])) == int(lab) for r in ok])
        assert _get(rep, "human_rating_share", rating=lab) == pytest.approx(human)
        k = sum(r["prediction"] == lab for r in ok)
        assert _get(rep, "model_rating_share", rating=lab) == pytest.approx(k / len(ok))
        assert _ci(full, "model_rating_share", rating=lab) == pytest.approx(_wilson(k, len(ok)))
    assert _get(rep, "errors") == sum(r["error"] is not None for r in rows)


def _canon_number(m: re.Match) -> str:
    whole, frac = m.group(2).lstrip("0") or "0", (m.group(3) or "").rstrip("0")
    num = whole + ("." + frac if frac else "")
    return ("-" if m.group(1) and num != "0" else "") + num


def _answer_norm(text: str) -> str:
    """Answer normalisation as docs/METRICS.md states it (SQuAD with a numbers step), by hand."""
    t = text.lower()
    t = re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", t)  # thousands separators of 3-digit groups
    t = re.sub(
        r"(?<![\w.])([-\u2212])?(\d*)(?:\.(\d+))?(?![\d])",
        lambda m: _canon_number(m) if (m.group(2) or m.group(3)) else m.group(0),
        t,
    )
    out = []
    for i, ch in enumerate(t):
        prev, nxt = t[i - 1] if i else "", t[i + 1] if i + 1 < len(t) else ""
        if unicodedata.category(ch)[0] not in "PS":
            out.append(ch)
        elif ch == "." and prev.isdigit() and nxt.isdigit():
            out.append(ch)  # a decimal point
        elif ch == "-" and nxt.isdigit() and not prev.isalnum():
            out.append(ch)  # a minus sign
        elif prev.isdigit() and nxt.isdigit():
            out.append(" ")  # two numbers never merge
    t = re.sub(r"\b(a|an|the)\b", " ", "".join(out))
    return " ".join(t.split())


def test_generation_metrics_recomputed_from_exported_rows(runs: dict[str, Any]) -> None:
    import sacrebleu
    from rouge_score import rouge_scorer

    rep, rows, full = runs["generation-sample"]
    items = _items("generation-sample")
    ok = [r for r in rows if r["error"] is None]
    preds = [r["extra"]["samples"][0]["text"] for r in ok]
    golds = [items[r["item_id"]]["answers"] for r in ok]
    em, f1 = [], []
    for r, p, gs in zip(ok, preds, golds, strict=True):
        pn = _answer_norm(p)
        assert pn == r["extra"]["samples"][0]["normalised"]
        em.append(float(any(pn == _answer_norm(g) for g in gs)))
        best = 0.0
        for g in gs:
            a, b = pn.split(), _answer_norm(g).split()
            common = sum(min(a.count(w), b.count(w)) for w in set(a))
            if common:
                pr, rc = common / len(a), common / len(b)
                best = max(best, 2 * pr * rc / (pr + rc))
        f1.append(best)
    assert _get(rep, "accuracy") == pytest.approx(np.mean(em))
    assert _ci(full, "accuracy") == pytest.approx(_wilson(sum(em), len(em)), abs=1e-12)
    for cat in {items[r["item_id"]]["category"] for r in ok}:
        c = [x for x, r in zip(em, ok, strict=True) if items[r["item_id"]]["category"] == cat]
        assert _get(rep, "accuracy", category=cat) == pytest.approx(np.mean(c))
    assert _get(rep, "token_f1") == pytest.approx(np.mean(f1))
    # sentence BLEU / chrF (0-100) and ROUGE-L F (0-1, best over golds) from the libraries
    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
    per = {
        "bleu_mean": [
            sacrebleu.sentence_bleu(p, gs).score for p, gs in zip(preds, golds, strict=True)
        ],
        "chrf_mean": [
            sacrebleu.sentence_chrf(p, gs).score for p, gs in zip(preds, golds, strict=True)
        ],
        "rougeL_mean": [
            max(scorer.score(g, p)["rougeL"].fmeasure for g in gs)
            for p, gs in zip(preds, golds, strict=True)
        ],
    }
    for metric, vals in per.items():
        v = np.array(vals)
        assert _get(rep, metric) == pytest.approx(v.mean())
        hi = 1.0 if metric == "rougeL_mean" else 100.0
        if v.std() > 0:  # t interval over rows, clipped to the metric's range
            assert _ci(full, metric) == pytest.approx(_t_ci(v, 0.0, hi))
        else:
            assert _ci(full, metric) is None
    first = [[gs[0] for gs in golds]]
    assert _get(rep, "corpus_bleu") == pytest.approx(sacrebleu.corpus_bleu(preds, first).score)
    assert _get(rep, "corpus_chrf") == pytest.approx(sacrebleu.corpus_chrf(preds, first).score)
    assert _get(rep, "errors") == sum(r["error"] is not None for r in rows)


def test_minimal_pairs_accuracy_recomputed_from_exported_rows(runs: dict[str, Any]) -> None:
    rep, rows, full = runs["minimal-pairs"]
    items = _items("minimal-pairs")
    ok = [r for r in rows if r["error"] is None]
    corr = []
    for r in ok:
        it = items[r["item_id"]]
        good = it["sentences"][it["good"]]
        lp = r["option_logprobs"]
        corr.append(float(all(lp[good] > v for s, v in lp.items() if s != good)))
    assert _get(rep, "accuracy") == pytest.approx(np.mean(corr))
    assert _ci(full, "accuracy") == pytest.approx(_wilson(sum(corr), len(corr)))
    for field in ("phenomenon", "subtype"):
        for val in {items[r["item_id"]][field] for r in ok}:
            c = [x for x, r in zip(corr, ok, strict=True) if items[r["item_id"]][field] == val]
            assert _get(rep, "accuracy", **{field: val}) == pytest.approx(np.mean(c))
    assert _get(rep, "errors") == 0
    # calibration of the forced choice: confidence = P(prediction) of the softmax over sentences
    conf = np.array([max(r["probs"].values()) for r in ok])
    ece, mce = _ece_mce(conf, np.array(corr))
    assert _get(rep, "ece") == pytest.approx(ece) and _get(rep, "mce") == pytest.approx(mce)
    brier = [sum((p - (k == r["gold"])) ** 2 for k, p in r["probs"].items()) for r in ok]
    assert _get(rep, "brier") == pytest.approx(np.mean(brier))
    _reliability_bins(rep, conf, np.array(corr))
    top2 = [sorted(r["probs"].values())[-2:] for r in ok]
    assert _get(rep, "tie_rate") == pytest.approx(np.mean([a == b for a, b in top2]))


def _formula_met(formula: str, conditions: dict) -> bool:
    """A SyntaxGym prediction evaluated on the stored region surprisals (bits)."""

    def region(m: re.Match) -> str:
        return repr(conditions[m.group(2)]["regions"][m.group(1)]["surprisal_bits"])

    expr = re.sub(r"\(\s*(\w+)\s*;\s*%([^%]+)%\s*\)", region, formula)
    expr = expr.replace("[", "(").replace("]", ")").replace("&", " and ").replace("|", " or ")
    return bool(eval(expr, {"__builtins__": {}}))  # only numbers and comparisons remain


def test_syntaxgym_metrics_recomputed_from_exported_rows(runs: dict[str, Any]) -> None:
    rep, rows, full = runs["syntax-sample"]
    items = _items("syntax-sample")
    ok = [r for r in rows if r["error"] is None]
    corr = np.array(
        [
            float(
                all(
                    _formula_met(p["formula"], r["extra"]["conditions"])
                    for p in r["extra"]["predictions"]
                )
            )
            for r in ok
        ]
    )
    assert np.array_equal(corr, [r["correct"] for r in ok])
    assert _get(rep, "accuracy") == pytest.approx(corr.mean())
    # the suite's group_by field (phenomenon) plays the SyntaxGym suite: macro over its values
    phen = [items[r["item_id"]]["phenomenon"] for r in ok]
    per = {}
    for p in sorted(set(phen)):
        c = corr[[x == p for x in phen]]
        per[p] = c.mean()
        assert _get(rep, "sg_score", phenomenon=p) == pytest.approx(c.mean())
        assert _ci(full, "sg_score", phenomenon=p) == pytest.approx(_wilson(c.sum(), len(c)))
        assert _get(rep, "accuracy", phenomenon=p) == pytest.approx(c.mean())
    assert len(per) >= 2
    assert _get(rep, "sg_score") == pytest.approx(np.mean(list(per.values())))
    assert _get(rep, "sg_score_micro") == pytest.approx(corr.mean())
    assert _ci(full, "sg_score_micro") == pytest.approx(_wilson(corr.sum(), len(corr)))
    assert _get(rep, "errors") == 0


def _words(text: str) -> list[str]:
    out = [re.sub(r"^\W+|\W+$", "", t).lower() for t in text.split()]
    return [w for w in out if w]


def test_contamination_metrics_recomputed_from_exported_rows(runs: dict[str, Any]) -> None:
    rep, rows, full = runs["contamination-sample"]
    items = _items("contamination-sample")
    ok = [r for r in rows if r["error"] is None]
    mink, overlap, flagged = [], [], []
    for r in ok:
        e = r["extra"]
        lps = sorted(e["per_token"][0]["logprobs"])
        k = max(1, math.floor(len(lps) * e["mink_k"] / 100))
        mink.append(np.mean(lps[:k]))
        ref, gen = _words(e["reference"]), _words(e["continuation"])
        n = e["ngram"]
        rg = [tuple(ref[i : i + n]) for i in range(len(ref) - n + 1)]
        gg = [tuple(gen[i : i + n]) for i in range(len(gen) - n + 1)]
        overlap.append(sum(min(rg.count(g), gg.count(g)) for g in set(rg)) / len(rg))
        flagged.append(float(overlap[-1] >= 0.5))  # no mink_threshold: the n-gram probe alone
    mink_a, over_a = np.array(mink), np.array(overlap)
    assert _get(rep, "min_k_prob") == pytest.approx(mink_a.mean())
    assert _ci(full, "min_k_prob") == pytest.approx(_t_ci(mink_a))
    assert _get(rep, "ngram_overlap") == pytest.approx(over_a.mean())
    if over_a.std() > 0:
        assert _ci(full, "ngram_overlap") == pytest.approx(_t_ci(over_a, 0.0, 1.0))
    assert _get(rep, "flagged_rate") == pytest.approx(np.mean(flagged))
    assert _ci(full, "flagged_rate") == pytest.approx(_wilson(sum(flagged), len(flagged)))
    kinds = [items[r["item_id"]]["kind"] for r in ok]
    for kind in set(kinds):
        m = np.array([k == kind for k in kinds])
        assert _get(rep, "min_k_prob", kind=kind) == pytest.approx(mink_a[m].mean())
        assert _get(rep, "ngram_overlap", kind=kind) == pytest.approx(over_a[m].mean())
        assert _get(rep, "flagged_rate", kind=kind) == pytest.approx(np.array(flagged)[m].mean())
    assert _get(rep, "errors") == 0


def _fit_alpha(scores: np.ndarray, chosen: np.ndarray) -> tuple[float, Any]:
    """Maximum-likelihood softmax inverse temperature, by scipy's bounded scalar search."""

    def ll(a: float) -> float:
        z = a * scores
        z = z - z.max(axis=1, keepdims=True)
        lp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
        return float(lp[np.arange(len(chosen)), chosen].sum())

    res = optimize.minimize_scalar(
        lambda a: -ll(a), bounds=(-100, 100), method="bounded", options={"xatol": 1e-10}
    )
    return float(res.x), ll


def test_commonsense_and_human_fit_metrics_recomputed(runs: dict[str, Any]) -> None:
    """consensus / awareness (Wilson over statements), the human correlations and the softmax
    fit of q1; commonsensicality's and human_ll_per_choice's bootstrap intervals are not
    recomputed (bootstrap), their point values are."""
    rep, rows, full = runs["commonsense-sample"]
    items = {str(k): v for k, v in _items("commonsense-sample").items()}
    ok = [r for r in rows if r["error"] is None]
    by_var: dict[str, list[float]] = {}
    for r in ok:
        if r["correct"] is not None:
            by_var.setdefault(r["variant"], []).append(r["correct"])
    accs = [np.mean(v) for v in by_var.values()]
    assert _get(rep, "variant_acc_range") == pytest.approx(max(accs) - min(accs))
    assert _get(rep, "variant_acc_sd") == pytest.approx(np.std(accs, ddof=1))
    assert _get(rep, "abstain_rate") == pytest.approx(
        np.mean([r["p_yes"] + r["p_no"] == 0 for r in ok])
    )
    q1 = [r for r in ok if r["variant"] == "q1"]
    q2 = {r["item_id"]: r for r in ok if r["variant"] == "q2"}
    human_yes = np.array([items[r["item_id"]]["human_q1"] > 0.5 for r in q1])
    cons = np.array([r["p_yes"] > r["p_no"] for r in q1]) == human_yes
    q2_yes = np.array([q2[r["item_id"]]["p_yes"] > q2[r["item_id"]]["p_no"] for r in q1])
    aware = q2_yes == human_yes
    assert _get(rep, "consensus") == pytest.approx(cons.mean())
    assert _ci(full, "consensus") == pytest.approx(_wilson(cons.sum(), len(cons)))
    assert _get(rep, "awareness") == pytest.approx(aware.mean())
    assert _ci(full, "awareness") == pytest.approx(_wilson(aware.sum(), len(aware)))
    assert _get(rep, "commonsensicality") == pytest.approx(math.sqrt(cons.mean() * aware.mean()))
    py = np.array([r["p_yes"] for r in q1])  # the raw P(yes), not renormalised
    hq = np.array([items[r["item_id"]]["human_q1"] for r in q1], dtype=float)
    assert _get(rep, "human_pearson") == pytest.approx(np.corrcoef(py, hq)[0, 1])
    assert _get(rep, "human_spearman") == pytest.approx(stats.spearmanr(py, hq).statistic)
    # softmax fit (scheme raw: the log-probabilities of yes and no) to the human q1 choice
    scores = np.log([[r["p_yes"], r["p_no"]] for r in q1])
    chosen = np.where(human_yes, 0, 1)
    alpha, ll = _fit_alpha(scores, chosen)
    g = {"variant": "q1", "scheme": "raw"}
    assert _get(rep, "fit_alpha", **g) == pytest.approx(alpha, rel=1e-6)
    # profile-likelihood interval: the alphas within chi2(1; 0.95) / 2 of the maximum
    cut = ll(alpha) - stats.chi2.ppf(0.95, 1) / 2
    lo = optimize.brentq(lambda a: ll(a) - cut, alpha - 100, alpha)
    hi = optimize.brentq(lambda a: ll(a) - cut, alpha, alpha + 100)
    assert _ci(full, "fit_alpha", **g) == pytest.approx([lo, hi], rel=1e-4)
    assert _get(rep, "human_loglik", **g) == pytest.approx(ll(alpha), rel=1e-8)
    assert _get(rep, "human_ll_per_choice", **g) == pytest.approx(ll(alpha) / len(q1), rel=1e-8)
    z = alpha * scores
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    assert _get(rep, "softmax_accuracy_fitted", **g) == pytest.approx(
        p[np.arange(len(q1)), chosen].mean(), rel=1e-6
    )
    # one human choice per statement: uniform 1/2 each; the empirical distribution is certain
    assert _get(rep, "human_ll_uniform", variant="q1") == pytest.approx(len(q1) * math.log(0.5))
    assert _get(rep, "human_ll_empirical", variant="q1") == pytest.approx(0.0)


@pytest.mark.parametrize("suite", CHOICE)
def test_choice_scheme_and_softmax_metrics_recomputed(runs: dict[str, Any], suite: str) -> None:
    rep, rows, full = runs[suite]
    ok = [r for r in rows if r["error"] is None and r["correct"] is not None]
    names = list(ok[0]["extra"]["methods"])
    preds = [{r["extra"]["methods"][m]["prediction"] for m in names} for r in ok]
    flips = [{r["extra"]["methods"][m]["correct"] for m in names} for r in ok]
    k = sum(len(x) > 1 for x in preds)
    assert _get(rep, "scheme_disagreement_rate", schemes=len(names)) == pytest.approx(k / len(ok))
    assert _ci(full, "scheme_disagreement_rate", schemes=len(names)) == pytest.approx(
        _wilson(k, len(ok))
    )
    k = sum(len(x) > 1 for x in flips)
    assert _get(rep, "scheme_flip_rate", schemes=len(names)) == pytest.approx(k / len(ok))
    assert _ci(full, "scheme_flip_rate", schemes=len(names)) == pytest.approx(_wilson(k, len(ok)))
    finite = [any(np.isfinite(v["logprob"]) for v in r["option_scores"].values()) for r in ok]
    assert _get(rep, "abstain_rate") == pytest.approx(1 - np.mean(finite))
    seen = 0
    for (m, g), value in rep.items():
        if m == "softmax_accuracy":
            grp = json.loads(g)
            key = {"raw": "logprob", "labels": "label_prob"}.get(grp["scheme"], grp["scheme"])
            vals = []
            for r in ok:
                sv = np.array([v[key] for v in r["option_scores"].values()], dtype=float)
                if grp["scheme"] in ("calibrated", "labels"):  # probabilities: their log
                    sv = np.log(sv)
                z = grp["alpha"] * sv
                p = np.exp(z - z.max()) / np.exp(z - z.max()).sum()
                vals.append(p[list(r["option_scores"]).index(r["gold"])])
            assert value == pytest.approx(np.mean(vals))
            assert full[(m, g)]["ci95"] == pytest.approx(_t_ci(np.array(vals), 0.0, 1.0))
            seen += 1
    assert seen


def test_human_choice_count_metrics_recomputed(runs: dict[str, Any]) -> None:
    """pragmatics-choice's human choice counts against the model: distances, agreement and the
    softmax fit (scheme raw) by maximum likelihood over the counts."""
    rep, rows, full = runs["pragmatics-choice"]
    items = _items("pragmatics-choice")
    ok = [r for r in rows if r["error"] is None and r["correct"] is not None]
    counts = [
        np.array(
            [
                dict(
                    zip(
                        items[r["item_id"]]["options"],
                        items[r["item_id"]]["human_counts"],
                        strict=True,
                    )
                )[o]
                for o in r["option_scores"]
            ],
            dtype=float,
        )
        for r in ok
    ]
    tv, agree = [], []
    for r, c in zip(ok, counts, strict=True):
        m = np.array(list(r["probs"].values()))
        m = m / m.sum()
        tv.append(0.5 * np.abs(c / c.sum() - m).sum())
        agree.append(float(np.argmax(m) == np.argmax(c)))  # first listed wins a tie
    assert _get(rep, "human_tv_distance") == pytest.approx(np.mean(tv))
    assert _ci(full, "human_tv_distance") == pytest.approx(_t_ci(np.array(tv), 0.0, 1.0))
    assert _get(rep, "human_majority_agreement") == pytest.approx(np.mean(agree))
    assert _ci(full, "human_majority_agreement") == pytest.approx(_wilson(sum(agree), len(ok)))
    total = sum(c.sum() for c in counts)
    uniform = sum(c.sum() * math.log(1 / len(c)) for c in counts)
    empirical = sum(sum(k * math.log(k / c.sum()) for k in c if k > 0) for c in counts)
    assert _get(rep, "human_ll_uniform") == pytest.approx(uniform)
    assert _get(rep, "human_ll_empirical") == pytest.approx(empirical)
    scores = np.array([[v["logprob"] for v in r["option_scores"].values()] for r in ok])
    cmat = np.array(counts)

    def ll(a: float) -> float:
        z = a * scores
        z = z - z.max(axis=1, keepdims=True)
        return float((cmat * (z - np.log(np.exp(z).sum(axis=1, keepdims=True)))).sum())

    res = optimize.minimize_scalar(
        lambda a: -ll(a), bounds=(-100, 100), method="bounded", options={"xatol": 1e-10}
    )
    alpha = float(res.x)
    assert _get(rep, "fit_alpha", scheme="raw") == pytest.approx(alpha, rel=1e-5)
    cut = ll(alpha) - stats.chi2.ppf(0.95, 1) / 2
    lo = optimize.brentq(lambda a: ll(a) - cut, alpha - 100, alpha)
    hi = optimize.brentq(lambda a: ll(a) - cut, alpha, alpha + 100)
    assert _ci(full, "fit_alpha", scheme="raw") == pytest.approx([lo, hi], rel=1e-4)
    assert _get(rep, "human_loglik", scheme="raw") == pytest.approx(ll(alpha), rel=1e-8)
    assert _get(rep, "human_ll_per_choice", scheme="raw") == pytest.approx(
        ll(alpha) / total, rel=1e-8
    )
    z = alpha * scores
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    gold = [list(r["option_scores"]).index(r["gold"]) for r in ok]
    assert _get(rep, "softmax_accuracy_fitted", scheme="raw") == pytest.approx(
        p[np.arange(len(ok)), gold].mean(), rel=1e-6
    )


def test_probeval_counts_and_errors(runs: dict[str, Any]) -> None:
    rep, rows, full = runs["probeval-oneshot"]
    ok = [r for r in rows if r["error"] is None]
    assert _get(rep, "errors") == len(rows) - len(ok) == 0
    # KL over the questions, wrong share over every sample of every question
    assert full[("probeval_kl", "{}")]["n"] == len({r["item_id"] for r in ok})
    assert full[("probeval_wrong_share", "{}")]["n"] == sum(len(r["extra"]["samples"]) for r in ok)
    assert _get(rep, "probeval_kl") >= 0 and 0 <= _get(rep, "probeval_wrong_share") <= 1
